"""Non-finite values never end a run: a NaN/inf reward becomes the env's failure score and is counted; a
non-finite loss skips that update (weights unchanged); K skips in a row stop the run with a checkpoint, an export and
a one-line error; a policy whose weights overflowed is never sampled from."""

import json
import math
import sys

import pytest
import torch
from conftest import ROOT

from ragen import EnvConfig, hookimpl
from ragen.config import load_config
from ragen.errors import RagenError
from ragen.plugins.loader import register_plugin
from ragen.rollout.runner import NONFINITE_FLAG, _finite_reward

sys.path.insert(0, str(ROOT / "tests" / "fixture_plugins" / "ragen-tinyenv"))
from ragen_tinyenv import CoinEnv  # noqa: E402  (the fixture plugin's env, not installed in the test venv)


class NanCoinEnv(CoinEnv):
    """tiny-coin whose reward is NaN on odd seeds and +inf on seeds divisible by 4."""

    failure_reward = -0.5  # what a broken reward is replaced by (the default is 0.0)

    def _reset(self, seed, options):
        self.seed_ = seed
        return super()._reset(seed, options)

    def _step(self, action):
        obs, reward, term, trunc, info = super()._step(action)
        reward = math.nan if self.seed_ % 2 else math.inf if self.seed_ % 4 == 0 else reward
        return obs, reward, term, trunc, info


class _Plugin:
    @hookimpl
    def register_envs(self, register):
        register("nan-coin", NanCoinEnv, config=EnvConfig)


@pytest.fixture
def nan_coin(fresh_plugins):
    register_plugin(_Plugin(), "nan-coin", dist="ragen-nan-coin")
    yield "nan-coin"


def cfg(tmp_path, *extra):
    return load_config(
        overrides=[
            "env.name=nan-coin",
            "model.name=tiny",
            "rollout.engine=expert",
            "rollout.n_groups=2",
            "rollout.group_size=2",
            "rollout.n_val_groups=2",
            "rollout.n_paired_levels=2",
            "trainer.short_run_steps=0",
            "trainer.steps=3",
            "trainer.ppo_mini_batch_size=4",
            "trainer.micro_batch_size=4",
            "trainer.test_freq=0",
            "trainer.save_freq=0",
            "early_stop.enabled=false",
            "collapse.enabled=false",
            "logging.progress=false",
            f"logging.run_dir={tmp_path}",
            "logging.name=run",
            *extra,
        ]
    )


