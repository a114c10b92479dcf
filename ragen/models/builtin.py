"""The built-in models (``tiny``, ``small``): built offline in a few seconds from a byte-level BPE tokenizer trained in
code on text the envs themselves produce (system prompts, turn texts, reward texts, expert-style responses), wrapped
with a ChatML (Qwen2.5-style) chat template, and a randomly initialised 2-layer ``Qwen2ForCausalLM``. Same seed and
envs => the same files.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator, Sequence
from pathlib import Path

from ragen.contract.env import Env
from ragen.errors import ConfigError
from ragen.log import log

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

#: ChatML as Qwen2.5 renders it (system/user/assistant); generation prompt ``<|im_start|>assistant\n``
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

TINY_DIRNAME = "tiny-model"
#: Built-in, randomly initialised Qwen2 sizes (architecture arguments of ``build_tiny_model``). ``tiny`` is for tests
#: and smoke runs; ``small``, the default of ``ragen run``, is the smallest size measured to read the envs' boards
#: after a warm start (docs/models.md has the measurements). Both are warm-started by default (ragen.warmstart.cache).
BUILTIN_MODELS: dict[str, dict[str, int]] = {
    "tiny": {"hidden_size": 128, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1, "intermediate_size": 256},
    "small": {"hidden_size": 256, "num_layers": 2, "num_heads": 4, "num_kv_heads": 1, "intermediate_size": 512},
}
CORPUS_SEEDS = 50


# --------------------------------------------------------------------------------------------------------------


def _generic_corpus() -> Iterator[str]:
    """Frame text that every env shares, both think modes, both warnings, rewards and small numbers."""
    from ragen.envs.prompt import reward_text, turn_text

    for think in (True, False):
        yield turn_text(1, "x", 10, 400, warning=True, enable_think=think)
    for r in (-0.1, -0.3, 0.0, 0.5, 1.0, 10.0, -1.0, 0.9, 10.7):
        yield reward_text(r)
    yield " ".join(str(i) for i in range(200))
    yield "<think> I should move. </think><answer> Up </answer>" * 3
    yield "<|im_start|>system\n<|im_end|>\n<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n<think>"


def _format_answer(env: Env, actions: Sequence[str]) -> str:
    sep = f" {env.action_separator} " if env.action_separator else ""
    return sep.join(actions) if sep else (actions[0] if actions else "")


def env_corpus(env: Env, seeds: int = CORPUS_SEEDS, seed: int = 0) -> Iterator[str]:
    """Text one env produces in the RAGEN frame: prompts of expert (or random) episodes and their responses.

    An episode that raises (at reset or in a step) is skipped whole and counted in one warning: the corpus is best
    effort, and an env that fails for some seeds must not stop ``ragen run`` at start-up (the rollout skips and counts
    those seeds the same way)."""
    rng = random.Random(seed)
    failed: list[str] = []
    for s in range(seeds):
        try:
            texts = list(_episode_texts(env, s, rng))
        except Exception as exc:  # noqa: BLE001 - any env error: skip the seed
            failed.append(f"seed {s}: {type(exc).__name__}: {exc}")
            continue
        yield from texts
    if failed:
        log.warning("tokenizer_corpus_episodes_skipped", env=getattr(env, "name", type(env).__name__),
                    raised=len(failed), episodes=seeds, first=failed[0])


def _episode_texts(env: Env, s: int, rng: random.Random) -> Iterator[str]:
    from ragen.envs.episode import Episode
    from ragen.envs.prompt import reward_text, system_prompt, turn_text

    cfg = env.config
    ep = Episode(env)
    ep.reset(seed=s)
    yield system_prompt(env)
    yield turn_text(1, ep.obs, ep.actions_left, cfg.max_tokens)
    while not ep.done:
        plan: list[str] = []
        rationale = "Let me think about the state."
        if env.expert is not None:
            try:
                plan = list(env.expert.next_actions(env, cfg.max_actions_per_turn))
                rationale = env.expert.rationale(env) or rationale
            except Exception:  # a corpus is best effort: fall back to random actions
                plan = []
        if not plan and env.action_names:
            plan = [rng.choice(env.action_names) for _ in range(cfg.max_actions_per_turn)]
        answer = _format_answer(env, plan) if plan else None
        yield f"<think>{rationale}</think><answer>{answer or ''}</answer><|im_end|>"
        res = ep.step_turn(answer)
        if not ep.done:
            yield reward_text(res.reward) + turn_text(
                ep.turn + 1, ep.obs, ep.actions_left, cfg.max_tokens, warning=not res.executed
            )


def build_corpus(envs: Sequence[str | Env], seeds: int = CORPUS_SEEDS) -> list[str]:
    """Texts to train the tiny tokenizer on; ``envs`` are registered variant names or env instances."""
    from ragen.plugins.components import make_env

    texts = list(_generic_corpus())
    for item in envs:
        try:
            env = make_env(item) if isinstance(item, str) else item
        except ConfigError:  # a variant that cannot be built without options (remote: its URL); byte-level BPE
            continue  # still encodes its text, only in more tokens
        try:
            texts.extend(env_corpus(env, seeds=seeds))
        finally:
            if isinstance(item, str):
                env.close()
    return texts


#: Characters that always stand alone as one token: punctuation and symbols, the underscore, digits, and a capital
#: letter not followed by a lower-case one. Grid rows (``#PX_O#``, ``_P__``) then become one token per cell, so the
#: model sees the board cell by cell at fixed offsets instead of as BPE merges that differ from row to row, and
#: coordinates become one token per digit. Words (``Player``, ``Up``) still merge as usual.
CELL_PATTERN = r"[^\w\s]|_|\d|[A-Z](?![a-z])"


def train_tokenizer(texts: Sequence[str], vocab_size: int = 1024, cell_tokens: bool = True):
    """A byte-level BPE ``PreTrainedTokenizerFast`` with the ChatML template, eos ``<|im_end|>``, pad ``<|endoftext|>``.

    ``cell_tokens`` isolates the characters of ``CELL_PATTERN`` before BPE (see there); ``False`` is plain byte-level
    BPE.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(CELL_PATTERN), "isolated"), byte_level])
                         if cell_tokens else byte_level)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],  # v5 renames it extra_special_tokens
        clean_up_tokenization_spaces=False,
        model_max_length=4096,
    )
    hf.chat_template = CHATML_TEMPLATE
    return hf


