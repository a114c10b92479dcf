"""Learning benchmark: does RL make the built-in model better, per env and arm, matched on updates, and for how long?

For every env, one warm start (the built-in model fine-tuned on expert demos, cached, trained once alone before the
runs), then every arm from that same warm start, with the same rollouts per step (the run defaults: 4 groups x 8) and
several seeds (trainer.seed). The arms: ``grpo``, ``ppo``, ``starpo-s`` and ``solver-guided`` (GRPO with the
``potential`` shaper, below). Each run records

* its validation curve: success at temperature 0.5 on ``--val-seeds`` fixed levels (seeds 123..) before RL and every
  ``test_freq`` steps; per arm the mean over seeds with a standard error, the step of the best mean and the last step
  at which the mean rose above every earlier mean by more than its standard error (where the curve stops improving);
* the greedy paired before/after comparison on ``--paired-levels`` held-out levels (``rollout.n_paired_levels``,
  ragen/runs/paired.py): success before and after, the paired change, its SE and z, optimal moves before and after
  (beside chance) and the distinct first answers of each pass; per arm the mean change with its SE across seeds and
  every run's z.

Reference lines per env, on the same levels (bench/state_dependence.py): the noiseless expert, a uniformly random
walker and the best fixed answer (the same answer every turn, the best of all of them), plus the warm start's
demonstrations' own success. Prints the plan with its time estimate first, then the tables; writes JSON and a PNG
(success against step, one panel per env, one line per arm with a band of one standard error over seeds).

    python bench/learning.py --quick     # frozenlake, one seed, every arm, 10 steps (a few minutes once warm)
    python bench/learning.py --plan      # print the full plan and its time estimate, run nothing
    python bench/learning.py             # full mode: GRPO's long curves, shorter ones for the other arms

Full mode does not fit 2 hours on the 2-core VM with every arm at 100 steps (about 5 h), nor with two long arms per env
(about 3 h), so only GRPO gets the long curve (``long_steps``), the other arms ``short_steps``; every curve is validated
every 20 steps (a short curve: before and after); the JSON's ``plan`` and the tables say which. A rerun with the same
``--out`` resumes: runs already in the JSON (not failed; same env, arm, seed and steps) are skipped and kept, so a
stopped benchmark loses at most the run in progress (``--fresh`` starts over). Runs are independent processes (``ragen
run``); ``--jobs 2`` runs two side by side, one torch thread each (measured slower per step than one run on both cores
for the answer-only ``small`` model: COST below).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date, datetime
from pathlib import Path

RESULTS = Path(__file__).parent / "results"

#: the arms: `ragen run` arguments. ``solver-guided`` is GRPO with the ``potential`` shaper (plugins/ragen-algos,
#: docs/plugin-hooks.md "Turn credit"): each turn's reward gets gamma*Phi(s') - Phi(s) (Phi = minus the solver's moves
#: left, 0 when solved), the trajectory score their discounted sum. GRPO's estimator reads only the trajectory score,
#: so with gamma 1 (the shaper's default) the arm trains on score + Phi(s_T) - Phi(s_0): within a group (one level,
#: one Phi(s_0)) a dense "how close did the episode get" on top of success. The per-turn terms reach only turn-level
#: estimators (turn-gae, bi-level-gae), which need a critic, so they are not GRPO; the shaper needs no such estimator.
ARMS: dict[str, list[str]] = {
    "grpo": ["--algo", "grpo"],
    "ppo": ["--algo", "ppo"],
    # 8 groups x 4 (the same 32 episodes a step): StarPO-S keeps the top 25% of groups by reward spread but at least
    # 4, so at the default 4 groups it kept them all and was PPO (2026-11-27); at 8 it trains on the 4 most uncertain
    "starpo-s": ["--algo", "starpo-s", "rollout.n_groups=8", "rollout.group_size=4"],
    "solver-guided": ["--algo", "grpo", "algo.options.shapers=[potential]"],
}

#: per env: the arms, which of them get the long curve, the RL steps of long and short curves, validation every N
#: steps, and env-specific overrides (of the warm start too). Matched across arms by design. Every run pins RAGEN's
#: full prompt frame (PINNED): bench/results/learning.json was measured on it, and a resumed run must match the runs
#: already in the JSON; `--fresh --override rollout.prompt=compact` measures the compact frame (`ragen run`'s
#: default for `small` since 2026-11-27, docs/models.md).
PINNED = ["rollout.prompt=full"]
ENVS: dict[str, dict] = {
    # 12 warm-start epochs: with the prompt in the loss the small model reads the state after 12 epochs, not after 4
    # (docs/models.md, "Reading the state"). Long curve: GRPO only (a second long arm per env does not fit 2 hours;
    # no arm beat the noise in 20 steps in the 2026-11-26 run, so there is no measured best arm to give it to)
    "frozenlake": {"arms": ("grpo", "ppo", "starpo-s", "solver-guided"), "long_arms": ("grpo",),
                   "long_steps": 100, "short_steps": 20, "test_freq": 20,
                   "overrides": ["warmstart.epochs=12"]},
    # sokoban needs 24: at 12 it was blind (26.6% optimal moves vs 27.6% chance), at 24 it reads (40.5% vs 26.7%,
    # bench/results/warmstart_reading.jsonl, 2026-11-27); both under-fit their own demos as much as unseen levels
    "sokoban": {"arms": ("grpo", "ppo", "starpo-s", "solver-guided"), "long_arms": ("grpo",),
                "long_steps": 100, "short_steps": 20, "test_freq": 20,
                "overrides": ["warmstart.epochs=24"]},
    # the expert always pulls the high-risk arm: noisy demos (half the pulls random) leave RL room above imitation;
    # one-turn episodes are cheap, so the warm start gets more passes (the copy of an arm name from the prompt is
    # learnt late). Long curve: GRPO (it drifts away from the risky arm on this bandit: docs/models.md).
    "bandit": {"arms": ("grpo", "ppo", "starpo-s"), "long_arms": ("grpo",),
               "not_run": {"solver-guided": "the bandit has no Env.potential(): the shaper would add nothing (= grpo)"},
               "long_steps": 100, "short_steps": 20, "test_freq": 20,
               "overrides": ["warmstart.noise=0.5", "warmstart.epochs=12"]},
}
QUICK_STEPS = 10  #: --quick: one env, one seed, every arm, 10 steps

#: the time model of the plan's estimate: one run alone on the idle 2-core VM, 2 torch threads, built-in `small`,
#: answer-only, 4 groups x 8. ``step_s``: a GRPO step (sokoban 3.56 s, the main job's median, 2026-11-27,
#: docs/benchmarks.md; frozenlake's CPU per step was the same, 6.8 vs 6.9 CPU-s; bandit: one short turn, assumed);
#: ``val_s``: one validation of 128 episodes at T 0.5 (64 took 4.7 s in the main job); ``paired_s``: one greedy pass
#: over 256 levels (24 s); ``warm_s``: the 12-epoch warm start (4 epochs took 129 s, demos included; sokoban's 24-epoch
#: one took 663 s on 2026-11-27); ``start_s``: process start, model load, export. Critic arms cost ``arm_factor`` x a
#: GRPO step (PPO / GRPO RL time 2.0-2.4 in the 2026-11-26 run; StarPO-S at 8 groups x 4 generates PPO's 32 episodes and
#: trains on 16 of them: 1.2, measured below). Two runs side by side at one thread each took 8.76 s per sokoban step
#: (2026-11-27, load 2) against 3.56 s alone: ``parallel_slowdown``. Measured times of finished runs in the JSON replace
#: step_s and val_s on a resume. Re-based on the 2026-11-27 run (bench/results/learning.json): a 100-step frozenlake
#: GRPO step took a median 6.4 s from the 12-epoch warm start (5.1-8.7 s; the main job's 3.56 s was from a 4-epoch one),
#: bandit 1.4-1.7 s, PPO 2.0x GRPO, StarPO-S at 8 x 4 1.0-1.3x; sokoban is assumed to cost what frozenlake does.
COST = {
    "step_s": {"frozenlake": 6.4, "sokoban": 6.4, "bandit": 1.5},
    "val_s": {"frozenlake": 9.0, "sokoban": 9.0, "bandit": 2.0},
    "paired_s": {"frozenlake": 24.0, "sokoban": 24.0, "bandit": 4.0},
    "warm_s": {"frozenlake": 390.0, "sokoban": 663.0, "bandit": 130.0},
    "start_s": 10.0,
    "arm_factor": {"grpo": 1.0, "solver-guided": 1.0, "ppo": 2.0, "starpo-s": 1.2},
    "parallel_slowdown": 2.46,
}


# ---- pure helpers (tests/bench/test_learning.py) ---------------------------------------------------------------------

def run_key(r: dict) -> tuple:
    """What makes two runs the same run for a resume: env, arm, seed and RL steps."""
    return (r["env"], r["arm"], int(r["seed"]), int(r["steps"]))


def mean_se(xs: list[float]) -> tuple[float, float]:
    """Mean and its standard error (NaN with one value)."""
    xs = [x for x in xs if x is not None]
    n = len(xs)
    if not n:
        return float("nan"), float("nan")
    m = sum(xs) / n
    if n < 2:
        return m, float("nan")
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1) / n)


def stops_improving(steps: list[int], means: list[float], ses: list[float]) -> dict:
    """Where a mean curve stops improving: the step of its best mean (the first, on ties), and the last step whose mean
    rose above every earlier mean by more than its own standard error (None: it never did). ``improving_at_end``: that
    step is the curve's last, so longer training might still help."""
    best = max(range(len(means)), key=lambda i: (means[i], -i))
    last = None
    for i in range(1, len(means)):
        se = ses[i] if ses[i] is not None and not math.isnan(ses[i]) else 0.0
        if means[i] - max(means[:i]) > se:
            last = steps[i]
    return {"best_step": steps[best], "best": means[best], "last_improvement_step": last,
            "improving_at_end": last is not None and last == steps[-1]}


