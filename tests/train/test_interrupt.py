"""Ctrl-C is safe: the first SIGINT finishes the current step (or SFT update), checkpoints and exits with
a line saying how to go on; a second SIGINT stops at once. The tests send SIGINT to a real `ragen` subprocess."""

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import TINY, ragen_cmd

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # minutes each on a loaded 2-core machine

SMALL_RUN = [
    *TINY,
    "rollout.n_groups=2",
    "rollout.group_size=2",
    "rollout.n_val_groups=2",
    "rollout.response_length=24",
    "trainer.ppo_mini_batch_size=4",
    "trainer.micro_batch_size=4",
    "trainer.save_freq=100",
    "logging.progress=false",
]


def start(args: list[str], cwd: Path, stderr_file: Path, extra_env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(ragen_cmd(*args), cwd=cwd, stdout=subprocess.PIPE, stderr=open(stderr_file, "w"), text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1", **(extra_env or {})})


def wait_for(condition, proc: subprocess.Popen, timeout: float = 1200) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, "the command ended before the interrupt"
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.2)


def metric_steps(run: Path) -> list[int]:
    path = run / "metrics.jsonl"
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def test_ctrl_c_during_step_2_checkpoints_its_step_and_the_run_resumes(tmp_path):
    run = tmp_path / "r"
    err = tmp_path / "stderr.txt"
    proc = start(["run", "--env", "frozenlake", "--algo", "grpo", *SMALL_RUN, "trainer.steps=4", "trainer.save_freq=1",
                  f"logging.run_dir={tmp_path}", "logging.name=r"], tmp_path, err)
    # step 1's row written: step 2 is running, or (on a loaded machine) step 1's checkpoint is still being saved; either
    # way the run must stop after the step it is in, with that step checkpointed (CI once saw "after step 1")
    wait_for(lambda: 1 in metric_steps(run), proc)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=300) == 130, err.read_text()[-3000:]
    stderr = err.read_text()
    assert "interrupt: finishing the current training step" in stderr
    done = int(
        re.search(r"interrupted after step (\d+); checkpoint saved, continue with `ragen run --resume (\S+)`", stderr)[
            1
        ]
    )
    assert done >= 1 and (run / "checkpoints" / "actor" / f"step{done}").is_dir()
    assert metric_steps(run)[-1] == done  # nothing after the step it stopped at
    assert not (run / "final").exists()  # unfinished: not exported
    assert "Traceback" not in stderr
    res = subprocess.run(
        ragen_cmd("run", "--resume", str(run)), cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "run_resumed" in res.stderr and f"step={done}" in res.stderr
    assert (run / "final" / "config.json").is_file() and metric_steps(run)[-1] == 4
    # a checkpoint after every step, the newest trainer.keep_checkpoints (default 2) kept
    assert sorted(p.name for p in (run / "checkpoints" / "actor").glob("step*")) == ["step3", "step4"]


HOOKS = str(Path(__file__).parents[1] / "interrupt")  # test-only sitecustomize: a slow step, a lingering exit


def test_a_second_ctrl_c_stops_at_once(tmp_path):
    """Step 2 waits (RAGEN_TEST_SLOW_STEP) so both Ctrl-Cs land inside it on any machine: a review found a fast idle
    machine finishing the step within the 0.5 s gap."""
    err = tmp_path / "stderr.txt"
    proc = start(["run", "--env", "frozenlake", "--algo", "grpo", *SMALL_RUN, "trainer.steps=50",
                  f"logging.run_dir={tmp_path}", "logging.name=r"], tmp_path, err,
                 extra_env={"PYTHONPATH": HOOKS, "RAGEN_TEST_SLOW_STEP": "2"})
    wait_for(lambda: 1 in metric_steps(tmp_path / "r"), proc)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    assert proc.wait(timeout=60) == 1
    assert time.monotonic() - t0 < 30
    assert err.read_text().rstrip().endswith("Aborted.")  # click's words for a KeyboardInterrupt
    assert not (tmp_path / "r" / "checkpoints").exists()  # it did not wait for the step to end


def test_a_ctrl_c_after_the_stop_has_saved_ends_cleanly(tmp_path):
    """A second Ctrl-C reaching a run that has already checkpointed after the first one is acknowledged;
    the run still ends with its resume line and exit 130, no death by signal, no traceback."""
    err = tmp_path / "stderr.txt"
    proc = start(["run", "--env", "frozenlake", "--algo", "grpo", *SMALL_RUN, "trainer.steps=50",
                  f"logging.run_dir={tmp_path}", "logging.name=r"], tmp_path, err,
                 extra_env={"PYTHONPATH": HOOKS, "RAGEN_TEST_SLOW_STEP": "2", "RAGEN_TEST_SLOW_STEP_UNTIL_CTRL_C": "1",
                            "RAGEN_TEST_SLOW_EXIT": "1"})
    wait_for(lambda: 1 in metric_steps(tmp_path / "r"), proc)
    proc.send_signal(signal.SIGINT)  # during the slowed step 2: finish it, checkpoint, stop
    wait_for(lambda: "test: stop saved" in err.read_text(), proc)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130, err.read_text()[-3000:]
    stderr = err.read_text()
    assert "interrupt: already stopping; the work is saved" in stderr and "Traceback" not in stderr
    assert re.search(
        r"interrupted after step 2; checkpoint saved, continue with `ragen run --resume .*r`$", stderr.rstrip()
    )
    assert (tmp_path / "r" / "checkpoints" / "actor" / "step2").is_dir()


def test_ctrl_c_names_the_phase_it_interrupts(tmp_path):
    """A Ctrl-C during the greedy pass before RL says it is finishing that pass (not "the current training step"),
    and the resume line says where the run was."""
    err = tmp_path / "stderr.txt"
    path = os.pathsep.join(p for p in (HOOKS, os.environ.get("PYTHONPATH", "")) if p)
    proc = start(["run", "--env", "frozenlake", "--algo", "grpo", *SMALL_RUN, "trainer.steps=2",
                  f"logging.run_dir={tmp_path}", "logging.name=r"], tmp_path, err,
                 extra_env={"PYTHONPATH": path, "RAGEN_TEST_SLOW_PAIRED": "before"})
    wait_for(lambda: "test: greedy pass before started" in err.read_text(), proc)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=300) == 130, err.read_text()[-3000:]
    stderr = err.read_text()
    assert "interrupt: finishing the greedy paired pass (before RL), then saving" in stderr
    assert "finishing the current training step" not in stderr
    assert re.search(r"interrupted during the greedy paired pass \(before RL\), after step 0; checkpoint saved, "
                     r"continue with `ragen run --resume .*r`$", stderr.rstrip()), stderr[-2000:]
    assert metric_steps(tmp_path / "r") == [0]  # the pass finished and was recorded; no step ran


def test_ctrl_c_during_sft_saves_the_model_so_far(tmp_path):
    out = tmp_path / "sft"
    err = tmp_path / "stderr.txt"
    proc = start(["sft", "--env", "frozenlake", "--model", "tiny", "--out", str(out), "warmstart.episodes=16",
                  "warmstart.epochs=400", "warmstart.batch_size=8", "logging.progress=true"], tmp_path, err)
    # the warm-start progress bar shows its first update: SFT is training
    wait_for(lambda: re.search(r"warm start:.*\|\s*[1-9]\d*/\d+", err.read_text()), proc)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130, err.read_text()[-3000:]
    stderr = err.read_text()
    m = re.search(r"interrupted after (\d+) SFT updates; the model so far is in (\S+);", stderr)
    assert m and int(m[1]) >= 1 and Path(m[2]) == out / "final"
    assert (out / "final" / "config.json").is_file()
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["sft/interrupted"] == 1.0 and metrics["sft/updates"] < 400 * 2
    from ragen.models.load import load_model_and_tokenizer

    load_model_and_tokenizer(str(out / "final"), tmp_path / "w", ["frozenlake"], dtype="float32", device="cpu")
