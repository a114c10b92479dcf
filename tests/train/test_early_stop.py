"""Early stopping (algorithms.md §8): the three rules by hand, and a real run that stops, says why and checkpoints."""

import json

import pytest
from conftest import TINY

from ragen.config import EarlyStopSection, load_config
from ragen.train.early_stop import EarlyStopper


def test_empty_filter_rule_counts_consecutive_steps():
    es = EarlyStopper(EarlyStopSection(empty_stop_steps=3))
    assert es.after_step({"rollout/empty_after_filter": 1.0}) is None
    assert es.after_step({"rollout/empty_after_filter": 0.0}) is None  # the streak resets
    assert es.after_step({"rollout/empty_after_filter": 1.0}) is None
    assert es.after_step({"rollout/empty_after_filter": 1.0}) is None
    m = {"rollout/empty_after_filter": 1.0}
    assert es.after_step(m).startswith("empty_filtered_steps")
    assert m["early_stopped/empty_filtered_steps"] == 1.0


def test_reward_spread_collapse_after_the_baseline():
    es = EarlyStopper(EarlyStopSection(rv_baseline_steps=2, rv_patience=2, rv_ratio=0.1))
    for s in (1.0, 0.6, 0.05):  # baseline 0.8, threshold 0.08
        assert es.after_step({"reward/group_std": s}) is None
    assert "reward_variance_collapse" in es.after_step({"reward/group_std": 0.079})
    es2 = EarlyStopper(EarlyStopSection(rv_baseline_steps=2, rv_patience=2, rv_ratio=0.1))
    for s in (1.0, 0.6, 0.05, 0.5):  # 0.5 >= 0.08 resets the streak
        assert es2.after_step({"reward/group_std": s}) is None
    assert es2.after_step({"reward/group_std": 0.07}) is None
    m = {"reward/group_std": 0.0}
    assert "reward_variance_collapse" in es2.after_step(m) and m["early_stopped/reward_variance_collapse"] == 1.0


def test_low_validation_success_uses_the_worst_variant():
    es = EarlyStopper(EarlyStopSection(val_patience=2, val_min_success=0.01))
    assert es.after_validation({"val/success": 0.5, "val/a/success": 0.9, "val/b/success": 0.0}) is None
    assert "low_validation_success" in es.after_validation(
        {"val/success": 0.5, "val/a/success": 0.9, "val/b/success": 0.0}
    )


def test_rules_switch_off_and_state_round_trips():
    off = EarlyStopper(EarlyStopSection(enabled=False, empty_stop_steps=1))
    assert off.after_step({"rollout/empty_after_filter": 1.0}) is None
    es = EarlyStopper(EarlyStopSection(empty_stop_steps=2, val_patience=0))
    es.after_step({"rollout/empty_after_filter": 1.0, "reward/group_std": 0.3})
    assert es.after_validation({"val/success": 0.0}) is None  # val_patience 0 disables
    again = EarlyStopper(EarlyStopSection(empty_stop_steps=2))
    again.load_state_dict(es.state_dict())
    assert again.after_step({"rollout/empty_after_filter": 1.0}).startswith("empty_filtered_steps")


@pytest.mark.slow
def test_a_run_with_an_always_empty_filter_stops_logs_why_and_checkpoints(tmp_path):
    """An untrained tiny model gets the same format penalty on every trajectory: every group has zero reward std, so
    v2-recommended (include_zero False) keeps nothing; the update is skipped, counted, and the run stops after 2."""
    from ragen.runs.loop import train

    cfg = load_config(
        overrides=[
            *TINY,
            "env.name=frozenlake",
            "env.options.response_length=8",
            "env.options.max_turns=1",
            "rollout.n_groups=2",
            "rollout.group_size=2",
            "rollout.n_val_groups=1",
            "algo.options.filter=v2-recommended",
            "early_stop.empty_stop_steps=2",
            "trainer.steps=6",
            "logging.progress=false",
            f"logging.run_dir={tmp_path}",
            "logging.name=r",
        ]
    )
    run = train(cfg)
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in lines if m["step"] > 0]
    assert [m["step"] for m in steps] == [1, 2]
    assert all(m["rollout/empty_after_filter"] == 1.0 for m in steps)
    assert steps[-1]["early_stopped/empty_filtered_steps"] == 1.0
    assert "val/success" in steps[-1]  # a stop validates, checkpoints and exports like the end of a run
    assert (run / "final").is_dir() and any((run / "checkpoints").rglob("*step2*"))
