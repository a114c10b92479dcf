"""Short runs stay short: a run of a few steps plays no validation and no greedy pass, the main job keeps its full
passes, and the summary says both how many steps updated the policy and that the passes were not played."""

import json
import subprocess

import attrs
import yaml
from conftest import ragen_cmd

from ragen.config import load_config
from ragen.envs.resolved import resolve_run
from ragen.runs.summary import format_summary, run_summary


def resolved(*overrides):
    return resolve_run(load_config(overrides=list(overrides)))


def test_a_short_run_plays_no_passes_and_the_main_job_keeps_them():
    main = resolved("env.name=sokoban", "algo.name=grpo")  # the main job: 60 steps
    assert main.validates and main.cfg.rollout.n_paired_levels == 256 and [p.n_groups for p in main.val_plan] == [64]
    for short in (resolved("env.name=frozenlake", "trainer.steps=3"), resolved("trainer.steps=9")):
        assert not short.validates and short.cfg.rollout.n_paired_levels == 0
    assert resolved("trainer.steps=10").validates  # short_run_steps (10) on: played
    full = resolved("trainer.steps=3", "trainer.short_run_steps=0")
    assert full.validates and full.cfg.rollout.n_paired_levels == 256


def test_a_cut_config_resolves_to_itself():
    """A resumed run reads its config.yaml, which records the greedy pass off: resolving it again changes nothing."""
    cut = resolve_run(load_config(overrides=["trainer.steps=3"])).cfg
    assert resolve_run(cut).cfg == cut
    assert attrs.evolve(cut.rollout, n_paired_levels=256) == load_config().rollout


def write_run(path, rows, filter_name="top-p", pre_filter=""):
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "config.yaml").write_text(yaml.safe_dump({"algo": {"options": {"filter": filter_name,
                                                                            "pre_filter": pre_filter}}}))
    return format_summary(run_summary(path))


def step(n, updated=False, **flags):
    row = {"step": n, "timing/step_s": 1.0, "rollout/empty_after_filter": 0.0, **flags}
    return {**row, "actor/pg_loss": 0.1} if updated else row


def test_the_summary_says_how_many_steps_updated_the_policy(tmp_path):
    empty = [step(n, **{"rollout/empty_after_filter": 1.0}) for n in (1, 2, 3)]
    text = write_run(tmp_path, [{"step": 0, "val/success": 0.0}, *empty])
    assert "  RL: 3 steps in " in text
    assert "  0 of 3 steps updated the policy: every group was filtered out (filter top-p)\n" in text + "\n"
    mixed = [step(1, updated=True), step(2, **{"rollout/success_gate_empty": 1.0}),
             step(3, **{"rollout/empty_after_filter": 1.0}), step(4, **{"rollout/empty_after_filter": 1.0}),
             step(5)]
    text = write_run(tmp_path, mixed, "top-k", pre_filter="zero-variance")
    assert ("  1 of 5 steps updated the policy: in 2, every group was filtered out (filter top-k after zero-variance); "
            "in 1, no group had a success, so the success gate left every group out (algo.options.success_gate); "
            "in 1, a non-finite loss or gradient skipped the update") in text
    text = write_run(tmp_path, [step(1, updated=True), step(2, updated=True)])
    assert "  2 of 2 steps updated the policy\n" in text + "\n"


def test_a_three_step_tiny_run_is_short_and_says_no_step_updated(tmp_path):
    """Through `ragen run`: a 3-step run plays no validation and no greedy pass; the untrained tiny model never
    succeeds, so DAPO's zero-variance filter drops every group and the summary says so."""
    proc = subprocess.run(
        ragen_cmd("run", "--env", "frozenlake", "--model", "tiny", "--no-warmstart", "--filter", "zero-variance",
                  "trainer.steps=3", "rollout.n_groups=2", "rollout.group_size=2", "rollout.response_length=16",
                  "trainer.ppo_mini_batch_size=4", "trainer.micro_batch_size=4", "logging.progress=false",
                  f"logging.run_dir={tmp_path}", "logging.name=r"),
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "0 of 3 steps updated the policy: every group was filtered out (filter zero-variance)" in proc.stdout
    assert ("no validation and no greedy pass: a short run (3 steps, fewer than trainer.short_run_steps=10); "
            "trainer.short_run_steps=0 plays them") in proc.stdout
    assert "short_run" in proc.stderr
    run = tmp_path / "r"
    assert yaml.safe_load((run / "config.yaml").read_text())["rollout"]["n_paired_levels"] == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert not any(k.startswith(("val/", "paired/")) for r in rows for k in r)
    assert not (run / "val_trajectories.jsonl").exists() and not (run / "paired_trajectories.jsonl").exists()
    assert "validation success" not in proc.stdout
