"""Token accounting of one multi-turn conversation (algorithms.md §1.1): the fixed-base delta rendering.

``ChatFormat`` studies a tokenizer's chat template once: the end-of-turn token and the closing text after it, the
rendering of the constant base conversation B = [system "x", user "x", assistant "x"], and whether the template is
prefix-preserving (the startup check). ``ChatContext`` then grows one trajectory's ids segment by segment:

    P_1 (mask 0)  A_1 (mask 1)  [eos_fill (mask 0)]  D_2 (mask 0)  A_2 (mask 1) ...

Only new text is tokenized (the first prompt, then each delta on its own); the conversation is never re-tokenized.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ragen.errors import ConfigError

BASE = [
    {"role": "system", "content": "x"},
    {"role": "user", "content": "x"},
    {"role": "assistant", "content": "x"},
]

#: kinds of segments and their loss-mask flag
SEGMENT_MASK = {"prompt": 0, "response": 1, "delta": 0, "eos_fill": 0}


def _render(tokenizer: Any, messages: list[dict], add_generation_prompt: bool) -> str:
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    except Exception as exc:  # jinja errors, missing template, unsupported roles
        raise ConfigError(
            f"the tokenizer's chat template cannot render a system/user/assistant conversation: {exc}"
        ) from None
    if not isinstance(text, str):
        raise ConfigError("the tokenizer's apply_chat_template(tokenize=False) did not return text")
    return text


def turn_end(tokenizer: Any) -> tuple[int, str, str]:
    """``(eos_id, eos_text, closing_text)``: the token ending an assistant turn and the text the template puts after it.

    Found from the template: render [system, user] with the generation prompt and B; what follows the assistant
    content "x" in B is ``eos_text + closing_text`` (Qwen: ``<|im_end|>`` + ``"\\n"``).
    """
    head = _render(tokenizer, BASE[:2], True)
    full = _render(tokenizer, BASE, False)
    if not full.startswith(head + "x"):
        raise ConfigError(
            "the chat template does not render the assistant turn after its generation prompt (not prefix-preserving)"
        )
    tail = full[len(head) + 1 :]
    ids = tokenizer(tail, add_special_tokens=False)["input_ids"] if tail else []
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    if ids and (ids[0] in special or ids[0] in added):
        eos_text = tokenizer.convert_ids_to_tokens(ids[0])
        if tail.startswith(eos_text):
            return ids[0], eos_text, tail[len(eos_text) :]
    eos_text = tokenizer.eos_token
    if eos_text and eos_text in tail:
        return tokenizer.eos_token_id, eos_text, tail[tail.index(eos_text) + len(eos_text) :]
    raise ConfigError(
        f"cannot find the end-of-turn token in the chat template (text after an assistant turn: {tail!r})"
    )


def turn_start(tokenizer: Any) -> int | None:
    """The special token that opens a chat message (ChatML ``<|im_start|>``, Llama 3 ``<|start_header_id|>``), or
    None when the template has no such token.

    Found from the template: what the generation prompt adds after [system, user] starts with it. A policy that
    samples it has left its own turn and is writing the next message (a user turn, a prompt); the engines stop there
    (``stop_ids``), so a derailed turn costs one token, not the whole response budget, and is penalised as malformed.
    """
    bare = _render(tokenizer, BASE[:2], False)
    head = _render(tokenizer, BASE[:2], True)
    if not head.startswith(bare) or head == bare:
        return None
    ids = tokenizer(head[len(bare):], add_special_tokens=False)["input_ids"]
    special = set(getattr(tokenizer, "all_special_ids", []) or []) | set(
        getattr(tokenizer, "added_tokens_decoder", {}) or {}
    )
    if not ids or ids[0] not in special or ids[0] == turn_end(tokenizer)[0]:  # an end-of-turn id never opens one
        return None
    return int(ids[0])


def as_id_list(value: Any) -> list[int]:
    """Token ids from an ``eos_token_id`` field: None, an int, a list or a tensor (tokenizers and generation configs
    disagree on which)."""
    if value is None:
        return []
    if isinstance(value, (list, tuple, set)):
        return [int(v) for v in value if v is not None]
    if hasattr(value, "flatten"):  # a tensor
        return [int(v) for v in value.flatten().tolist()]
    return [int(value)]


def stop_ids(tokenizer: Any, model: Any = None) -> list[int]:
    """The ids a rollout engine stops on by default: the tokenizer's and the model's EOS ids, the chat template's
    end-of-turn token and its message-opening token (``turn_start``)."""
    ids = as_id_list(getattr(tokenizer, "eos_token_id", None))
    ids += as_id_list(getattr(getattr(model, "generation_config", None), "eos_token_id", None))
    if getattr(tokenizer, "chat_template", None):
        ids.append(turn_end(tokenizer)[0])
        start = turn_start(tokenizer)
        if start is not None:
            ids.append(start)
    return list(dict.fromkeys(int(i) for i in ids))


class ChatFormat:
    """The per-tokenizer facts the delta rendering needs, computed once (plus the prefix-preservation check)."""

    def __init__(self, tokenizer: Any, enable_think: bool = True, check_prefix: bool = True):
        self.tokenizer = tokenizer
        self.enable_think = enable_think
        self.prefill = "<think>" if enable_think else "<answer>"
        self.eos_id, self.eos_text, self.closing_text = turn_end(tokenizer)
        self.start_id = turn_start(tokenizer)  # a turn that stops on it is unfinished: it gets the EOS fill
        self.base_text = _render(tokenizer, BASE, False)
        if check_prefix:
            self.check_prefix_preserving()

    # ---- text ---------------------------------------------------------------------------------------
    def prompt_text(self, system: str, user: str) -> str:
        """P_1 as text: template([system, user], generation prompt) + prefill."""
        msgs = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return _render(self.tokenizer, msgs, True) + self.prefill

    def delta_text(self, user: str) -> str:
        """D_{t+1} as text: closing text + (template(B + [user], gen) − template(B)) + prefill."""
        full = _render(self.tokenizer, BASE + [{"role": "user", "content": user}], True)
        if not full.startswith(self.base_text):
            raise ConfigError(
                "the chat template re-renders earlier turns when a user message is added (not prefix-preserving)"
            )
        return self.closing_text + full[len(self.base_text) :] + self.prefill

    # ---- ids ----------------------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_ids(self, system: str, user: str) -> list[int]:
        return self.encode(self.prompt_text(system, user))

    def delta_ids(self, user: str) -> list[int]:
        return self.encode(self.delta_text(user))

    # ---- startup check ------------------------------------------------------------------------------
    def check_prefix_preserving(self, turns: int = 3) -> None:
        """Render a dummy conversation incrementally (our deltas) and in full; refuse templates that disagree.

        Templates that strip earlier reasoning (Qwen3) or re-render history fail here: training on the full
        conversation would then train on tokens the model never saw.
        """
        system = "You're a helpful assistant. Check."
        users = [f"\nTurn {t}:\nState:\nobs {t}\n" for t in range(1, turns + 1)]
        bodies = [
            f"reasoning about step {t}</think><answer>Up</answer>" if self.enable_think else "Up</answer>"
            for t in range(1, turns + 1)
        ]
        messages = [{"role": "system", "content": system}]
        built = self.prompt_text(system, users[0])
        for t in range(turns):
            messages += [
                {"role": "user", "content": users[t]},
                {"role": "assistant", "content": self.prefill + bodies[t]},
            ]
            if t > 0:
                built += self.delta_text(users[t])
            built += bodies[t] + self.eos_text
            full = _render(self.tokenizer, messages, False)
            incremental = _render(self.tokenizer, messages[:-1], True) + self.prefill + bodies[t]
            for label, text in (("incremental", incremental), ("delta", built)):
                if not full.startswith(text):
                    at = next((i for i, (a, b) in enumerate(zip(full, text)) if a != b), min(len(full), len(text)))
                    raise ConfigError(
                        f"the chat template is not prefix-preserving ({label} rendering of turn {t + 1} differs "
                        f"from the full conversation at char {at}: {text[at : at + 40]!r} vs "
                        f"{full[at : at + 40]!r}); templates that "
                        "strip earlier reasoning (e.g. Qwen3) need a prefix-preserving template override or "
                        "context_mode=per_turn"
                    )


class ChatContext:
    """One trajectory's ids, loss mask, rollout log-probs and segments, grown without re-tokenizing.

    ``window`` k > 0 (``rollout.max_context_window``): turn t's prompt holds the system prompt, turns t-k..t-1 and
    turn t's user text. While no turn is dropped the row grows as in full mode; from turn k+2 on each turn starts a
    new *block* of the row: its whole windowed prompt (mask 0), rebuilt from the ids already held (the first kept
    turn's user text rendered as P_1, then its sampled ids, EOS fill and the deltas after it), then its response.
    ``blocks`` lists where blocks after the first start; the trainer attends within a block only
    (docs/history-window.md).
    """

    def __init__(self, fmt: ChatFormat, system: str, user: str, window: int = 0):
        self.fmt, self.system, self.window = fmt, system, int(window)
        self.input_ids: list[int] = []
        self.loss_mask: list[int] = []
        self.logprobs: list[float] = []
        self.segments: list[tuple[str, int, int]] = []
        self.blocks: list[int] = []  #: start of each block after the first (empty: one conversation)
        self._users = [user]  #: user text of each turn (1-based turn t at index t-1)
        self._turns: list[list[int]] = []  #: per finished turn: its sampled ids + EOS fill (what later prompts show)
        self._deltas: list[list[int]] = []  #: D_{t+1} ids of each turn t, tokenized once
        self._append("prompt", fmt.prompt_ids(system, user))

    @property
    def block_start(self) -> int:
        return self.blocks[-1] if self.blocks else 0

    def __len__(self) -> int:
        return len(self.input_ids)

    def _append(self, kind: str, ids: Sequence[int], logprobs: Sequence[float] | None = None) -> tuple[int, int]:
        start = len(self.input_ids)
        ids = [int(i) for i in ids]
        if logprobs is not None and len(logprobs) != len(ids):
            raise ValueError(f"{len(ids)} ids but {len(logprobs)} log-probs")
        self.input_ids.extend(ids)
        self.loss_mask.extend([SEGMENT_MASK[kind]] * len(ids))
        self.logprobs.extend([float(x) for x in logprobs] if logprobs is not None else [0.0] * len(ids))
        end = len(self.input_ids)
        if end > start:
            self.segments.append((kind, start, end))
        return start, end

    def add_response(self, token_ids: Sequence[int], logprobs: Sequence[float]) -> tuple[int, int]:
        """Append the engine's ids verbatim (mask 1); returns their span."""
        self._turns.append([int(i) for i in token_ids])
        return self._append("response", token_ids, logprobs)

    def next_user(self, user: str, ended_with_eos: bool) -> list[tuple[str, list[int]]]:
        """The pieces to append before the next turn: the EOS fill (if the turn hit the length cap) and D_{t+1} or,
        when the window drops a turn, one ``prompt`` piece: the next turn's whole windowed prompt (a new block)."""
        fill = [] if ended_with_eos else [self.fmt.eos_id]
        self._turns[-1] += fill
        self._users.append(user)
        self._deltas.append(self.fmt.delta_ids(user))
        nxt = len(self._users)  # the 1-based number of the coming turn
        if self.window and nxt - self.window > 1:
            return [("prompt", self._window_prompt(nxt - self.window))]
        return ([("eos_fill", fill)] if fill else []) + [("delta", self._deltas[-1])]

    def _window_prompt(self, first: int) -> list[int]:
        """System + turns first..(last finished) + the coming turn's user text, from ids already held."""
        ids = self.fmt.prompt_ids(self.system, self._users[first - 1])
        for t in range(first, len(self._users)):
            ids += self._turns[t - 1] + self._deltas[t - 1]
        return ids

    def next_prompt_len(self, pieces: Sequence[tuple[str, list[int]]]) -> int:
        """Length of the next engine prompt once ``pieces`` are appended (what ``max_model_len`` caps)."""
        added = sum(len(ids) for _, ids in pieces)
        return added if pieces and pieces[0][0] == "prompt" else len(self) - self.block_start + added

    def extend(self, pieces: Sequence[tuple[str, list[int]]]) -> None:
        for kind, ids in pieces:
            if kind == "prompt":
                self.blocks.append(len(self.input_ids))
            self._append(kind, ids)

    def prompt(self) -> list[int]:
        """The ids the engine continues from (a copy): the current block."""
        return self.input_ids[self.block_start:]
