"""bench/learning.py's pure parts: the resume key and split, where a curve stops improving, the per-arm summary, the
plan and its time estimate. No run is started."""

import importlib.util
import math

import pytest
from conftest import ROOT


@pytest.fixture(scope="module")
def learning():
    spec = importlib.util.spec_from_file_location("bench_learning", ROOT / "bench" / "learning.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_stops_improving_finds_the_best_step_and_the_last_rise_beyond_its_se(learning):
    steps = [0, 10, 20, 30, 40]
    # rises by 10 at 10 (SE 3), by 2 at 20 (SE 3: within noise), dips, then a new high by 5 at 40 (SE 4)
    out = learning.stops_improving(steps, [0.20, 0.30, 0.32, 0.25, 0.37], [0.03] * 4 + [0.04])
    assert out == {"best_step": 40, "best": 0.37, "last_improvement_step": 40, "improving_at_end": True}
    flat = learning.stops_improving(steps, [0.20, 0.21, 0.19, 0.20, 0.20], [0.03] * 5)
    assert flat["last_improvement_step"] is None and not flat["improving_at_end"] and flat["best_step"] == 10
    # a rise that is not above the best earlier mean (a rebound after a dip) is not an improvement
    rebound = learning.stops_improving(steps, [0.30, 0.40, 0.20, 0.35, 0.38], [0.01] * 5)
    assert rebound["last_improvement_step"] == 10 and rebound["best_step"] == 10
    # ties: the first best step; a NaN SE (one value) counts as 0
    assert learning.stops_improving([0, 5], [0.5, 0.5], [float("nan")] * 2)["best_step"] == 0
    assert learning.stops_improving([0, 5], [0.5, 0.6], [float("nan")] * 2)["last_improvement_step"] == 5


def run(env="frozenlake", arm="grpo", seed=0, steps=20, **kw):
    return {"env": env, "arm": arm, "seed": seed, "steps": steps, **kw}


def test_resume_skips_finished_runs_and_reruns_failed_ones(learning):
    jobs = [run(seed=s) for s in range(3)] + [run(arm="ppo", seed=0)]
    previous = [run(seed=0, curve=[(0, 0.1)]), run(seed=1, failed=True), run(seed=2, steps=10, curve=[(0, 0.2)]),
                run(env="bandit", seed=0, curve=[(0, 0.9)])]
    kept, todo = learning.resume_split(previous, jobs)
    # seed 0 (20 steps) is done; seed 1 failed (run again, its failure dropped); seed 2 was run with other steps
    assert [learning.run_key(j) for j in todo] == [("frozenlake", "grpo", 1, 20), ("frozenlake", "grpo", 2, 20),
                                                   ("frozenlake", "ppo", 0, 20)]
    assert {learning.run_key(r) for r in kept} == {("frozenlake", "grpo", 0, 20), ("frozenlake", "grpo", 2, 10),
                                                   ("bandit", "grpo", 0, 20)}
    # a second pass over its own output runs nothing
    assert learning.resume_split(kept + [run(seed=1), run(seed=2), run(arm="ppo")], jobs)[1] == []


def test_settings_must_match_for_a_resume(learning):
    from types import SimpleNamespace

    args = SimpleNamespace(model="small", val_seeds=128, paired_levels=256, override=[], test_freq=0)
    old = learning.settings_of(args, ["frozenlake", "bandit"])
    assert learning.same_settings(old, learning.settings_of(args, ["frozenlake"]))  # fewer envs: fine
    assert not learning.same_settings(old, learning.settings_of(SimpleNamespace(**{**vars(args), "val_seeds": 64}),
                                                                ["frozenlake"]))


def test_summary_per_arm_curve_and_paired(learning):
    def paired(change, z):
        return {"levels": 256.0, "success_before": 0.3, "success_after": 0.3 + change, "change": change, "se": 0.03,
                "z": z, "optimal_action_rate_before": 0.4, "optimal_action_rate_after": 0.5,
                "distinct_first_answers_before": 5.0, "distinct_first_answers_after": 7.0}

    runs = [run(seed=s, curve=[(0, b), (10, b + 0.1), (20, b + 0.1)], before=b, after=b + 0.1, rl_s=60.0,
                val_episodes=128, paired=paired(c, z), long=True)
            for s, b, c, z in ((0, 0.2, 0.10, 3.0), (1, 0.3, 0.06, 2.0), (2, 0.4, 0.02, 0.5))]
    runs.append(run(seed=3, failed=True))
    [row] = learning.summarise(runs, {})
    assert row["seeds"] == 3 and row["long"] and row["steps"] == 20
    assert row["gain"] == pytest.approx(0.1) and row["gain_se"] == pytest.approx(0.0, abs=1e-12)
    assert row["paired_change"] == pytest.approx(0.06)
    assert row["paired_change_se"] == pytest.approx(math.sqrt(((0.04 ** 2) * 2) / 2 / 3))
    assert row["paired_z"] == [3.0, 2.0, 0.5]
    assert row["optimal_action_rate_after"] == pytest.approx(0.5) and row["distinct_first_answers_after"] == 7.0
    assert [c["step"] for c in row["curve"]] == [0, 10, 20] and row["curve"][1]["mean"] == pytest.approx(0.4)
    assert row["best_step"] == 10 and row["last_improvement_step"] == 10 and not row["improving_at_end"]
    # one seed: the band is the binomial SE of its validation episodes
    [one] = learning.summarise(runs[:1], {})
    assert one["curve"][0]["se"] == pytest.approx(math.sqrt(0.2 * 0.8 / 128))


def test_plan_long_and_short_curves_and_estimate(learning):
    jobs = learning.plan_jobs(["frozenlake", "bandit"], None, seeds=2)
    fl = {j["arm"]: j for j in jobs if j["env"] == "frozenlake" and j["seed"] == 0}
    assert set(fl) == set(learning.ENVS["frozenlake"]["arms"])
    for arm, j in fl.items():
        long = arm in learning.ENVS["frozenlake"]["long_arms"]
        assert j["long"] == long and j["steps"] == learning.ENVS["frozenlake"]["long_steps" if long else "short_steps"]
    assert not any(j["arm"] == "solver-guided" for j in jobs if j["env"] == "bandit")
    assert [j["seed"] for j in jobs] == sorted(j["seed"] for j in jobs)  # seed-major
    assert min(j["steps"] for j in jobs if j["long"]) >= 100
    quick = learning.plan_jobs(["frozenlake"], None, seeds=1, quick=True)
    assert {j["steps"] for j in quick} == {learning.QUICK_STEPS} and not any(j["long"] for j in quick)
    assert {j["steps"] for j in learning.plan_jobs(["frozenlake"], ["grpo"], 1, steps=2)} == {2}
    # the estimate: one job alone is its run estimate; two at a time pay the measured slowdown; warm starts add
    one = learning.estimate_s(jobs[0], 128, 256)
    assert learning.plan_estimate(jobs[:1], 128, 256, 1, [])["total_s"] == round(one)
    two = learning.plan_estimate(jobs[:1], 128, 256, 2, ["frozenlake"])
    assert two["runs_s"] == round(one * learning.COST["parallel_slowdown"] / 2)
    assert two["warmstart_s"] == learning.COST["warm_s"]["frozenlake"]
    # measured step times of finished runs (same --jobs) replace the model's
    done = [run(steps=10, rl_s=100.0, val_s=30.0, n_vals=3, jobs=1)]
    measured = learning.measured_costs(done, 1)
    assert measured[("frozenlake", "grpo")] == {"step_s": 10.0, "val_s": 10.0}
    assert learning.measured_costs(done, 2) == {}
