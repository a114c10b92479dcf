"""Data parallelism on CPU (gloo): `ragen run --nproc 2` through torchrun, 2 real DeepSpeed ranks."""

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from conftest import TINY, ragen_cmd

INTERRUPT = Path(__file__).parents[1] / "interrupt"  #: a sitecustomize that stops every rank at a chosen step

COMMON = [
    *TINY,
    "env.options.response_length=16",
    "env.options.max_turns=2",
    "rollout.n_groups=3",
    "rollout.group_size=2",
    "rollout.n_val_groups=3",
    "trainer.micro_batch_size=2",
    "logging.progress=false",
    "logging.name=r",
]


def run(tmp_path, nproc, *extra):
    out = subprocess.run(ragen_cmd("run", "--nproc", str(nproc), *COMMON, f"logging.run_dir={tmp_path}", *extra),
                         capture_output=True, text=True, timeout=1200, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in rows}


#: a 2-rank PPO run of 4 steps, checkpointed and validated every 2: the run the resume test cuts and resumes, and whose
#: first two steps are the 2-rank training test's (one torchrun launch of 2 ranks serves both)
PPO_FOUR_STEPS = ["--env", "frozenlake", "--algo", "ppo", "trainer.steps=4", "trainer.save_freq=2",
                  "trainer.test_freq=2", "trainer.ppo_mini_batch_size=4"]


@pytest.fixture(scope="module")
def ppo_two_ranks(tmp_path_factory):
    """``(folder, steps)`` of the uninterrupted 2-rank ``PPO_FOUR_STEPS`` run (its run folder is ``folder / "r"``)."""
    folder = tmp_path_factory.mktemp("full")
    return folder, run(folder, 2, *PPO_FOUR_STEPS)


@pytest.mark.slow
def test_two_ranks_train_two_steps_with_identical_replicas(ppo_two_ranks):
    folder, steps = ppo_two_ranks
    for s in (1, 2):
        assert steps[s]["dist/replica_max_abs_diff"] == 0.0  # DeepSpeed kept both ranks' weights identical
        assert steps[s]["rollout/num_trajectories"] == 6  # every rank's groups, gathered
        assert steps[s]["critic/vf_loss"] >= 0
    assert "val/success" in steps[2] and (folder / "r" / "final" / "config.json").is_file()
    assert (folder / "r" / "checkpoints" / "actor" / "latest").is_file()


def test_user_deepspeed_json_is_merged_without_the_trainers_keys(tmp_path):
    from ragen.errors import ConfigError
    from ragen.models.distributed import _merge, user_deepspeed_config

    path = tmp_path / "ds.json"
    path.write_text(
        json.dumps(
            {"train_micro_batch_size_per_gpu": 64, "zero_optimization": {"offload_optimizer": {"device": "cpu"}}}
        )
    )
    extra = user_deepspeed_config(str(path))
    assert "train_micro_batch_size_per_gpu" not in extra
    merged = _merge({"zero_optimization": {"stage": 2}}, extra)
    assert merged["zero_optimization"] == {"stage": 2, "offload_optimizer": {"device": "cpu"}}
    with pytest.raises(ConfigError, match="trainer.deepspeed_config"):
        user_deepspeed_config(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ConfigError, match="not valid JSON"):
        user_deepspeed_config(str(tmp_path / "bad.json"))


def test_groups_are_sharded_whole_across_ranks():
    from ragen.rollout import EnvGroups, GroupSpec

    shards = [EnvGroups([GroupSpec("frozenlake", 5)], group_size=2, shard=(r, 2)) for r in range(2)]
    try:
        slots = [s.slots(step=3) for s in shards]
        assert {x.group_id for x in slots[0]} == {0, 2, 4} and {x.group_id for x in slots[1]} == {1, 3}
        one = EnvGroups([GroupSpec("frozenlake", 5)], group_size=2)
        assert sorted((x.group_id, x.rollout_index, x.seed) for s in slots for x in s) == \
            sorted((x.group_id, x.rollout_index, x.seed) for x in one.slots(step=3))
        one.close()
    finally:
        for s in shards:
            s.close()


