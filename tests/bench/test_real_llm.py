"""bench/real_llm.py's pure parts: its blind baselines (ragen.envs.openloop's search, itself tested against brute force
in tests/envs/test_openloop.py) chosen on training levels and scored on held-out ones, the plan and its resume. No run
is started."""

import importlib.util
import sys

import pytest
from conftest import ROOT

import ragen


@pytest.fixture(scope="module")
def real_llm():
    sys.path.insert(0, str(ROOT / "bench"))  # as when run as a script: it imports bench/learning.py
    spec = importlib.util.spec_from_file_location("bench_real_llm", ROOT / "bench" / "real_llm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def brute_force(env_name: str, seed: int, split: str, seq: tuple, env=None) -> bool:
    """Play the sequence from the level's start (``env``: reused, reset here), one action a step, until the episode
    ends."""
    env = env or ragen.make_env(env_name)
    env.reset(seed=seed, options={"split": split})
    for name in seq:
        _, _, terminated, truncated, info = env.step(name)
        if terminated or truncated:
            return bool(info["success"])
    return False


def test_blind_baselines_choose_on_training_levels_and_score_held_out_ones(real_llm):
    b = real_llm.blind_baselines("frozenlake", train_levels=6, levels=5, depth=3, walker=False)
    assert b["depth"] == 3 and len(b["best_sequence"]) == 3 and set(b["best_sequence"]) <= set(b["actions"])
    held = [brute_force("frozenlake", 123 + g, "val", tuple(b["best_sequence"])) for g in range(5)]
    assert b["best_sequence_success"] == sum(held) / 5
    assert b["best_sequence_success"] <= b["oracle_sequence_success"]
    assert 0.0 <= b["random_expected_success"] <= b["oracle_sequence_success"]
    from ragen.envs.openloop import search_length

    assert search_length(ragen.make_env("frozenlake")) == 10 and search_length(ragen.make_env("sokoban")) == 10


def test_the_plan_runs_every_env_arm_and_seed_and_resumes(real_llm):
    import learning

    jobs = real_llm.plan_jobs(["frozenlake", "sokoban"], ["grpo", "ppo"], seeds=2)
    assert len(jobs) == 8 and jobs[0]["seed"] == 0 and jobs[-1]["seed"] == 1
    assert all(j["steps"] == real_llm.recipe_steps(j["env"]) for j in jobs)
    kept, todo = learning.resume_split([{**jobs[0], "paired": {"change": 0.1}}], jobs)
    assert len(kept) == 1 and len(todo) == 7
    warm = real_llm.estimate_s(jobs[0], 128, warm=True)
    assert warm > real_llm.estimate_s(jobs[0], 128, warm=False) > 0
    assert real_llm.estimate_s(jobs[1], 128, False) > real_llm.estimate_s(jobs[0], 128, False)  # ppo costs more


def run_config(cmd: list[str]):
    """The RunConfig a `ragen run` command line resolves to, parsed by the real CLI (nothing is run)."""
    import click

    from ragen.cli import cli
    from ragen.config.load import load_config

    root = click.Context(cli, info_name="ragen")
    with cli.commands["run"].make_context("run", cmd[cmd.index("run") + 1:], parent=root) as ctx:
        return load_config(None, list(ctx.params["overrides"]))


def test_an_arms_overrides_replace_the_recipes(real_llm):
    """dapo-wide samples 16 groups of 8 where the recipe says 4 x 4: its overrides come after the recipe's in the
    `ragen run` command, and the run's config resolves them (the last value of a key wins). The greedy paired pass is
    played at any --steps: a run under trainer.short_run_steps would skip it, and it is the benchmark's verdict."""
    import argparse

    args = argparse.Namespace(model="smollm2", paired_levels=128, threads=1, override=[])
    job = {"env": "frozenlake", "arm": "dapo-wide", "seed": 0, "steps": 20}
    cmd = real_llm.command(job, args, ROOT / "runs", "x")
    assert cmd[cmd.index("--algo") + 1] == "dapo"
    cfg = run_config(cmd)
    assert (cfg.rollout.n_groups, cfg.rollout.group_size, cfg.rollout.max_context_window) == (16, 8, 1)
    short = run_config(real_llm.command({**job, "arm": "grpo", "steps": 3}, args, ROOT / "runs", "x"))
    assert (short.trainer.steps, short.trainer.short_run_steps, short.rollout.n_paired_levels) == (3, 0, 128)
    assert short.rollout.n_groups == 4
