"""``check_env``: the contract checks run on every registered env variant (``ragen check-env NAME``)."""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Callable

import attrs
from gymnasium.utils import env_checker as gym_checker

from ragen.contract.env import INFO_BOOLS, Env
from ragen.contract.trajectory import ACTIONS_JUDGED, ACTIONS_OPTIMAL, POTENTIAL_END
from ragen.envs.episode import Episode
from ragen.plugins.components import component_config, make_env
from ragen.plugins.loader import get_registry


@attrs.frozen
class Check:
    name: str
    ok: bool
    detail: str = ""


class CheckFailed(AssertionError):
    pass


def _expect(cond: bool, msg: str) -> None:
    if not cond:
        raise CheckFailed(msg)


def check_env(name: str, *, seeds: int = 10, expert_episodes: int = 20, **options) -> list[Check]:
    """Run every contract check on a fresh instance of ``name``; returns one ``Check`` per check.

    Bad ``options`` (an unknown key, a value out of range) raise one ``ConfigError`` naming the option, before any
    check runs: they are the caller's mistake, not six failures of the env."""
    component_config(get_registry("env").get(name), options, path=name)

    def new() -> Env:
        return make_env(name, **options)

    return run_checks(_CHECKS, new, seeds=seeds, expert_episodes=expert_episodes)


def run_checks(table, new, **kwargs) -> list[Check]:
    """Run each ``(label, fn)`` of ``table`` as ``fn(new, **kwargs)``: a returned detail passes, an exception fails
    that check only (every failure is reported, the other checks still run)."""
    checks: list[Check] = []
    for label, fn in table:
        try:
            checks.append(Check(label, True, fn(new, **kwargs) or ""))
        except Exception as exc:  # noqa: BLE001 - a check's failure is its result
            checks.append(Check(label, False, f"{type(exc).__name__}: {exc}"))
    return checks


def _gymnasium(new, **_) -> str:
    env = new()
    try:
        with warnings.catch_warnings():
            # ragen envs are not made through gymnasium.make, so gymnasium cannot try other render modes
            warnings.filterwarnings("ignore", message=".*alternative render modes.*")
            gym_checker.check_env(env, skip_close_check=False)
    finally:
        env.close()
    return "gymnasium.utils.env_checker.check_env passed"


def _attributes(new, **_) -> str:
    env = new()
    try:
        obs, info = env.reset(seed=0)
        _expect(isinstance(obs, str), f"reset obs is {type(obs).__name__}, not str")
        for key in ("task_id", "seed", "split"):
            _expect(key in info, f"reset info lacks {key!r}")
        _expect(isinstance(env.instructions, str), "instructions is not a str")
        _expect(env.action_names is None or all(isinstance(a, str) for a in env.action_names), "bad action_names")
        _expect(env.render() == obs, "render() differs from the last observation")
        for attr in ("max_turns", "max_actions_per_turn", "max_actions_per_episode", "max_tokens", "response_length"):
            _expect(getattr(env.config, attr) >= 1, f"config.{attr} < 1")
    finally:
        env.close()
    return f"task_id={info['task_id']}"


def _actions_for(env: Env, rng: random.Random) -> str:
    if env.action_names:
        return rng.choice(env.action_names)
    if env.expert is not None and rng.random() < 0.5:
        plan = env.expert.next_actions(env, 1)
        if plan:
            return plan[0]
    return rng.choice(["0", "a", "hello", "1 + 1", "place 1 at row 1 col 1"])


def _determinism(new, seeds: int, **_) -> str:
    a, b = new(), new()
    initial, retried = set(), 0
    try:
        for seed in range(seeds):
            problem = _replay(a, b, seed, initial)
            if problem is not None:
                # One replay from a fresh reset: an env that runs real programs under a wall clock (deepcoder's
                # sandbox on a loaded machine) can differ once by a timeout; a real missing seed differs again.
                retried += 1
                problem = _replay(a, b, seed, initial)
            _expect(problem is None, problem or "")
        if a.procedural and seeds >= 2:
            _expect(len(initial) >= 2, f"only {len(initial)} distinct initial observation(s) over {seeds} seeds")
    finally:
        a.close()
        b.close()
    again = f" ({retried} seed(s) matched only on a replay)" if retried else ""
    return f"{len(initial)} distinct initial observations over {seeds} seeds{again}"