def rows(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_finite_reward_replaces_nan_and_inf_by_the_failure_score():
    env = NanCoinEnv()
    assert _finite_reward(env, 1.0, {}) == (1.0, {})
    for bad in (math.nan, math.inf, -math.inf, "x", None):
        assert _finite_reward(env, bad, {"a": 1.0}) == (-0.5, {"a": 1.0, NONFINITE_FLAG: 1.0})
    assert _finite_reward(object(), math.nan, {})[0] == 0.0  # no failure_reward declared: 0.0


def test_a_shapers_nonfinite_scores_become_zero_and_are_counted():
    from ragen.train.stats import finite_scores

    assert finite_scores([1.0, math.nan, -math.inf, 2.0]) == ([1.0, 0.0, 0.0, 2.0], 2)
    assert finite_scores([0.5, -1.0]) == ([0.5, -1.0], 0)


def test_nan_rewards_leave_the_run_going_and_are_counted(nan_coin, tmp_path):
    from ragen.runs.loop import train

    run = train(cfg(tmp_path), warmstart=False)
    steps = [r for r in rows(run) if r["step"] > 0 and "rollout/nonfinite_rewards" in r]
    assert [r["step"] for r in steps] == [1, 2, 3]
    # train seeds 10000 + 2s + g: every step has one odd-seed group (2 members, NaN) and every other step an inf one
    assert all(r["rollout/nonfinite_rewards"] >= 2 for r in steps)
    assert all(r["reward/min"] is not None and math.isfinite(r["reward/min"]) for r in steps)
    assert (run / "final" / "config.json").is_file()
    traj = [json.loads(line) for line in (run / "trajectories.jsonl").read_text().splitlines()]
    assert {t["turns"][0]["reward"] for t in traj if t["seed"] % 2} == {-0.5}


def nan_loss(monkeypatch, poisoned=lambda call: True):
    """Make the policy loss NaN on the calls (1-based) ``poisoned`` selects."""
    import ragen.train.update as update

    real, calls = update.policy_loss, []

    def patched(*args, **kwargs):
        calls.append(1)
        pg, pm = real(*args, **kwargs)
        return (pg * math.nan if poisoned(len(calls)) else pg), pm

    monkeypatch.setattr(update, "policy_loss", patched)


def test_a_nan_loss_skips_that_update_and_the_run_goes_on(nan_coin, tmp_path, monkeypatch):
    from ragen.train.trainer import Trainer

    nan_loss(monkeypatch, lambda call: call == 1)
    trainer = Trainer(cfg(tmp_path), tmp_path / "run")
    try:
        before = {k: v.detach().clone() for k, v in trainer.actor.module.named_parameters()}
        first = trainer.step().metrics
        assert first["actor/skipped_updates"] == 1.0 and "actor/grad_norm" not in first
        assert all(torch.equal(v, before[k]) for k, v in trainer.actor.module.named_parameters()), (
            "a skipped update moved weights"
        )
        second = trainer.step().metrics
        assert second["actor/skipped_updates"] == 0.0 and math.isfinite(second["actor/grad_norm"])
        assert any(not torch.equal(v, before[k]) for k, v in trainer.actor.module.named_parameters())
        assert trainer.updater.fatal is None and trainer.updater.skipped_in_a_row == 0
    finally:
        trainer.close()


def test_nan_loss_counter_reaches_metrics_jsonl(nan_coin, tmp_path, monkeypatch):
    from ragen.runs.loop import train

    nan_loss(monkeypatch, lambda call: call == 2)
    run = train(cfg(tmp_path), warmstart=False)
    skipped = {r["step"]: r["actor/skipped_updates"] for r in rows(run) if "actor/skipped_updates" in r}
    assert skipped == {1: 0.0, 2: 1.0, 3: 0.0}
    assert (run / "final" / "config.json").is_file()


def test_k_skipped_updates_in_a_row_stop_with_checkpoint_export_and_one_line(nan_coin, tmp_path, monkeypatch):
    from ragen.runs.loop import train

    nan_loss(monkeypatch)
    with pytest.raises(RagenError) as exc:
        train(cfg(tmp_path, "trainer.steps=10", "trainer.max_skipped_updates=2"), warmstart=False)
    msg = str(exc.value)
    assert (
        "\n" not in msg and msg.startswith("step 2: 2 consecutive updates skipped") and "max_skipped_updates=2" in msg
    )
    run = tmp_path / "run"
    assert (run / "final" / "config.json").is_file()
    assert (run / "checkpoints" / "actor" / "step2").is_dir()
    assert [r["actor/skipped_updates"] for r in rows(run) if "actor/skipped_updates" in r] == [1.0, 1.0]


def test_a_huge_learning_rate_never_reaches_multinomial_with_nan(nan_coin, tmp_path, monkeypatch):
    """actor_lr=1e30 overflows the weights in one update; the next rollout must not sample from them (the HF engine
    samples with torch.multinomial, which used to die on NaN probabilities with a traceback)."""
    from ragen.runs.loop import train

    real, seen = torch.multinomial, []

    def checked(probs, *args, **kwargs):
        seen.append(bool(torch.isfinite(probs).all()))
        return real(probs, *args, **kwargs)

    monkeypatch.setattr(torch, "multinomial", checked)
    with pytest.raises(RagenError) as exc:
        train(cfg(tmp_path, "rollout.engine=hf", "env.options.response_length=8", "trainer.actor_lr=1e30"),
              warmstart=False)
    assert "\n" not in str(exc.value) and "non-finite" in str(exc.value) and "actor_lr=1e+30" in str(exc.value)
    assert seen and all(seen), "torch.multinomial saw NaN/inf probabilities"
    # it overflows at step 1, before any checkpoint: the message says so rather than promising an intact one
    assert "no checkpoint was written yet" in str(exc.value) and "is intact" not in str(exc.value)


class _NanShaperPlugin:
    @hookimpl
    def register_envs(self, register):
        register("plain-coin", CoinEnv, config=EnvConfig)

    @hookimpl
    def register_reward_shapers(self, register):
        register("all-nan", lambda config: (lambda inp: [math.nan] * len(inp.scores)))
        register("plus-one", lambda config: (lambda inp: [s + 1.0 for s in inp.scores]))


def test_a_shaper_returning_nan_warns_once_naming_it_and_is_counted(fresh_plugins, tmp_path, capsys):
    """A shaper that is NaN for every trajectory trains on all-zero scores: the first step warns, naming the shaper
    and its distribution, and every step counts its NaNs in shaper/<name>/nonfinite."""
    from ragen.train.trainer import Trainer

    register_plugin(_NanShaperPlugin(), "nan-shaper", dist="ragen-nan-shaper")
    trainer = Trainer(cfg(tmp_path, "env.name=plain-coin", "algo.options.shapers=[all-nan]"), tmp_path / "run")
    try:
        steps = [trainer.step().metrics for _ in range(2)]
    finally:
        trainer.close()
    for m in steps:  # 2 groups of 2, every one kept (the expert wins every coin)
        assert m["shaper/all-nan/nonfinite"] == 4.0 and m["rollout/nonfinite_rewards"] == 4.0
        assert m["reward/shaped_mean"] == 0.0  # what the update was paid: each NaN trained as 0
    out = capsys.readouterr()
    text = out.out + out.err
    assert text.count("shaper_returned_nonfinite") == 1, text[-3000:]
    assert "shaper 'all-nan' of ragen-nan-shaper" in text and "shaper/all-nan/nonfinite" in text


def test_the_shaped_score_is_logged_beside_the_raw_one(fresh_plugins, tmp_path):
    """With reward shapers the step logs the mean training score they made (reward/shaped_mean), so a shaper's reward
    that rises while success does not can be seen (ragen/runs/diagnosis.py, reward-without-success); without shapers
    the training score is the raw one and nothing more is logged."""
    from ragen.train.trainer import Trainer

    register_plugin(_NanShaperPlugin(), "nan-shaper", dist="ragen-nan-shaper")
    for shapers in ("[plus-one]", "[]"):
        trainer = Trainer(cfg(tmp_path, "env.name=plain-coin", f"algo.options.shapers={shapers}"),
                          tmp_path / f"run{len(shapers)}")
        try:
            m = trainer.step().metrics
        finally:
            trainer.close()
        if shapers == "[]":
            assert "reward/shaped_mean" not in m
        else:
            assert m["reward/shaped_mean"] == pytest.approx(m["reward/mean"] + 1.0)  # every group kept
