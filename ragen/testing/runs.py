"""The ragen CLI from a test: ``ragen_cmd``, the tiny-model run settings ``TINY`` and ``run_two_steps``, a training
smoke run of an env as a user starts it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

#: run settings for tests: the built-in tiny model as initialised, no warm start (the product default is the
#: warm-started `small` model: minutes of CPU per run), a greedy before/after pass of 2 levels instead of 256, and the
#: validations and greedy passes played however few the steps (a test's runs are short runs, which would play none:
#: trainer.short_run_steps), so a test still covers them
TINY = ("model.name=tiny", "warmstart.mode=never", "rollout.n_paired_levels=2", "trainer.short_run_steps=0")


def ragen_cmd(*args: str) -> list[str]:
    """The ragen CLI of this interpreter's environment, as an argv list for ``subprocess``."""
    return [sys.executable, "-m", "ragen", *args]


def run_two_steps(env: str, tmp_path: Path, *extra: str, response_length: int | None = 48) -> tuple[Path, list[dict]]:
    """Train ``ragen run --env ENV --algo grpo`` for two small steps in a subprocess, as a user would.

    Two groups of two, short answers: the random tiny model otherwise writes the full response length every turn,
    minutes of CPU for no extra coverage. ``extra`` overrides come last, so they win. Fails the test with the run's
    stderr tail on a non-zero exit or a missing final/ model; returns the run folder and its metrics.jsonl rows.
    """
    length = [] if response_length is None else [f"rollout.response_length={response_length}"]
    proc = subprocess.run(
        ragen_cmd("run", "--env", env, "--algo", "grpo", *TINY, "trainer.steps=2", "rollout.n_groups=2",
                  "rollout.group_size=2",
                  "rollout.n_val_groups=2", "trainer.ppo_mini_batch_size=4", "trainer.micro_batch_size=4",
                  "logging.progress=false", f"logging.run_dir={tmp_path}", "logging.name=r", *length, *extra),
        env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if proc.returncode != 0:
        raise AssertionError(f"ragen run --env {env} exited with {proc.returncode}:\n{proc.stderr[-3000:]}")
    run = Path(tmp_path) / "r"
    if not (run / "final").is_dir():
        raise AssertionError(f"ragen run --env {env} wrote no {run / 'final'}")
    return run, [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
