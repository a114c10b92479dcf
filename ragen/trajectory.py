"""What a rollout produces: one ``Trajectory`` per episode, with its exact token ids and one ``TurnRecord`` per turn."""

from __future__ import annotations

import json
from typing import Any

import attrs

TRUNCATION_REASONS = (None, "max_turns", "budget", "context_overflow", "env")


@attrs.define
class TurnRecord:
    """One model turn: what was sampled, what the parser found, what the env did."""

    response_text: str  #: decoded sampled ids (special tokens kept)
    answer: str | None  #: parsed answer, None when the response did not match the format
    executed: list[str]  #: actions the env executed
    invalid: list[str]  #: pieces rejected by ``validate_action``
    reward: float  #: env reward of the turn (no penalty)
    penalty: float  #: format penalty of the turn (0 or -0.1)
    format_ok: bool  #: matched the format, parsed >= 1 action, none invalid (no penalty)
    info: dict[str, float]  #: numeric entries of the last step's info (bools as 0/1)
    truncated_response: bool  #: generation hit ``response_length`` (no EOS sampled)
    span: tuple[int, int]  #: [start, end) of the sampled ids in ``input_ids``
    finish_reason: str = "stop"  #: 'stop' | 'length'


@attrs.define
class Trajectory:
    """One episode as trained on: ``input_ids = P_1 A_1 D_2 A_2 … A_T`` with ``loss_mask`` 1 exactly on A_t."""

    env_name: str
    seed: int
    group_id: int
    rollout_index: int
    split: str
    policy_version: int
    input_ids: list[int]
    loss_mask: list[int]
    rollout_logprobs: list[float]  #: engine log-probs on mask-1 positions, 0.0 elsewhere
    segments: list[tuple[str, int, int]]  #: (kind, start, end), kind in prompt | response | delta | eos_fill
    turns: list[TurnRecord] = attrs.Factory(list)
    reward: float = 0.0  #: Σ env rewards
    penalty: float = 0.0  #: Σ format penalties
    success: bool = False
    truncated: bool = False
    truncation_reason: str | None = None
    task_id: str | None = None
    blocks: list[int] = attrs.Factory(list)  #: starts of the blocks after the first (history window; empty = one conversation)

    @property
    def score(self) -> float:
        """The raw trajectory score R_i = reward + penalty."""
        return self.reward + self.penalty

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def response_length(self) -> int:
        """Number of trained (sampled) tokens: Σ loss_mask."""
        return int(sum(self.loss_mask))

    @property
    def last_token_index(self) -> int:
        """Index of the last sampled token (where outcome rewards go), or the last token if none was sampled."""
        for j in range(len(self.loss_mask) - 1, -1, -1):
            if self.loss_mask[j]:
                return j
        return len(self.input_ids) - 1

    @property
    def episode_id(self) -> str:
        return f"{self.split}/{self.env_name}/s{self.seed}/g{self.group_id}/r{self.rollout_index}"

    def to_dict(self) -> dict[str, Any]:
        data = attrs.asdict(self, recurse=True)
        data["segments"] = [list(s) for s in self.segments]
        for turn in data["turns"]:
            turn["span"] = list(turn["span"])
        data.update(score=self.score, num_turns=self.num_turns, response_length=self.response_length)
        return data

    def to_json(self) -> str:
        """One JSONL line."""
        return json.dumps(self.to_dict(), ensure_ascii=False, allow_nan=False, default=float)
