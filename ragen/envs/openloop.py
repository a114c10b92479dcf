"""Open-loop baselines: what a fixed action sequence, played blind (the env alone: no model, no observation read),
scores on a run's levels.

A policy whose success a blind replay of one sequence matches is not reading its state, whatever its curve says
(docs/diagnosis.md, ``blind-policy``). Two baselines, both free for any env with a fixed list of action names:

* ``replay``: a given sequence (e.g. the policy's own most frequent one) on given levels, level by level;
* ``best_fixed_sequence``: the best of *every* sequence of ``length`` actions on some levels (chosen on training
  levels, then scored on held-out ones by ``replay``), where ``len(action_names) ** length`` is at most
  ``MAX_SEQUENCES`` (Sokoban and FrozenLake: 4 actions x 10 steps, about 1 M sequences).

The exhaustive search walks the tree of action prefixes once per level, copying the env at each branch: a prefix that
ended the episode (solved, failed or truncated) decides every sequence that extends it, so its subtree is never
walked; and for an env that declares deterministic transitions, prefixes that reach the same observation at the same
depth share one subtree (a reachability table), so a level costs its distinct states, not 4**10 walks. The result per
level is one bool per sequence (in base-``len(action_names)`` order, first action most significant); the counts over
the levels pick the best. ``tests/envs/test_openloop.py`` checks both shortcuts against a brute-force replay of every
sequence.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

import attrs
import numpy as np

from ragen.contract.env import Env

#: the most sequences the exhaustive search scores: 4 actions x 10 steps (Sokoban's and FrozenLake's default budget)
#: is 1,048,576 one-byte flags per level, a few MB; beyond that a shorter length is searched (a blind sequence that
#: does well in fewer steps is still a lower bound on what blind play reaches)
MAX_SEQUENCES = 4**10
#: how many of the policy's most frequent action sequences are replayed blind: the first few cover most episodes of a
#: policy that ignores its state (one sequence on every level), and each replay costs one episode per level
TOP_SEQUENCES = 5

#: a level: (env name, seed, split, rollout index), as a trajectory row records it
Level = tuple[str, int, str, int]


def action_budget(env: Env) -> int:
    """The most actions an episode executes: the per-episode budget, or turns x actions per turn if fewer."""
    cfg = env.config
    return min(cfg.max_actions_per_episode, cfg.max_turns * cfg.max_actions_per_turn)


def supports(env: Env) -> str | None:
    """None when the baselines apply to ``env``, else why not (in words): they need a fixed list of action names."""
    if not env.action_names:
        return f"{env.name}: no fixed list of action names (they change from level to level, or are free text)"
    if env.episode_weight.heavy:
        return f"{env.name}: an episode starts a process (replaying thousands of them is not cheap)"
    return None


def _reset(env: Env, level: Level) -> None:
    _, seed, split, index = level
    env.reset(seed=int(seed), options={"split": split, "rollout_index": int(index)})


def play(env: Env, level: Level, sequence: Sequence[str]) -> bool:
    """Play ``sequence`` blind on ``level`` within the env's action budget: whether the episode was solved."""
    _reset(env, level)
    success = False
    for action in list(sequence)[: action_budget(env)]:
        _, _, terminated, truncated, info = env.step(action)
        success = bool(info.get("success", False))
        if terminated or truncated:
            break
    return success


def replay(make: Callable[[str], Env], sequence: Sequence[str], levels: Iterable[Level]) -> dict[Level, bool]:
    """Each level's outcome of ``sequence`` played blind; ``make(env_name)`` gives a fresh env of the run's options
    (one per env name, reused across levels)."""
    envs: dict[str, Env] = {}
    try:
        out = {}
        for level in levels:
            env = envs.get(level[0]) or envs.setdefault(level[0], make(level[0]))
            out[level] = play(env, level, sequence)
        return out
    finally:
        for env in envs.values():
            env.close()


def frequent_sequences(sequences: Iterable[Sequence[str]],
                       top: int = TOP_SEQUENCES) -> list[tuple[tuple[str, ...], int]]:
    """The ``top`` most frequent non-empty sequences with their counts (ties: first seen first)."""
    counts = Counter(tuple(s) for s in sequences if len(s))
    return counts.most_common(top)


# ---- the exhaustive search ------------------------------------------------------------------------------------------


#: what the contract says a step never changes (the config is frozen; spaces, expert and names are set once): shared,
#: not copied, by ``snapshot``
_STATIC = ("config", "observation_space", "action_space", "expert", "action_names", "symbol_legend", "instructions")
SHARING = ("state", "state+depth", "none")


def snapshot(env: Env) -> Env:
    """A copy of ``env`` in its current state that can be stepped on its own (``copy.deepcopy``, sharing what a step
    never changes)."""
    memo = {id(v): v for k in _STATIC if (v := env.__dict__.get(k)) is not None}
    return copy.deepcopy(env, memo)


