"""Chat templates ragen supplies for packaged models whose files carry none (a base model's GGUF file).

Only official templates, copied verbatim: a template written from memory would differ from the one the family was
instruction-tuned on in some whitespace, and the model would see a format it was never trained to read. A model
without a template that has no entry here is refused at load (``ragen.models.load``), never given a guessed one.
"""

from __future__ import annotations

#: Gemma 3's chat template: ``_CHAT_TEMPLATE`` of transformers' ``src/transformers/models/gemma3/
#: convert_gemma3_weights.py`` (huggingface/transformers, commit 0d7e95d9; the script that writes it into converted
#: Gemma 3 checkpoints), with its newlines inside Jinja string literals written as ``\n`` escapes, as the
#: google/gemma-3-*-it ``tokenizer_config.json`` files write them (the same rendering). No system role: a system
#: message becomes the first user turn's prefix plus a blank line; roles ``user`` and ``model``; each turn is
#: ``<start_of_turn>ROLE\n`` + the trimmed content + ``<end_of_turn>\n``; ``<bos>`` once at the start.
GEMMA3_CHAT_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\\n'}}
{%- endif -%}
"""
