"""What the real-model test files (test_smollm2_run.py, test_gemma3_run.py) share: the tiny slice a run is cut to, the
one-demo warm start, the `ragen` subprocess, and the in-process GRPO step that records what the rollout sampled and
what the update trained on. Each model's file keeps its own claims."""

import json
import os
import subprocess

from conftest import ragen_cmd

#: a warm start of one demo, one pass, not cached (the user's cache stays as it is)
WARM = ["--warmstart", "warmstart.episodes=1", "warmstart.epochs=1", "warmstart.batch_size=1", "warmstart.cache=false"]


def slice_overrides(response_length: int, paired_levels: int) -> list[str]:
    """The smallest run that still rolls out, updates and compares: one group of two one-turn episodes."""
    return [
        "env.options.max_turns=1", f"rollout.response_length={response_length}", "rollout.n_groups=1",
        "rollout.group_size=2", f"rollout.n_paired_levels={paired_levels}", "rollout.n_val_groups=1",
        "trainer.short_run_steps=0",
        "trainer.test_freq=0", "trainer.ppo_mini_batch_size=2", "trainer.micro_batch_size=2",
        "collapse.enabled=false", "early_stop.enabled=false", "logging.progress=false",
        "logging.save_trajectories=0",
    ]


def ragen(*args, cwd=None, timeout: int = 3000):
    proc = subprocess.run(ragen_cmd(*args), capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, f"ragen {' '.join(args[:3])} exited with {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc


def rows(run) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def recorded_step(overrides: list[str], tmp_path, monkeypatch, inspect=None):
    """One GRPO step in process with every engine call, trajectory and update batch recorded: (calls, trajs,
    batches). ``inspect(trainer)`` runs before the step, while the trainer is open."""
    from ragen.config import load_config
    from ragen.rollout import HFEngine
    from ragen.train.trainer import Trainer

    calls, batches, trajs = [], [], []
    generate = HFEngine.generate

    def recording(self, prompts, params):
        gens = generate(self, prompts, params)
        calls.extend((list(p), g, params) for p, g in zip(prompts, gens))
        return gens

    monkeypatch.setattr(HFEngine, "generate", recording)
    cfg = load_config(overrides=[*overrides, f"logging.run_dir={tmp_path}", "logging.name=r"])
    trainer = Trainer(cfg, tmp_path / "r")
    try:
        if inspect is not None:
            inspect(trainer)
        train_batch, old_logprobs = trainer._rollout.train_batch, trainer.policy.old_logprobs

        def keep_trajs(*a, **kw):
            res = train_batch(*a, **kw)
            trajs.extend(res.trajectories)
            return res

        def keep_batch(batch, *a, **kw):
            batches.append(batch)
            return old_logprobs(batch, *a, **kw)

        monkeypatch.setattr(trainer._rollout, "train_batch", keep_trajs)
        monkeypatch.setattr(trainer.policy, "old_logprobs", keep_batch)
        trainer.step()
    finally:
        trainer.close()
    return calls, trajs, batches


def assert_update_trains_on_the_sampled_ids(calls, trajs, batches) -> None:
    """Every trajectory is token-exact against the engine calls, and the update's batch holds exactly those
    trajectories' ids, loss masks and rollout log-probs."""
    import torch
    from rollout.test_runner import assert_token_exact

    assert len(trajs) == 2 and len(batches) == 1
    assert_token_exact(trajs, calls)
    batch = batches[0]
    assert len(batch) == len(trajs)
    for i in range(len(batch)):
        k = int(batch.attention_mask[i].sum())
        ids = batch.input_ids[i][:k].tolist()
        traj = next(t for t in trajs if t.input_ids == ids)  # the row is one trajectory's ids, right-padded
        assert batch.loss_mask[i][:k].tolist() == [float(m) for m in traj.loss_mask]
        assert torch.allclose(batch.rollout_logprobs[i][:k], torch.tensor(traj.rollout_logprobs), atol=1e-6)


def warm_run_folder(root, model: str, slice_: list[str], timeout: int = 3000):
    """`ragen run --env frozenlake --algo grpo --model MODEL --warmstart` for one step, answer-only, compact frame."""
    proc = ragen("run", "--env", "frozenlake", "--algo", "grpo", "--model", model, "--parser", "answer",
                 "rollout.prompt=compact", *WARM, *slice_, "trainer.steps=1", f"logging.run_dir={root}",
                 "logging.name=r", timeout=timeout)
    return root / "r", proc


def assert_warm_start_one_rl_step_and_export(run, proc, model: str) -> None:
    assert "Traceback" not in proc.stderr
    metrics = rows(run)
    warm = next(r for r in metrics if "sft/demos" in r)
    assert warm["sft/demos"] == 1.0 and warm["warmstart/cached"] == 0.0
    assert [r["step"] for r in metrics if r.get("timing/step_s") is not None] == [1]
    assert any(r.get("paired/change") is not None for r in metrics)  # the greedy before/after ran
    final = run / "final"
    assert (final / "config.json").is_file() and not list(final.glob("*.gguf"))  # a plain HF folder
    info = json.loads((run / "model-source" / "warmstart" / "warmstart.json").read_text())
    assert info["inputs"]["warmstart"]["epochs"] == 1 and info["inputs"]["model"]["name"] == model


def assert_eval_reloads(run, out, response_length: int, timeout: int = 3000) -> None:
    ragen("eval", "--env", "frozenlake", "--model", str(run / "final"), "--seeds", "1", "--temperature", "0",
          "-o", "max_turns=1", "-o", f"response_length={response_length}", "--out", str(out), timeout=timeout)
    m = json.loads((out / "metrics.json").read_text())
    assert m["levels"] == 1 and m["failed_envs"] == 0 and m["model"] == str(run / "final")


def assert_resume_runs_one_more_step(run, timeout: int = 3000) -> None:
    import re

    cfg = run / "config.yaml"
    text, n = re.subn(r"^(\s*)steps: 1$", r"\1steps: 2", cfg.read_text(), flags=re.M)
    assert n == 1
    cfg.write_text(text)
    ragen("run", "--resume", str(run), timeout=timeout)
    steps = [r["step"] for r in rows(run) if r.get("timing/step_s") is not None]
    assert steps == [1, 2]