def sharing(env: Env, length: int) -> str:
    """How prefixes may share subtrees: "state" (by observation) for deterministic envs, "state+depth" when the env
    truncates on its own step count (``config.max_steps``) within ``length`` steps, "none" for stochastic envs."""
    if not env.deterministic:
        return "none"
    limit = getattr(env.config, "max_steps", None)
    return "state+depth" if isinstance(limit, int) and limit < length else "state"


def solved_table(env: Env, level: Level, length: int, *, share: str | None = None) -> np.ndarray:
    """One bool per sequence of ``length`` actions from ``env.action_names`` (base-n order, first action most
    significant): whether playing it blind solves ``level``.

    ``share`` (default ``sharing(env, length)``): "state" lets every prefix that reaches the same observation use one
    subtree, so the env is stepped once per reachable state and action (exact for envs whose observation shows their
    whole state and whose transitions are deterministic: the env's own step count enters only through
    ``config.max_steps``, which "state+depth" keys on too); "none" walks every prefix that has not ended."""
    actions = list(env.action_names or ())
    n = len(actions)
    share = share or sharing(env, length)
    if share not in SHARING:
        raise ValueError(f"share: one of {', '.join(SHARING)}, got {share!r}")
    if length <= 0:
        return np.zeros(1, dtype=bool)
    _reset(env, level)

    def key_of(obs: Any, depth: int, path: tuple[int, ...]) -> Hashable:
        return obs if share == "state" else (obs, depth) if share == "state+depth" else path

    root = key_of(env.render(), 0, ())
    nodes: dict[Hashable, Env] = {root: env}  #: reached states not yet expanded
    moves: dict[Hashable, list[tuple[Hashable | None, bool]]] = {}  #: state -> (next state or None if ended, solved)
    tables: dict[tuple[Hashable, int], np.ndarray] = {}

    def expand(key: Hashable, depth: int, path: tuple[int, ...]) -> list[tuple[Hashable | None, bool]]:
        node = nodes.pop(key)
        out = []
        for i, action in enumerate(actions):
            child = node if i == n - 1 else snapshot(node)  # the last branch may consume the node itself
            obs, _, terminated, truncated, info = child.step(action)
            solved = bool(info.get("success", False))
            if terminated or truncated:
                out.append((None, solved))
                continue
            ck = key_of(obs, depth + 1, (*path, i))
            if ck not in moves and ck not in nodes:
                nodes[ck] = child
            out.append((ck, solved))
        moves[key] = out
        return out

    def table(key: Hashable, left: int, depth: int, path: tuple[int, ...]) -> np.ndarray:
        if (key, left) in tables:
            return tables[(key, left)]
        parts = []
        for i, (child, solved) in enumerate(moves.get(key) or expand(key, depth, path)):
            if child is None or left == 1:  # the episode ended here, or the budget did: decides every extension
                parts.append(np.full(n ** (left - 1), solved))
            else:
                parts.append(table(child, left - 1, depth + 1, (*path, i)))
        out = np.concatenate(parts)
        if share != "none":  # a path key never repeats
            tables[(key, left)] = out
        return out

    return table(root, length, 0, ())


@attrs.frozen
class FixedSequence:
    """The best fixed sequence found on some levels."""

    actions: tuple[str, ...]
    levels: int  #: levels it was chosen on
    success: float  #: its success on those levels
    searched: int  #: sequences compared


def search_length(env: Env) -> int:
    """The sequence length the exhaustive search uses: the action budget, shortened until ``n ** length`` fits
    ``MAX_SEQUENCES``."""
    n, length = len(env.action_names or ()), action_budget(env)
    while n > 1 and length > 0 and n**length > MAX_SEQUENCES:
        length -= 1
    return length


def best_fixed_sequence(make: Callable[[str], Env], levels: Sequence[Level]) -> FixedSequence:
    """The sequence of ``search_length`` actions that solves the most of ``levels`` played blind (ties: the first in
    base-n order). All levels must be of one env."""
    names = {lv[0] for lv in levels}
    if len(names) != 1:
        raise ValueError(f"best_fixed_sequence: levels of one env expected, got {sorted(names)}")
    env = make(levels[0][0])
    try:
        actions, length = list(env.action_names or ()), search_length(env)
        counts = np.zeros(len(actions) ** length, dtype=np.int32)
        for level in levels:
            counts += solved_table(env, level, length)
    finally:
        env.close()
    best = int(np.argmax(counts))
    digits = []
    for _ in range(length):
        best, d = divmod(best, len(actions))
        digits.append(actions[d])
    return FixedSequence(actions=tuple(reversed(digits)), levels=len(levels),
                         success=float(counts.max()) / max(len(levels), 1), searched=int(counts.size))
