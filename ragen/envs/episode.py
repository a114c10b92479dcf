"""One episode under the core's budget and action handling (spec 1.2), shared by rollouts, play and the checker."""

from __future__ import annotations

import math
from typing import Any

import attrs

from ragen.contract.env import Env, check_step_types
from ragen.contract.trajectory import ACTIONS_CHANCE, ACTIONS_JUDGED, ACTIONS_OPTIMAL, POTENTIAL_END, POTENTIAL_START

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
    #: the core's per-turn diagnostics (``ragen.contract.trajectory.DIAGNOSTIC_KEYS``): only the keys the env supports
    diagnostics: dict[str, float] = attrs.Factory(dict)


def judge(env: Env, action: str) -> tuple[float, float] | None:
    """(1.0 if ``action`` is optimal in the env's current state else 0.0, the state's chance level |optimal| /
    |action_names|), or None when the expert cannot say (no expert, no ``optimal_actions``, no action names)."""
    ask = getattr(env.expert, "optimal_actions", None)
    if ask is None or not env.action_names:
        return None
    best = ask(env)
    if best is None:
        return None
    names = set(env.action_names)
    return float(env.canonical_action(action) in best), len(names & set(best)) / len(names)


def potential_of(env: Env) -> float | None:
    """``env.potential()``, None when the env has none; a non-finite value would poison every shaped turn after it,
    so it counts as none."""
    ask = getattr(env, "potential", None)
    value = ask() if ask is not None else None
    return float(value) if value is not None and math.isfinite(float(value)) else None


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
    potential: float | None = None  #: ``Env.potential()`` of the current state (None: the env has none)

    def reset(self, seed: int, options: dict | None = None) -> str:
        self.obs, self.info = self.env.reset(seed=seed, options=options)
        self.turn = self.actions_used = 0
        self.done = self.success = self.truncated = self.no_action_last_turn = False
        self.potential = potential_of(self.env)
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
        judged: list[tuple[float, float]] = []
        for action in valid:
            if self.actions_used >= cfg.max_actions_per_episode:
                break
            verdict = judge(self.env, action)  # in the state the action is applied to
            if verdict is not None:
                judged.append(verdict)
            self.obs, r, terminated, truncated, info = self.env.step(action)
            check_step_types(self.env, terminated, truncated, info)  # also an env that overrides step() itself
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
        diagnostics = self._diagnostics(judged, changed=bool(executed))
        return TurnResult(reward, penalty, executed, invalid, self.obs, info, ended, self.success, self.truncated,
                          diagnostics)

    def _diagnostics(self, judged: list[tuple[float, float]], changed: bool) -> dict[str, float]:
        """The turn's action verdicts and its potentials; a turn that executed nothing left the state (and Phi) as
        it was, so the env is not asked again."""
        out: dict[str, float] = {}
        if judged:
            out[ACTIONS_JUDGED] = float(len(judged))
            out[ACTIONS_OPTIMAL] = sum(ok for ok, _ in judged)
            out[ACTIONS_CHANCE] = sum(chance for _, chance in judged)
        before = self.potential
        if changed:
            self.potential = potential_of(self.env)
        if before is not None and self.potential is not None:
            out[POTENTIAL_START], out[POTENTIAL_END] = before, self.potential
        return out
