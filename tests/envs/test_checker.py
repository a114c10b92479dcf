"""ragen check-env's determinism check: a missing seed fails, a one-off wall-clock difference is replayed once."""

import random
import sys

from ragen_frozenlake.env import FrozenLakeEnv

from ragen.testing import check_env


def _determinism(**options):
    [check] = [c for c in check_env("frozenlake", seeds=4, expert_episodes=1, **options) if c.name == "determinism"]
    return check


def test_an_env_that_ignores_its_seed_fails_even_after_the_replay(monkeypatch):
    real = FrozenLakeEnv.step
    noise = random.Random()  # unseeded, as a forgotten seed would be

    def step(self, action):
        obs, reward, term, trunc, info = real(self, action)
        return obs, reward + noise.random(), term, trunc, info

    monkeypatch.setattr(FrozenLakeEnv, "step", step)
    check = _determinism()
    assert not check.ok and "same actions gave different steps" in check.detail


def test_one_transient_difference_is_replayed_and_reported(monkeypatch):
    real = FrozenLakeEnv.step
    calls = {"n": 0}

    def step(self, action):
        obs, reward, term, trunc, info = real(self, action)
        if sys._getframe(1).f_code.co_name == "_replay":  # only the determinism check's steps count
            calls["n"] += 1
        # the second instance's first step differs once, as a sandbox timeout on a busy machine would
        return obs, reward + (1.0 if calls["n"] == 2 else 0.0), term, trunc, info

    monkeypatch.setattr(FrozenLakeEnv, "step", step)
    check = _determinism()
    assert check.ok, check.detail
    assert "1 seed(s) matched only on a replay" in check.detail
    monkeypatch.undo()
    assert "replay" not in _determinism().detail
