"""One episode under the core's budget and action handling (spec 1.2), shared by rollouts, play and the checker."""

from __future__ import annotations

from typing import Any

import attrs

from ragen.contract.env import Env

FORMAT_PENALTY = -0.1


@attrs.define
class TurnResult:
    """What one model turn did to the env."""

    reward: float  #: sum of the executed steps' env rewards (no penalty)
    penalty: float  #: the format penalty for this turn (0 or ``FORMAT_PENALTY``)
    executed: list[str]  #: actions the env executed, in order
    invalid: list[str]  #: pieces rejected by ``validate_action`` (not executed, no budget used)
    obs: str
    info: dict[str, Any]  #: the last executed step's info ({} if nothing ran)
    done: bool
    success: bool
    truncated: bool


@attrs.define
class Episode:
    """Drives one env through turns: split, validate, execute within budget, penalise bad format."""

    env: Env
    format_penalty: float = FORMAT_PENALTY
    turn: int = 0
    actions_used: int = 0
    done: bool = False
    success: bool = False
    truncated: bool = False
    obs: str = ""
    info: dict = attrs.Factory(dict)
    no_action_last_turn: bool = False

    def reset(self, seed: int, options: dict | None = None) -> str:
        self.obs, self.info = self.env.reset(seed=seed, options=options)
        self.turn = self.actions_used = 0
        self.done = self.success = self.truncated = self.no_action_last_turn = False
        return self.obs

    @property
    def actions_left(self) -> int:
        return self.env.config.max_actions_per_episode - self.actions_used

    def step_turn(self, answer: str | None) -> TurnResult:
        """Apply one turn. ``answer`` is the parsed answer text, or None when the response did not match the format."""
        if self.done:
            raise RuntimeError("episode is over")
        cfg = self.env.config
        self.turn += 1
        pieces = self.env.split_actions(answer)[: cfg.max_actions_per_turn] if answer is not None else []
        invalid = [p for p in pieces if not self.env.validate_action(p)]
        valid = [p for p in pieces if self.env.validate_action(p)]
        penalty = self.format_penalty if (answer is None or not pieces or invalid) else 0.0
        executed: list[str] = []
        reward, info, ended = 0.0, {}, False
        for action in valid:
            if self.actions_used >= cfg.max_actions_per_episode:
                break
            self.obs, r, terminated, truncated, info = self.env.step(action)
            self.actions_used += 1
            executed.append(action)
            reward += r
            if terminated or truncated:
                ended = True
                self.truncated = bool(truncated and not info.get("success"))
                break
        if executed:
            self.success = bool(info.get("success", False))
        if not ended and self.actions_used >= cfg.max_actions_per_episode:
            ended, self.truncated = True, not self.success
        if not ended and self.turn >= cfg.max_turns:
            ended, self.truncated = True, True
        self.done = ended
        self.no_action_last_turn = not executed
        return TurnResult(reward, penalty, executed, invalid, self.obs, info, ended, self.success, self.truncated)