@pytest.mark.slow
def test_global_batch_statistics_equal_a_one_process_run(tmp_path):
    """Same seeds, deterministic per-episode rollouts (the scripted expert engine with per-episode noise): the 2-rank
    step sees the same global batch, filter decision, advantages and loss as the 1-process step, and makes the same
    update (one mini-batch: DeepSpeed's gradient averaging is compensated, normalisers are global)."""
    extra = [
        "--env",
        "frozenlake-slippery",
        "--algo",
        "grpo",
        "--filter",
        "top-p",
        "rollout.engine=expert",
        "warmstart.noise=0.5",
        "env.options.response_length=96",
        "env.options.max_turns=4",
        "rollout.group_size=4",
        "trainer.steps=1",
        "trainer.ppo_mini_batch_size=12",
        "trainer.micro_batch_size=1",
        "trainer.actor_lr=1e-3",
        "collapse.enabled=false",
    ]
    one = run(tmp_path / "one", 1, *extra)[1]
    two = run(tmp_path / "two", 2, *extra)[1]
    keys = [
        "reward/mean",
        "reward/group_std",
        "rollout/success",
        "rollout/num_trajectories",
        "rollout/filter_kept_count",
        "rollout/in_group_reward_std",
        "actor/advantage_mean",
        "actor/pg_loss",
        "actor/entropy",
        "actor/entropy_loss",
        "actor/grad_norm",
    ]
    assert one["reward/group_std"] > 0 and one["rollout/filter_kept_count"] >= 1  # a non-trivial batch
    for k in keys:
        assert two[k] == pytest.approx(one[k], rel=1e-5, abs=1e-6), k
    from safetensors.torch import load_file

    w1 = load_file(tmp_path / "one" / "r" / "final" / "model.safetensors")
    w2 = load_file(tmp_path / "two" / "r" / "final" / "model.safetensors")
    assert max(float((w1[k] - w2[k]).abs().max()) for k in w1) < 1e-5


@pytest.mark.slow
def test_two_rank_run_resumes_where_it_was_interrupted(tmp_path, ppo_two_ranks):
    """Kill a 2-rank run before step 3 (its checkpoint is step 2), resume it with 2 ranks: the metrics and the final
    weights equal those of the uninterrupted 2-rank run (DeepSpeed's collective checkpoint, every rank's state)."""
    extra = PPO_FOUR_STEPS
    full_dir, full = ppo_two_ranks
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAGEN_TEST_INTERRUPT_AT": "3",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(INTERRUPT), os.environ.get("PYTHONPATH")]))}
    cut = subprocess.run(ragen_cmd("run", "--nproc", "2", *COMMON, f"logging.run_dir={tmp_path / 'cut'}", *extra),
                         capture_output=True, text=True, timeout=1200, env=env)
    run_dir = tmp_path / "cut" / "r"
    assert cut.returncode != 0 and "Aborted." in cut.stderr, cut.stderr[-3000:]  # click's words for KeyboardInterrupt
    assert (run_dir / "checkpoints" / "actor" / "latest").read_text() == "step2" and not (run_dir / "final").exists()
    resumed = subprocess.run(ragen_cmd("run", "--nproc", "2", "--resume", str(run_dir)), capture_output=True, text=True,
                             timeout=1200, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    def metrics(path):
        rows = [json.loads(x) for x in (path / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if not k.startswith(("timing", "perf/"))} for r in rows]

    a, b = metrics(full_dir / "r"), metrics(run_dir)
    assert [r["step"] for r in b] == [0, 1, 2, 3, 4] and sorted(full) == [0, 1, 2, 3, 4]
    assert a == b
    from safetensors.torch import load_file

    w1 = load_file(full_dir / "r" / "final" / "model.safetensors")
    w2 = load_file(run_dir / "final" / "model.safetensors")
    assert all(torch.equal(w1[k], w2[k]) for k in w1)


@pytest.mark.slow
def test_zero_stages_1_and_2_make_the_stage_0_update(tmp_path):
    """ZeRO 1 (sharded optimizer state) and 2 (also gradients) on 2 ranks: the same step as stage 0, to rounding.
    The gradient norm is compared too: Adam's first step hides a wrongly scaled gradient, the norm does not."""
    extra = ["--env", "frozenlake", "--algo", "ppo", "trainer.steps=1", "trainer.ppo_mini_batch_size=6",
             "trainer.actor_lr=1e-3", "trainer.critic_lr=1e-3", "trainer.grad_clip=1e9", "collapse.enabled=false"]
    keys = ["actor/pg_loss", "actor/grad_norm", "actor/entropy", "critic/vf_loss", "critic/grad_norm", "reward/mean"]
    from safetensors.torch import load_file

    base = run(tmp_path / "s0", 2, *extra, "trainer.zero_stage=0")[1]
    w0 = load_file(tmp_path / "s0" / "r" / "final" / "model.safetensors")
    assert base["actor/grad_norm"] > 0
    for stage in (1, 2):
        step = run(tmp_path / f"s{stage}", 2, *extra, f"trainer.zero_stage={stage}")[1]
        assert step["dist/replica_max_abs_diff"] == 0.0
        for k in keys:
            assert step[k] == pytest.approx(base[k], rel=1e-4, abs=1e-6), (stage, k)
        w = load_file(tmp_path / f"s{stage}" / "r" / "final" / "model.safetensors")
        assert max(float((w0[k] - w[k]).abs().max()) for k in w0) < 1e-5, stage
