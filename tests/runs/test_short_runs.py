"""Short runs stay short: a run of a few steps validates on a few groups and plays a few greedy levels, the main job
keeps its full passes, and the summary says how many steps updated the policy."""

import json
import subprocess

import attrs
import yaml
from conftest import ragen_cmd

from ragen.config import load_config
from ragen.config.schema import SHORT_RUN_EVAL
from ragen.envs.resolved import resolve_run
from ragen.runs.summary import format_summary, run_summary


def sizes(*overrides):
    run = resolve_run(load_config(overrides=list(overrides)))
    return [p.n_groups for p in run.val_plan], run.cfg.rollout.n_paired_levels


def test_a_short_run_cuts_its_passes_and_the_main_job_keeps_them():
    assert sizes("env.name=sokoban", "algo.name=grpo") == ([64], 256)  # the main job: 60 steps
    assert sizes("env.name=frozenlake", "trainer.steps=3") == ([SHORT_RUN_EVAL], SHORT_RUN_EVAL)
    assert sizes("trainer.steps=9") == ([SHORT_RUN_EVAL], SHORT_RUN_EVAL)
    assert sizes("trainer.steps=10") == ([64], 256)  # short_run_steps (10) on: in full
    assert sizes("trainer.steps=3", "trainer.short_run_steps=0") == ([64], 256)
    assert sizes("trainer.steps=3", "rollout.n_val_groups=2", "rollout.n_paired_levels=4") == ([2], 4)  # never raised
    val = "env.val=[{name: sokoban, n_groups: 32}, {name: frozenlake, n_groups: 4}, {name: sokoban-large}]"
    assert sizes("trainer.steps=2", val) == ([SHORT_RUN_EVAL, 4, SHORT_RUN_EVAL], SHORT_RUN_EVAL)
    assert sizes("trainer.steps=20", val) == ([32, 4, 64], 256)


def test_a_cut_config_resolves_to_itself():
    """A resumed run reads its config.yaml, which records the sizes played: resolving it again changes nothing."""
    cut = resolve_run(load_config(overrides=["trainer.steps=3"])).cfg
    assert resolve_run(cut).cfg == cut
    assert attrs.evolve(cut.rollout, n_val_groups=64, n_paired_levels=256) == load_config().rollout


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
    """Through `ragen run`: default validation and greedy sizes, cut for a 3-step run; the untrained tiny model never
    succeeds, so DAPO's zero-variance filter drops every group and the summary says so."""
    proc = subprocess.run(
        ragen_cmd("run", "--env", "frozenlake", "--model", "tiny", "--no-warmstart", "--filter", "zero-variance",
                  "trainer.steps=3", "rollout.n_groups=2", "rollout.group_size=2", "rollout.response_length=16",
                  "trainer.ppo_mini_batch_size=4", "trainer.micro_batch_size=4", "logging.progress=false",
                  f"logging.run_dir={tmp_path}", "logging.name=r"),
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "0 of 3 steps updated the policy: every group was filtered out (filter zero-variance)" in proc.stdout
    assert "short_run" in proc.stderr
    run = tmp_path / "r"
    saved = yaml.safe_load((run / "config.yaml").read_text())["rollout"]
    assert (saved["n_val_groups"], saved["n_paired_levels"]) == (SHORT_RUN_EVAL, SHORT_RUN_EVAL)
    played = [json.loads(line) for line in (run / "paired_trajectories.jsonl").read_text().splitlines()]
    assert sorted(r["pass"] for r in played) == ["after"] * SHORT_RUN_EVAL + ["before"] * SHORT_RUN_EVAL
    assert f"s.e., {SHORT_RUN_EVAL} episodes)" in proc.stdout  # the validations