def _replay(a: Env, b: Env, seed: int, initial: set) -> str | None:
    """Play the same seeded actions on ``a`` from ``reset(seed)``, then on ``b``; the first difference, or None. One
    episode is open at a time (each ends with ``end_episode``), so an env served with a single session passes."""
    played = []
    for env in (a, b):
        obs, info = env.reset(seed=seed)
        rng, steps = random.Random(seed), []
        for _ in range(env.config.max_actions_per_episode):
            step = env.step(_actions_for(env, rng))
            steps.append(repr(step))
            if step[2] or step[3]:
                break
        env.end_episode()
        played.append((obs, info["task_id"], steps))
    (oa, ta, sa), (ob, tb, sb) = played
    if not (oa == ob and ta == tb):
        return f"seed {seed}: two instances differ after reset"
    initial.add(oa)
    if sa != sb:
        return f"seed {seed}: same actions gave different steps"
    return None


def _random_episode(new, seeds: int, **_) -> str:
    env = new()
    rng = random.Random(0)
    lengths = []
    try:
        for seed in range(seeds):
            ep = Episode(env)
            ep.reset(seed=seed)
            while not ep.done:
                actions = " || ".join(_actions_for(env, rng) for _ in range(env.config.max_actions_per_turn))
                res = ep.step_turn(actions)
                _expect(isinstance(res.obs, str), "step obs is not a str")
                _expect(math.isfinite(res.reward), f"non-finite reward {res.reward}")
                if res.executed:
                    for key in INFO_BOOLS:
                        _expect(isinstance(res.info.get(key), bool), f"step info {key!r} is not a bool")
                    _expect(env.render() == res.obs, "render() differs from the last observation")
            lengths.append(ep.turn)
            if env._done:
                try:
                    env.step(env.action_names[0] if env.action_names else "x")
                except RuntimeError:
                    pass
                else:
                    raise CheckFailed("stepping after the end did not raise RuntimeError")
    finally:
        env.close()
    return f"{seeds} random episodes ended after {min(lengths)}-{max(lengths)} turns"


def _expert(new, expert_episodes: int, **_) -> str:
    env = new()
    try:
        env.reset(seed=0)
        if env.expert is None:
            return "no expert"
        wins, judged, optimal, potentials = 0, 0.0, 0.0, 0
        for i in range(expert_episodes):
            ep = Episode(env)
            ep.reset(seed=10_000 + i)
            while not ep.done:
                plan = env.expert.next_actions(env, env.config.max_actions_per_turn)
                sep = f" {env.action_separator} " if env.action_separator else ""
                res = ep.step_turn((sep.join(plan) if sep else plan[0]) if plan else None)
                judged += res.diagnostics.get(ACTIONS_JUDGED, 0.0)
                optimal += res.diagnostics.get(ACTIONS_OPTIMAL, 0.0)
                potentials += _check_potential(res)
            wins += ep.success
        if env.deterministic:
            _expect(wins == expert_episodes, f"expert solved {wins}/{expert_episodes} episodes of a deterministic env")
        # the expert's own moves must be among the moves its optimal_actions calls optimal, or the metric lies
        _expect(optimal == judged, f"Expert.optimal_actions judged only {optimal:g} of the expert's own {judged:g} "
                                   "actions optimal")
        extra = f"; its {judged:g} judged actions all optimal" if judged else ""
        extra += f"; potential checked at {potentials} turn ends" if potentials else ""
        return f"expert solved {wins}/{expert_episodes} episodes" + extra
    finally:
        env.close()


def _check_potential(res) -> int:
    """Env.potential()'s contract at a turn end: 0 exactly on solved states, below 0 elsewhere. 1 if checked."""
    if POTENTIAL_END not in res.diagnostics:
        return 0
    phi = res.diagnostics[POTENTIAL_END]
    _expect(phi == 0.0 if res.success else phi < 0.0,
            f"Env.potential() is {phi:g} in a {'solved' if res.success else 'unsolved'} state (0 exactly when solved)")
    return 1


def _close(new, **_) -> str:
    env = new()
    env.reset(seed=0)
    env.close()
    env.close()  # idempotent
    _expect(env.closed, "close() did not mark the env closed")
    return "close() is idempotent"


_CHECKS: list[tuple[str, Callable[..., str]]] = [
    ("gymnasium", _gymnasium),
    ("attributes", _attributes),
    ("determinism", _determinism),
    ("random episodes", _random_episode),
    ("expert", _expert),
    ("close", _close),
]
