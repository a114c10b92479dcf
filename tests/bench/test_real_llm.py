"""bench/real_llm.py's pure parts: the open-loop (best fixed action sequence) search against brute force, the plan and
its resume. No run is started."""

import importlib.util
import itertools
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


@pytest.mark.parametrize("env_name,depth,levels", [("frozenlake", 4, 8), ("sokoban", 3, 3)])
def test_the_deduplicated_search_scores_every_sequence_as_playing_it_does(real_llm, env_name, depth, levels):
    names = list(ragen.make_env(env_name).action_names)
    seeds = [10_000 + i for i in range(levels)]
    tables = [real_llm.level_table(env_name, s, "train", depth) for s in seeds]
    counts = real_llm.sequence_successes(tables, len(names), depth)
    env = ragen.make_env(env_name)
    expected = [sum(brute_force(env_name, s, "train", seq, env) for s in seeds)
                for seq in itertools.product(names, repeat=depth)]
    assert counts.tolist() == expected
    if env_name == "frozenlake":  # the check means something: some sequences solve some levels, not all
        assert 0 < max(expected) and min(expected) < levels
    best = int(counts.argmax())
    assert [names[a] for a in real_llm.decode(best, len(names), depth)] == list(
        next(seq for seq, n in zip(itertools.product(names, repeat=depth), expected) if n == max(expected)))


def test_blind_baselines_choose_on_training_levels_and_score_held_out_ones(real_llm):
    b = real_llm.blind_baselines("frozenlake", train_levels=6, levels=5, depth=3, walker=False)
    assert b["depth"] == 3 and len(b["best_sequence"]) == 3 and set(b["best_sequence"]) <= set(b["actions"])
    held = [brute_force("frozenlake", 123 + g, "val", tuple(b["best_sequence"])) for g in range(5)]
    assert b["best_sequence_success"] == sum(held) / 5
    assert b["best_sequence_success"] <= b["oracle_sequence_success"]
    assert 0.0 <= b["random_expected_success"] <= b["oracle_sequence_success"]
    assert real_llm.action_budget("frozenlake") == 10 and real_llm.action_budget("sokoban") == 10


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
