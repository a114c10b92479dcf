"""What a rollout produces: one ``Trajectory`` per episode, with its exact token ids and one ``TurnRecord`` per turn."""

from __future__ import annotations

import json
from typing import Any

import attrs

from ragen.contract.env import option

TRUNCATION_REASONS = (None, "max_turns", "budget", "context_overflow", "env")

#: ``TurnRecord.info`` keys the core adds when the env's expert can judge actions (``Expert.optimal_actions``): the
#: turn's executed actions it judged, those it found optimal, and the sum of the judged states' chance levels
#: (|optimal| / |action_names|). Absent, not 0, when nothing was judged (docs/report.md, "State dependence").
ACTIONS_JUDGED, ACTIONS_OPTIMAL, ACTIONS_CHANCE = "actions_judged", "actions_optimal", "actions_chance"
#: ``TurnRecord.info`` keys of ``Env.potential()`` before the turn's first action and after its last (both or none)
POTENTIAL_START, POTENTIAL_END = "potential_start", "potential_end"
DIAGNOSTIC_KEYS = (ACTIONS_JUDGED, ACTIONS_OPTIMAL, ACTIONS_CHANCE, POTENTIAL_START, POTENTIAL_END)


@attrs.define
class TurnRecord:
    """One model turn: what was sampled, what the parser found, what the env did."""

    response_text: str = option(
        doc="str: the decoded sampled ids of the turn (special tokens kept), without the prefill."
    )
    answer: str | None = option(doc="str | None: the parser's answer, None when the response did not match the format.")
    executed: list[str] = option(doc="list[str]: the actions the env executed, in order.")
    invalid: list[str] = option(doc="list[str]: answer pieces rejected by Env.validate_action (not executed).")
    reward: float = option(doc="float: the env reward of the turn, summed over its actions (no penalty).")
    penalty: float = option(doc="float: the format penalty of the turn (0, or trainer.format_penalty).")
    format_ok: bool = option(doc="bool: the response matched the format, parsed >= 1 action and none was invalid.")
    info: dict[str, float] = option(
        doc="dict[str, float]: numeric entries of the turn's last step info (bools as 0/1), "
        "plus the core's diagnostics where the env supports them: actions_judged, "
        "actions_optimal, actions_chance (Expert.optimal_actions), potential_start, "
        "potential_end (Env.potential)."
    )
    truncated_response: bool = option(doc="bool: generation hit the response length (no EOS sampled).")
    span: tuple[int, int] = option(doc="(int, int): [start, end) of the turn's sampled ids in Trajectory.input_ids.")
    finish_reason: str = option("stop", "str: 'stop' (EOS sampled), 'new_message' (the template's message-opening "
                                        "token sampled: the turn is unfinished and malformed) or 'length'.")


@attrs.define
class Trajectory:
    """One episode as trained on: ``input_ids = P_1 A_1 D_2 A_2 … A_T`` with ``loss_mask`` 1 exactly on A_t."""

    env_name: str = option(doc="str: the env variant, e.g. 'sokoban'.")
    seed: int = option(doc="int: the episode seed (shared by every member of a group).")
    group_id: int = option(doc="int: the env group within the step (FilterInput/ShapeInput group ids).")
    rollout_index: int = option(doc="int: the member's index within its group.")
    split: str = option(doc="str: 'train', 'val' or 'test'.")
    policy_version: int = option(doc="int: the trainer step whose weights sampled it.")
    input_ids: list[int] = option(doc="list[int]: every token of the episode: prompts, sampled responses, env replies.")
    loss_mask: list[int] = option(doc="list[int]: 1 on the sampled tokens (trained on), 0 elsewhere; len(input_ids).")
    rollout_logprobs: list[float] = option(
        doc="list[float]: the engine's log-probs on mask-1 positions, 0.0 elsewhere."
    )
    segments: list[tuple[str, int, int]] = option(
        doc="list[(kind, start, end)]: token spans, kind in prompt | response | delta | eos_fill."
    )
    turns: list[TurnRecord] = option(factory=list, doc="list[ragen.TurnRecord]: one record per model turn.")
    reward: float = option(0.0, "float: Σ env rewards of the episode.")
    penalty: float = option(0.0, "float: Σ format penalties of the episode.")
    success: bool = option(False, "bool: the env reported success.")
    truncated: bool = option(False, "bool: the episode ended without the env terminating it.")
    truncation_reason: str | None = option(
        None, "str | None: why it was truncated: max_turns, budget, context_overflow, env; None when the env ended it."
    )
    task_id: str | None = option(None, "str | None: the env's task id from reset (identifies the instance).")
    blocks: list[int] = option(factory=list, doc="list[int]: token starts of the blocks after the first (a history "
                                                 "window, rollout.max_context_window; empty = one conversation).")

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
