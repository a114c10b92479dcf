"""The open-loop baselines (ragen/envs/openloop.py) against brute force: every sequence of a short length played from
a copy of the reset env, on real Sokoban and FrozenLake levels, must give the same table as the prefix walk with each
way of sharing subtrees; and the best fixed sequence must be the brute-force best."""

from __future__ import annotations

import copy
import itertools

import numpy as np
import pytest

from ragen.envs import openloop
from ragen.plugins.components import make_env


def brute_force(env, level, length: int) -> np.ndarray:
    """Each sequence of ``length`` actions (base-n order) played on its own copy of the reset env."""
    openloop._reset(env, level)
    start = copy.deepcopy(env)
    out = []
    for seq in itertools.product(env.action_names, repeat=length):
        e = copy.deepcopy(start)
        solved = False
        for a in seq:
            _, _, terminated, truncated, info = e.step(a)
            solved = bool(info["success"])
            if terminated or truncated:
                break
        out.append(solved)
    return np.array(out)


@pytest.mark.parametrize("name, options, seeds, length", [
    ("sokoban", {}, (10000, 10004), 5),  # 10000: no 5-action solution, 10004: some
    ("frozenlake", {}, (10000, 10001), 5),
])
def test_the_prefix_walk_equals_brute_force_with_every_sharing(name, options, seeds, length):
    env = make_env(name, **options)
    for seed in seeds:
        level = (name, seed, "train", 0)
        expected = brute_force(env, level, length)
        assert expected.any() or (name, seed) == ("sokoban", 10000)  # the comparisons are not all-False
        for share in openloop.SHARING:
            got = openloop.solved_table(env, level, length, share=share)
            assert got.shape == expected.shape and (got == expected).all(), (seed, share)


def test_an_env_that_counts_its_own_steps_shares_by_state_and_depth():
    """FrozenLake truncating after 3 steps: sharing by observation alone would reuse a subtree reached at another
    depth (wrong, as checked here), so the default keys on the depth too, and matches brute force."""
    env = make_env("frozenlake", max_steps=3)
    level = ("frozenlake", 10000, "train", 0)
    expected = brute_force(env, level, 5)
    assert (openloop.solved_table(env, level, 5) == expected).all()
    assert (openloop.solved_table(env, level, 5, share="none") == expected).all()
    assert not (openloop.solved_table(env, level, 5, share="state") == expected).all()


def test_sharing_by_state_is_refused_where_the_env_counts_its_own_steps():
    assert openloop.sharing(make_env("frozenlake", max_steps=3), 5) == "state+depth"
    assert openloop.sharing(make_env("frozenlake"), 10) == "state"
    assert openloop.sharing(make_env("frozenlake-slippery"), 10) == "none"


def test_the_best_fixed_sequence_is_the_brute_force_best_and_replays_to_its_score():
    """Budget 4 actions (4**4 sequences) on 6 FrozenLake training levels: the search's pick has the brute-force
    count (ties go to the first in base-n order), and replaying it blind gives the same successes."""
    options = {"max_actions_per_episode": 4, "max_turns": 2}

    def make(name):
        return make_env(name, **options)

    levels = [("frozenlake", 10000 + i, "train", 0) for i in range(6)]
    best = openloop.best_fixed_sequence(make, levels)
    env = make("frozenlake")
    counts = sum(brute_force(env, lv, 4).astype(int) for lv in levels)
    top = int(np.argmax(counts))
    assert best.searched == 4**4 and best.levels == 6
    assert best.actions == tuple(itertools.product(env.action_names, repeat=4))[top]
    assert best.success == counts.max() / 6
    assert sum(openloop.replay(make, best.actions, levels).values()) == counts.max()


def test_the_search_length_fits_the_sequence_limit(monkeypatch):
    env = make_env("sokoban")
    assert openloop.action_budget(env) == 10 and openloop.search_length(env) == 10  # 4**10 is the limit itself
    monkeypatch.setattr(openloop, "MAX_SEQUENCES", 4**6)
    assert openloop.search_length(env) == 6


def test_replay_plays_within_the_budget_and_frequent_sequences_count_whole_sequences():
    seqs = [("Up", "Left"), ("Up", "Left"), ("Down",), (), ("Up", "Left"), ("Down",), ("Right",)]
    assert openloop.frequent_sequences(seqs, top=2) == [(("Up", "Left"), 3), (("Down",), 2)]
    env = make_env("frozenlake", max_actions_per_episode=2, max_turns=1)
    level = ("frozenlake", 10003, "train", 0)  # the goal is one step Right of the start (as rendered above it)
    env.reset(seed=10003)
    assert openloop.play(env, level, ["Right"]) is True
    assert openloop.play(env, level, ["Left", "Up", "Right"]) is False  # the third action is past the budget of 2


def test_envs_without_fixed_action_names_are_not_supported():
    assert "no fixed list of action names" in openloop.supports(make_env("bandit"))  # it names its arms per level
    assert openloop.supports(make_env("sokoban")) is None