def build_tiny_model(
    out_dir: str | os.PathLike,
    env_names: Sequence[str | Env] = (),
    seed: int = 0,
    vocab_size: int = 1024,
    hidden_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 2,
    num_kv_heads: int = 1,
    intermediate_size: int = 256,
    max_position_embeddings: int = 4096,
    corpus_seeds: int = CORPUS_SEEDS,
) -> str:
    """Build the tiny tokenizer + random Qwen2 model into ``out_dir`` (a normal HF directory); returns its path."""
    return build_from_corpus(
        out_dir, build_corpus(env_names, seeds=corpus_seeds), [env_label(e) for e in env_names], seed=seed,
        vocab_size=vocab_size, hidden_size=hidden_size, num_layers=num_layers, num_heads=num_heads,
        num_kv_heads=num_kv_heads, intermediate_size=intermediate_size, max_position_embeddings=max_position_embeddings,
    )


def build_from_corpus(
    out_dir: str | os.PathLike,
    corpus: Sequence[str],
    env_labels: Sequence[str],
    seed: int = 0,
    vocab_size: int = 1024,
    hidden_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 2,
    num_kv_heads: int = 1,
    intermediate_size: int = 256,
    max_position_embeddings: int = 4096,
) -> str:
    """``build_tiny_model`` from a corpus already built (``models.cache`` hashes the corpus for its key first)."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    tokenizer = train_tokenizer(corpus, vocab_size=vocab_size)
    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=hidden_size // num_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out)
    model.save_pretrained(out)
    (out / "RAGEN_TINY").write_text(f"seed={seed} vocab_size={vocab_size} envs={list(env_labels)}\n")
    return str(out)


def env_label(item: str | Env) -> str:
    return item if isinstance(item, str) else getattr(item, "name", type(item).__name__)