def mean_curve(runs: list[dict]) -> list[dict]:
    """The runs' validation curves averaged per step: mean, standard error over seeds (one seed: the binomial SE of
    its validation episodes), seeds."""
    out = []
    for step in sorted({s for r in runs for s, _ in r["curve"]}):
        vals = [dict(r["curve"])[step] for r in runs if step in dict(r["curve"])]
        m, se = mean_se(vals)
        if len(vals) == 1:
            n = runs[0].get("val_episodes") or 0
            se = math.sqrt(m * (1 - m) / n) if n else float("nan")
        out.append({"step": step, "mean": m, "se": se, "seeds": len(vals)})
    return out


def plan_jobs(envs: list[str], arms: list[str] | None, seeds: int, steps: int = 0, test_freq: int = 0,
              quick: bool = False, long_arms: list[str] | None = None) -> list[dict]:
    """The runs, seed-major (a stopped benchmark has every env and arm at the seeds it finished), the long ones of a
    seed first. ``steps`` / ``test_freq`` (non-zero) set every run's; ``--quick`` runs QUICK_STEPS."""
    jobs = []
    for seed in range(seeds):
        batch = []
        for env in envs:
            spec = ENVS[env]
            for arm in spec["arms"]:
                if arms is not None and arm not in arms:
                    continue
                long = arm in (long_arms if long_arms is not None else spec["long_arms"])
                n = steps or (QUICK_STEPS if quick else spec["long_steps" if long else "short_steps"])
                freq = test_freq or (max(1, n // 2) if quick else spec["test_freq"])
                batch.append({"env": env, "arm": arm, "seed": seed, "steps": n, "test_freq": min(freq, n),
                              "long": long and not quick and not steps})
        jobs += sorted(batch, key=lambda j: -j["steps"])
    return jobs


def estimate_s(job: dict, val_seeds: int, paired_levels: int, cost: dict = COST, measured: dict | None = None) -> float:
    """Seconds of one run alone on 2 threads (the time model COST; ``measured[(env, arm)]`` = {step_s, val_s} from
    finished runs replaces it)."""
    env, arm = job["env"], job["arm"]
    m = (measured or {}).get((env, arm), {})
    step_s = m.get("step_s") or cost["step_s"].get(env, 3.5) * cost["arm_factor"].get(arm, 1.0)
    val_s = m.get("val_s") or cost["val_s"].get(env, 9.0) * val_seeds / 128
    n_vals = 1 + math.ceil(job["steps"] / job["test_freq"])
    return (cost["start_s"] + job["steps"] * step_s + n_vals * val_s
            + 2 * cost["paired_s"].get(env, 24.0) * paired_levels / 256)


def plan_estimate(jobs: list[dict], val_seeds: int, paired_levels: int, jobs_at_once: int, warm_envs: list[str],
                  cost: dict = COST, measured: dict | None = None) -> dict:
    """The plan's wall time: the runs (side by side: each ``parallel_slowdown`` x longer, ``jobs_at_once`` at a time)
    plus the warm starts of ``warm_envs`` (those not in the cache)."""
    runs = sum(estimate_s(j, val_seeds, paired_levels, cost, measured) for j in jobs)
    if jobs_at_once > 1:
        runs *= cost["parallel_slowdown"] / jobs_at_once
    warm = sum(cost["warm_s"].get(e, 390.0) for e in warm_envs)
    return {"runs_s": round(runs), "warmstart_s": round(warm), "total_s": round(runs + warm)}


def measured_costs(runs: list[dict], jobs_at_once: int) -> dict:
    """Per (env, arm): the median step time and per-validation time of finished runs made with the same --jobs (so
    already under the same load), scaled to one run alone for ``estimate_s``."""
    out: dict = {}
    scale = COST["parallel_slowdown"] if jobs_at_once > 1 else 1.0
    for r in runs:
        if r.get("failed") or r.get("jobs") != jobs_at_once or not r.get("steps"):
            continue
        out.setdefault((r["env"], r["arm"]), []).append(r)
    return {k: {"step_s": _median([r["rl_s"] / r["steps"] for r in rs]) / scale,
                "val_s": _median([r.get("val_s", 0.0) / max(1, r.get("n_vals", 1)) for r in rs]) / scale or None}
            for k, rs in out.items()}


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def resume_split(previous: list[dict], jobs: list[dict]) -> tuple[list[dict], list[dict]]:
    """(runs of the JSON kept as they are, jobs still to run): a job whose key has a finished run is skipped; failed
    runs are run again (and replaced); runs the plan does not name are kept."""
    done = {run_key(r): r for r in previous if not r.get("failed")}
    todo = [j for j in jobs if run_key(j) not in done]
    todo_keys = {run_key(j) for j in todo}
    kept = [r for r in previous if run_key(r) not in todo_keys and not (r.get("failed") and run_key(r) in done)]
    return kept, todo


# ---- running ---------------------------------------------------------------------------------------------------------

def run_one(job: dict, args, root: Path) -> dict:
    """One `ragen run` in a subprocess; its validation curve, paired comparison and timing from its run folder."""
    env, arm, seed, steps = job["env"], job["arm"], job["seed"], job["steps"]
    spec = ENVS[env]
    name = f"{env}-{arm}-s{seed}-n{steps}"
    if (root / name).exists():  # a reused --run-dir with the folder of a failed or stopped try: keep it, use the next
        name = next(f"{name}-{k}" for k in range(2, 10_000) if not (root / f"{name}-{k}").exists())
    cmd = [sys.executable, "-m", "ragen", "run", "--env", env, *ARMS[arm], "--model", args.model,
           f"trainer.seed={seed}", f"trainer.steps={steps}", f"trainer.test_freq={job['test_freq']}",
           "trainer.save_freq=0", f"trainer.threads={args.threads}", f"rollout.n_val_groups={args.val_seeds}",
           f"rollout.n_paired_levels={args.paired_levels}",
           "logging.progress=false", "logging.save_trajectories=0", f"logging.run_dir={root}", f"logging.name={name}",
           "collapse.enabled=false", "early_stop.enabled=false", *PINNED, *spec["overrides"], *args.override]
    base = {**job, "command": " ".join(cmd[1:]), "jobs": args.jobs, "threads": args.threads, "commit": commit()}
    out = launch(cmd, base, root / name, read_run)
    if out.get("failed"):
        return out
    p = out.get("paired") or {}
    print(f"  {name}: T0.5 {100 * out['before']:.1f}% -> {100 * out['after']:.1f}%; greedy "
          f"{100 * p.get('success_before', 0):.1f}% -> {100 * p.get('success_after', 0):.1f}% "
          f"(z {p.get('z', float('nan')):+.1f}) in {out['steps']} steps, {out['wall_s'] / 60:.1f} min", flush=True)
    return out


def launch(cmd: list[str], base: dict, run_dir: Path, read) -> dict:
    """Run one `ragen run` command (offline) to its end: ``base`` plus ``read(run_dir)`` and the wall time, or ``base``
    marked failed with the tail of stderr (printed too). bench/real_llm.py runs its jobs through this as well."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, check=False)
    wall = round(time.perf_counter() - t0, 1)
    if proc.returncode != 0:
        print(f"  {run_dir.name}: FAILED\n{proc.stderr[-2000:]}", file=sys.stderr, flush=True)
        return {**base, "failed": True, "wall_s": wall, "error": proc.stderr[-2000:]}
    return {**base, **read(run_dir), "wall_s": wall}


def read_run(run_dir: Path) -> dict:
    """The numbers of a finished run folder (metrics.jsonl, paired_trajectories.jsonl)."""
    from ragen.runs.plot import read_jsonl
    from ragen.runs.summary import STATE_KEYS

    rows = read_jsonl(run_dir / "metrics.jsonl")
    vals = [r for r in rows if r.get("val/success") is not None]
    warm = next((r for r in rows if "sft/demo_success" in r), {})
    paired_row = next((r for r in reversed(rows) if r.get("paired/change") is not None), {})
    shaped = [r["shaper/potential/turns_with_potential"] for r in rows
              if r.get("shaper/potential/turns_with_potential") is not None]
    state = {f"{w}_{k}": row.get(f"val/{k}") for w, row in (("before", vals[0]), ("after", vals[-1]))
             for k in STATE_KEYS}
    return {
        "curve": [(r["step"], r["val/success"]) for r in vals], "val_episodes": vals[0].get("val/num_trajectories"),
        "before": vals[0]["val/success"], "after": vals[-1]["val/success"],
        "steps_done": max(r["step"] for r in rows),
        "rl_s": round(sum(r.get("timing/step_s", 0.0) or 0.0 for r in rows), 1),
        "val_s": round(sum((r.get("val/time/generate_s") or 0.0) + (r.get("val/time/env_s") or 0.0) for r in vals), 1),
        "n_vals": len(vals),
        "demo_success": warm.get("sft/demo_success"), "warmstart_s": warm.get("timing/warmstart_s"),
        "first_step_valid_format": next((r.get("rollout/valid_format_rate") for r in rows if r["step"] == 1), None),
        "val_state": state,
        "paired": {**{k.removeprefix("paired/"): v for k, v in paired_row.items() if k.startswith("paired/")},
                   **paired_first_answers(run_dir / "paired_trajectories.jsonl")} if paired_row else None,
        "shaper_turns_with_potential": sum(shaped) / len(shaped) if shaped else None,
    }


def paired_first_answers(path: Path) -> dict:
    """Distinct first answers of the greedy passes before and after RL (ragen.rollout.runner.first_answer's
    normalisation): one answer on every level is a policy that ignores its state."""
    from ragen.runs.plot import read_jsonl

    firsts: dict[str, set] = {"before": set(), "after": set()}
    for r in read_jsonl(path) if path.exists() else []:
        turns = r.get("turns") or []
        answer = turns[0].get("answer") if turns else None
        if r.get("pass") in firsts and answer is not None:
            firsts[r["pass"]].add("".join(answer.split()).lower())
    return {f"distinct_first_answers_{k}": float(len(v)) for k, v in firsts.items() if v}


def warm_config(env: str, args):
    from ragen.config import load_config

    return load_config(overrides=[f"env.name={env}", f"model.name={args.model}", *PINNED, *ENVS[env]["overrides"],
                                  *args.override])


def warm_cached(env: str, args) -> bool:
    from ragen.warmstart.cache import INFO_FILE, applies, cache_key, cache_root

    cfg = warm_config(env, args)
    return not applies(cfg) or (cfg.warmstart.cache and (cache_root() / cache_key(cfg) / INFO_FILE).is_file())


def warm_start(env: str, args, root: Path) -> None:
    """Train (or find in the cache) the env's warm start, with the settings every run of the env will use."""
    from ragen.warmstart.cache import applies, prepare

    cfg = warm_config(env, args)
    if not applies(cfg):
        print(f"  {env}: no warm start (warmstart.mode)", flush=True)
        return
    t0 = time.perf_counter()
    _, metrics = prepare(cfg, root / env)
    print(f"  {env}: warm start {'cached' if metrics['warmstart/cached'] else 'trained'} in "
          f"{time.perf_counter() - t0:.0f} s; demos' success {100 * metrics['sft/demo_success']:.1f}%", flush=True)


def references(env: str, val_seeds: int, paired_levels: int) -> dict:
    """Expert, random walker and best fixed answer (bench/state_dependence.py) on the validation levels (seeds 123..,
    the curve's) and on the paired levels (the greedy comparison's)."""
    sys.path.insert(0, str(Path(__file__).parent))
    import state_dependence as sd

    out = {}
    for label, levels in (("val", val_seeds), ("paired", paired_levels)):
        best = sd.best_fixed(env, levels)
        out[label] = {"levels": levels, "expert": sd.play(env, sd.expert, levels)["success"],
                      "random": sd.play(env, sd.uniform, levels)["success"],
                      "best_fixed": best["success"], "best_fixed_answer": best["answer"]}
    return out


# ---- summary ---------------------------------------------------------------------------------------------------------

def summarise(runs: list[dict], refs: dict) -> list[dict]:
    """One row per (env, arm, steps): the T 0.5 curve's before/after, where it stops improving, and the greedy paired
    comparison's mean change with its SE across seeds and each run's z."""
    table = []
    groups = dict.fromkeys((r["env"], r["arm"], r["steps"]) for r in runs if not r.get("failed"))
    for env, arm, steps in groups:
        ok = [r for r in runs if (r["env"], r["arm"], r["steps"]) == (env, arm, steps) and not r.get("failed")]
        curve = mean_curve(ok)
        after, after_se = mean_se([r["after"] for r in ok])
        gain, gain_se = mean_se([r["after"] - r["before"] for r in ok])
        paired = [r["paired"] for r in ok if r.get("paired")]

        def pget(key, paired=paired):
            return mean_se([p.get(key) for p in paired])[0] if paired else None

        change, change_se = mean_se([p["change"] for p in paired]) if paired else (None, None)
        row = {"env": env, "arm": arm, "steps": steps, "long": any(r.get("long") for r in ok), "seeds": len(ok),
               "before": mean_se([r["before"] for r in ok])[0], "after": after, "after_se": after_se,
               "gain": gain, "gain_se": gain_se, "curve": curve,
               **stops_improving([c["step"] for c in curve], [c["mean"] for c in curve], [c["se"] for c in curve]),
               "paired_levels": pget("levels"), "greedy_before": pget("success_before"),
               "greedy_after": pget("success_after"), "paired_change": change, "paired_change_se": change_se,
               "paired_z": [p.get("z") for p in paired],
               **{f"{k}_{w}": pget(f"{k}_{w}") for k in ("optimal_action_rate", "optimal_action_chance",
                                                         "distinct_first_answers") for w in ("before", "after")},
               "demo_success": ok[0].get("demo_success"),
               "rl_min": sum(r["rl_s"] for r in ok) / len(ok) / 60,
               "s_per_step": sum(r["rl_s"] / max(1, r["steps"]) for r in ok) / len(ok),
               "shaper_turns_with_potential": ok[0].get("shaper_turns_with_potential")}
        table.append(row)
    return table


def pct(x, signed: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{100 * x:+.1f}" if signed else f"{100 * x:.1f}"


def _num(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.0f}"


def markdown(head: list[str], rows: list[list[str]]) -> str:
    rows = [[c.replace("|", "\\|") for c in r] for r in rows]  # an answer such as "Up || Up" in a cell
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    return "\n".join(lines)


def print_tables(table: list[dict], refs: dict) -> None:
    print("\nValidation curve (T 0.5, mean over seeds; 'last +SE': the last step whose mean beat every earlier one by "
          "more than its SE):")
    print(markdown(
        ["env", "arm", "curve", "steps", "seeds", "before %", "after %", "gain (pts)", "± s.e.", "best step",
         "best %", "last +SE", "RL min/run", "s/step"],
        [[t["env"], t["arm"], "long" if t["long"] else "short", str(t["steps"]), str(t["seeds"]), pct(t["before"]),
          pct(t["after"]), pct(t["gain"], True), pct(t["gain_se"]), str(t["best_step"]), pct(t["best"]),
          _num(t["last_improvement_step"]) + (" (end)" if t["improving_at_end"] else ""), f"{t['rl_min']:.1f}",
          f"{t['s_per_step']:.1f}"] for t in table]))
    print("\nGreedy paired comparison (held-out levels, before vs after RL; change: mean ± SE over seeds):")
    print(markdown(
        ["env", "arm", "steps", "levels", "greedy before %", "after %", "change (pts)", "± s.e.", "z per run",
         "optimal moves before -> after % (chance)", "first answers before -> after"],
        [[t["env"], t["arm"], str(t["steps"]), f"{t['paired_levels']:.0f}" if t["paired_levels"] else "-",
          pct(t["greedy_before"]), pct(t["greedy_after"]), pct(t["paired_change"], True), pct(t["paired_change_se"]),
          ", ".join(f"{z:+.1f}" for z in t["paired_z"] if z is not None),
          (f"{pct(t['optimal_action_rate_before'])} -> {pct(t['optimal_action_rate_after'])} "
           f"({pct(t['optimal_action_chance_after'])})"),
          f"{_num(t['distinct_first_answers_before'])} -> {_num(t['distinct_first_answers_after'])}"]
         for t in table]))
    print("\nReference lines (success %, validation levels / paired levels):")
    demos = {t["env"]: t["demo_success"] for t in table}
    print(markdown(["env", "expert", "random walker", "best fixed answer", "demonstrations"],
                   [[env, f"{pct(r['val']['expert'])} / {pct(r['paired']['expert'])}",
                     f"{pct(r['val']['random'])} / {pct(r['paired']['random'])}",
                     (f"{pct(r['val']['best_fixed'])} / {pct(r['paired']['best_fixed'])} "
                      f"({r['paired']['best_fixed_answer']})"), pct(demos.get(env))] for env, r in refs.items()]))


def plot(table: list[dict], refs: dict, demos: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = list(dict.fromkeys(t["env"] for t in table))
    fig, axes = plt.subplots(1, len(envs), figsize=(5.5 * len(envs), 4.4), squeeze=False)
    styles = (("expert", "expert", "--", "black"), ("best_fixed", "best fixed answer", "-.", "tab:brown"),
              ("random", "random walker", ":", "tab:gray"))
    for ax, env in zip(axes[0], envs):
        for t in (t for t in table if t["env"] == env):
            steps = [c["step"] for c in t["curve"]]
            m = [100 * c["mean"] for c in t["curve"]]
            se = [0.0 if math.isnan(c["se"]) else 100 * c["se"] for c in t["curve"]]
            label = f"{t['arm']} ({t['seeds']} seed{'s' if t['seeds'] > 1 else ''})"
            (line,) = ax.plot(steps, m, marker="o", markersize=3, label=label)
            ax.fill_between(steps, [a - b for a, b in zip(m, se)], [a + b for a, b in zip(m, se)], alpha=0.2,
                            color=line.get_color())
            ax.plot([t["best_step"]], [100 * t["best"]], marker="*", markersize=11, color=line.get_color())
        ref = refs.get(env, {}).get("val", {})
        for key, label, style, color in styles:
            if ref.get(key) is not None:
                ax.axhline(100 * ref[key], color=color, linestyle=style, linewidth=1, label=label)
        if demos.get(env) is not None:
            ax.axhline(100 * demos[env], color="tab:olive", linestyle=(0, (1, 3)), linewidth=1, label="demonstrations")
        ax.set_title(f"{env} (star: best mean)")
        ax.set_xlabel("RL step")
        ax.set_ylabel(f"validation success (%), T 0.5, {ref.get('levels', '?')} levels")
        ax.set_ylim(0, 105)
        ax.legend(fontsize=7)
    import textwrap

    fig.suptitle("\n".join(textwrap.wrap(title, int(110 * len(envs)))), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- main ------------------------------------------------------------------------------------------------------------

def commit() -> str | None:
    """The git commit the runs are made with (a resumed JSON may hold runs of several: each run records its own);
    '+dirty' when tracked files (results aside) differ from it."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def machine() -> str:
    cpu = platform.processor() or ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{platform.machine()} {cpu} cpus={os.cpu_count()}".replace("  ", " ")


def settings_of(args, envs: list[str]) -> dict:
    """What every run of one JSON must share (a resume refuses a JSON made with other settings)."""
    return {"model": args.model, "val_seeds": args.val_seeds, "paired_levels": args.paired_levels,
            "override": list(args.override), "test_freq": args.test_freq,
            "envs": {e: {"overrides": ENVS[e]["overrides"], "test_freq": ENVS[e]["test_freq"]} for e in envs}}


def same_settings(old: dict, new: dict) -> bool:
    shared = set(old.get("envs", {})) & set(new["envs"])
    return (all(old.get(k) == new[k] for k in new if k != "envs")
            and all(old["envs"][e] == new["envs"][e] for e in shared))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help=f"One env (frozenlake), one seed, every arm, {QUICK_STEPS} steps.")
    ap.add_argument("--plan", action="store_true", help="Print the plan and its time estimate, run nothing.")
    ap.add_argument("--envs", nargs="+", default=None, choices=list(ENVS))
    ap.add_argument("--arms", "--algos", nargs="+", default=None, choices=list(ARMS), help="Default: each env's arms.")
    ap.add_argument("--long-arms", nargs="+", default=None, choices=list(ARMS),
                    help="Arms that get the long curve (default: each env's long_arms).")
    ap.add_argument("--seeds", type=int, default=None, help="RL seeds per (env, arm) (default 3; --quick 1).")
    ap.add_argument("--steps", type=int, default=0, help="RL steps of every run (0 = the env's long/short steps).")
    ap.add_argument("--test-freq", type=int, default=0, help="Validate every N steps (0 = the env's default).")
    ap.add_argument("--val-seeds", type=int, default=0, help="Validation levels (T 0.5) of the curve (0 = 128; "
                    "--quick 64).")
    ap.add_argument("--paired-levels", type=int, default=0, help="rollout.n_paired_levels: greedy before/after levels "
                    "(0 = 256; --quick 64).")
    ap.add_argument("--model", default="small")
    ap.add_argument("--jobs", type=int, default=1, help="Runs at a time (each gets --threads torch threads).")
    ap.add_argument("--threads", type=int, default=0, help="torch threads per run (0 = cores / jobs).")
    ap.add_argument("--override", nargs="*", default=[], help="Extra section.key=value overrides for every run.")
    ap.add_argument("--run-dir", type=Path, default=None, help="Keep the runs here (default: a temp folder).")
    ap.add_argument("--out", type=Path, default=None, help="JSON path (default bench/results/learning[-quick].json).")
    ap.add_argument("--fresh", action="store_true", help="Ignore the runs already in --out (overwrite it).")
    args = ap.parse_args()
    envs = args.envs or (["frozenlake"] if args.quick else list(ENVS))
    seeds = args.seeds or (1 if args.quick else 3)
    args.val_seeds = args.val_seeds or (64 if args.quick else 128)
    args.paired_levels = args.paired_levels or (64 if args.quick else 256)
    args.threads = args.threads or max(1, (os.cpu_count() or 1) // args.jobs)
    out = args.out or RESULTS / ("learning-quick.json" if args.quick else "learning.json")
    settings = settings_of(args, envs)
    jobs = plan_jobs(envs, args.arms, seeds, args.steps, args.test_freq, args.quick, args.long_arms)

    previous: dict = {}
    if out.exists() and not args.fresh:
        previous = json.loads(out.read_text())
        if "settings" not in previous:  # written by the script's version before resuming existed (it is in git)
            print(f"{out} was written by the previous version of this script: not resumable, it will be replaced")
            previous = {}
        elif not same_settings(previous["settings"], settings):
            sys.exit(f"{out} was made with other settings ({previous.get('settings')}; now {settings}): "
                     "pass --fresh to overwrite it, or another --out")
    kept, todo = resume_split(previous.get("runs", []), jobs)
    cold = [e for e in envs if any(j["env"] == e for j in todo) and not warm_cached(e, args)]
    measured = measured_costs(kept, args.jobs)
    est = plan_estimate(todo, args.val_seeds, args.paired_levels, args.jobs, cold, measured=measured)
    full_est = plan_estimate(jobs, args.val_seeds, args.paired_levels, args.jobs, cold, measured=measured)

    print(f"Plan ({'quick' if args.quick else 'full'} mode, model {args.model}, {args.val_seeds} validation levels, "
          f"{args.paired_levels} paired levels, {args.jobs} run(s) at a time x {args.threads} torch thread(s)):")
    todo_keys = {run_key(j) for j in todo}
    rows = []
    for (e, a), js in sorted(_by(jobs, lambda j: (j["env"], j["arm"])).items(),
                             key=lambda kv: (envs.index(kv[0][0]), list(ARMS).index(kv[0][1]))):
        n_todo = sum(run_key(j) in todo_keys for j in js)
        rows.append([e, a, "long" if js[0]["long"] else "short", str(js[0]["steps"]), str(js[0]["test_freq"]),
                     str(n_todo), str(len(js) - n_todo),
                     f"{estimate_s(js[0], args.val_seeds, args.paired_levels, measured=measured) / 60:.1f}"])
    print(markdown(["env", "arm", "curve", "steps", "val every", "seeds to run", "kept", "est. min/run"], rows))
    every_long = ""
    if not (args.quick or args.steps):
        alt = plan_estimate(plan_jobs(envs, args.arms, seeds, 0, args.test_freq, False, list(ARMS)),
                            args.val_seeds, args.paired_levels, args.jobs, cold, measured=measured)
        every_long = f"; every arm on the long curve: {alt['total_s'] / 60:.0f} min"
    print(f"{len(jobs)} runs planned, {len(jobs) - len(todo)} already in {out}, {len(todo)} to run; warm starts to "
          f"train: {', '.join(cold) or 'none (cached)'}. Estimated wall time: {est['total_s'] / 60:.0f} min "
          f"(runs {est['runs_s'] / 60:.0f}, warm starts {est['warmstart_s'] / 60:.0f}; the whole plan from nothing "
          f"{full_est['total_s'] / 60:.0f} min{every_long}), on an idle 2-core VM (COST; about +-30%)", flush=True)
    if args.plan:
        return

    root = args.run_dir or (Path(tempfile.mkdtemp(prefix="ragen-learning-")) if todo else None)
    t0 = time.perf_counter()
    session = {"started": datetime.now().isoformat(timespec="seconds"), "machine": machine(),
               "load_avg_at_start": [round(x, 2) for x in os.getloadavg()], "runs_planned": len(todo),
               "jobs": args.jobs, "threads_per_run": args.threads, "estimate_min": round(est["total_s"] / 60),
               "run_dir": str(root)}
    state = {"previous": previous, "settings": settings, "session": session, "t0": t0, "jobs": jobs,
             "envs": envs, "args": args, "out": out, "estimate": full_est}

    # the warm start of each env first, alone (it is cached: every run of that env then starts from it), and the
    # reference lines (kept from the JSON when it has them for the same levels)
    refs = dict(previous.get("references", {}))
    for env in envs:
        if any(j["env"] == env for j in todo):
            warm_start(env, args, root / "warm")
        if env not in refs:
            t = time.perf_counter()
            refs[env] = references(env, args.val_seeds, args.paired_levels)
            print(f"  {env}: reference lines in {time.perf_counter() - t:.0f} s: {refs[env]['val']}", flush=True)
    state["refs"] = refs
    print(f"{len(todo)} runs, {args.jobs} at a time, {args.threads} torch thread(s) each; runs in {root}", flush=True)
    runs: list[dict] = list(kept)
    lock = threading.Lock()
    table = write(runs, state)

    def one(job):
        nonlocal table
        res = run_one(job, args, root)
        with lock:  # the JSON and PNG are rewritten after every run: a stopped benchmark keeps what it measured
            runs.append(res)
            table = write(runs, state)

    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(one, todo))
    print_tables(table, refs)
    png = f" and {out.with_suffix('.png')}" if table else " (no finished run: no PNG)"
    print(f"wrote {out}{png} in {(time.perf_counter() - t0) / 60:.1f} min "
          f"(estimate {est['total_s'] / 60:.0f} min)")


def _by(items: list[dict], key) -> dict:
    out: dict = {}
    for it in items:
        out.setdefault(key(it), []).append(it)
    return out


def write(runs: list[dict], state: dict) -> list[dict]:
    """Summarise the runs so far (in env, arm, steps, seed order) into the JSON and the PNG; returns the table."""
    envs, jobs, out, args = state["envs"], state["jobs"], state["out"], state["args"]
    order = {e: i for i, e in enumerate(ENVS)}
    arms = {a: i for i, a in enumerate(ARMS)}
    runs = sorted(runs, key=lambda r: (order.get(r["env"], 99), arms.get(r["arm"], 99), r["steps"], r["seed"]))
    table = summarise(runs, state["refs"])
    demos = {r["env"]: r["demo_success"] for r in runs if r.get("demo_success") is not None}
    session = {**state["session"], "ended": datetime.now().isoformat(timespec="seconds"),
               "load_avg_at_end": [round(x, 2) for x in os.getloadavg()],
               "wall_s": round(time.perf_counter() - state["t0"], 1)}
    sessions = [*state["previous"].get("sessions", []), session]
    done = {run_key(r) for r in runs if not r.get("failed")}
    planned = {run_key(j) for j in jobs}
    result = {
        "benchmark": "learning", "date": date.today().isoformat(), "machine": session["machine"],
        "load_avg_at_start": sessions[0]["load_avg_at_start"], "load_avg_at_end": session["load_avg_at_end"],
        "python": platform.python_version(), "mode": "quick" if args.quick else "full",
        "complete": planned <= done, "runs_done": len(planned & done), "runs_planned": len(planned),
        "settings": state["settings"],
        "plan": {"arms": {e: list(dict.fromkeys(j["arm"] for j in jobs if j["env"] == e)) for e in envs},
                 "long_curves": {e: sorted({j["arm"] for j in jobs if j["env"] == e and j["long"]}) for e in envs},
                 "steps": {f"{j['env']}/{j['arm']}": j["steps"] for j in jobs},
                 "not_run": {f"{e}/{a}": why for e in envs for a, why in ENVS[e].get("not_run", {}).items()},
                 "estimate_min": round(state["estimate"]["total_s"] / 60), "cost_model": COST},
        "arms": {a: " ".join(v) for a, v in ARMS.items()},
        "sessions": sessions, "wall_s": round(sum(s["wall_s"] for s in sessions), 1),
        "references": state["refs"], "demo_success": demos,
        "table": table, "runs": runs,
        "targets": "frozenlake and sokoban: best algo's gain >= 15 points and > 2 s.e.; starpo-s >= ppo; "
                   "bandit: high-risk arm (success) >= 90% after RL",
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2))
    tmp.replace(out)
    if table:
        title = (f"bench/learning.py, {result['mode']} mode, {result['date']}, {result['machine']}, load average "
                 f"{result['load_avg_at_start'][0]} -> {result['load_avg_at_end'][0]}, model {args.model}")
        plot(table, state["refs"], demos, out.with_suffix(".png"), title)
    return table


if __name__ == "__main__":
    main()
