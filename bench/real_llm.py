"""Real-model benchmark: does RL make a pretrained instruct LLM (SmolLM2-135M-Instruct by default) better on held-out
levels, on the CPU it runs on, and does it beat the policies that never read their state?

Per env (frozenlake, sokoban) and arm (``grpo``, ``ppo``, ``dapo-wide``: ARMS) and RL seed, one ``ragen run`` of the
env's RECIPE (below: warm start on expert demos, the answer-only parser, the compact prompt, ...) with the greedy paired
before/after comparison on ``--paired-levels`` held-out levels (``rollout.n_paired_levels``: the validation seeds
123.., split val; ragen/runs/paired.py). Beside each run, on the same levels, the blind baselines:

* a random walker: a uniformly random action name for each action (bench/state_dependence.py ``play``/``uniform``,
  played through the rollout loop), and its exact expectation (the share of all action sequences that solve a level,
  from the level's transition table below);
* the best fixed action sequence chosen on training levels: an open-loop policy (the same sequence of single actions
  every episode, as long as the env's action budget, ``max_turns x max_actions_per_turn``), the best of all
  ``|A|^k`` sequences by success on ``--train-levels`` training levels (split train, seeds 10000.., the levels the
  training plan draws), then scored on the held-out levels. A policy that does not beat it has not been shown to
  read its state. The search is ``ragen.envs.openloop``'s (the one ``ragen doctor`` uses): exhaustive and exact,
  each level's reachable states stepped once and shared by every prefix that reaches them.

Prints the plan and a time estimate (COST) first; a rerun with the same ``--out`` resumes (runs in the JSON with the
same env, arm, seed and steps are kept; ``--fresh`` starts over). Writes JSON and a PNG
(bench/results/real_llm.json by default). Each run's record holds its paired counts, its blind baselines on the same
levels, its full command, its timings (warm start, RL, s per step, passes, generation and update tokens/s, peak RSS)
and its commit.

    python bench/real_llm.py --plan                         # the plan and its time estimate, run nothing
    python bench/real_llm.py --envs frozenlake --arms grpo --seeds 1
    python bench/real_llm.py --model gemma3 --envs frozenlake  # Gemma-3-270M: bench/results/real_llm-gemma3.json
    python bench/real_llm.py --model /path/to/model.gguf     # --model: smollm2, gemma3, a GGUF file, a local HF folder

Needs the ``smollm2`` extra for the default model, the ``gemma3`` extra for ``--model gemma3`` (docs/models.md). The
time estimate (COST) is SmolLM2-135M's: a larger model or vocabulary takes longer.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
from datetime import date, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import learning  # noqa: E402  (bench/learning.py: the resume key, mean/SE, commit, machine, read_run)

RESULTS = Path(__file__).parent / "results"

#: the arms: `ragen run` arguments. GRPO (no critic: the cheapest update, one policy in memory) and PPO (RAGEN's
#: default algorithm; a critic of the model's size, about twice GRPO's update time)
ARMS: dict[str, list[str]] = {
    # zero-spread groups dropped: from a warm start that reads, most GRPO groups all succeed, and updates on their zero
    # advantages still moved the weights (Adam, the entropy bonus): SmolLM2 on FrozenLake fell from 78.9% to 70.3%
    # greedy in 20 steps at actor lr 5e-5 with them kept. Dropping them is not enough: `--algo dapo` (the same drop,
    # token-mean, no entropy bonus) fell to 69.5% at 5e-5 and 75.0% at 1e-5 (docs/notes/2026-11-29-real-llm-reads.md,
    # section 5: credit per trajectory blames a failure's correct moves)
    "grpo": ["--algo", "grpo", "--filter", "zero-variance"],
    "ppo": ["--algo", "ppo"],
    # DAPO sampling wide: 16 groups of 8 per step (128 episodes) instead of the recipe's 4 x 4, updating on the groups
    # with reward spread (1-7 per step, against 0-2): the first arm that moved SmolLM2 up, +5.5 points greedy after 15
    # steps at actor lr 1e-5 (z 2.0, one seed; section 6 of the note). Its `section.key=value` entries come after the
    # recipe's, so they replace its group settings.
    "dapo-wide": ["--algo", "dapo", "rollout.n_groups=16", "rollout.group_size=8"],
}

#: per env: the `ragen run` overrides of every run (the recipe). Starting points, to be replaced by the measured recipe.
RECIPE: dict[str, list[str]] = {
    env: [
        # SFT on expert demos first: zero-shot, SmolLM2 answers in the required format 2-5% of the time, so RL alone
        # has almost no reward spread to learn from (warmstart.* defaults for a real model: ragen/warmstart/defaults.py)
        "--warmstart",
        # answer-only: no think block to generate (a 135M model's "thinking" is rarely useful, and every sampled token
        # costs ~10-25 ms on 2 cores)
        "--parser", "answer",
        # the compact frame: a short system prompt, fewer tokens per forward pass (docs/models.md, "A compact prompt")
        "rollout.prompt=compact",
        # only the latest turn in the context: short sequences for generation and update alike
        "rollout.max_context_window=1",
        # 4 groups x 4 episodes: 16 episodes a step, enough groups with reward spread for GRPO, small enough for a CPU
        "rollout.n_groups=4", "rollout.group_size=4",
        # the greedy before/after comparison on 128 held-out levels (the target's minimum)
        "rollout.n_paired_levels=128",
        # the paired comparison is the verdict: no validation curve (each validation costs a pass of generation)
        "rollout.n_val_groups=16", "trainer.test_freq=0",
        # 20 steps: what fits the target's 90 minutes per seed at the measured token rates (COST)
        "trainer.steps=20",
        # a checkpoint every 5 steps: a stopped run resumes with --resume and loses at most 5 steps
        "trainer.save_freq=5",
        # a short run: do not stop it on reward-variance collapse (the early-stop rules stay at their defaults)
        "collapse.enabled=false",
    ]
    for env in ("frozenlake", "sokoban")
}

#: the time model of the plan, SmolLM2-135M fp32 on 2 cores: frozenlake's step_s and warm_s measured at load 5-7 on
#: 2026-11-29 (median GRPO step 99 s; the default real-model warm start, 256 demos x 3 epochs, 2,141 s), sokoban's
#: alone (load 1.8-1.9) the same day (median GRPO step 45 s: 17 s rollout, 27 s update of the 1-2 kept groups; warm
#: start 2,004 s; both greedy passes about 330 s); the times of finished runs in the JSON replace step_s on a resume.
#: ``warm_s``: demos + the real-model warm start (a cached warm start costs nothing: the plan counts it for the first
#: run of each env all the same); ``paired_s``: one greedy pass over 128 levels; ``start_s``: process start, model
#: load, export; ``arm_factor``: a PPO step (critic) vs GRPO's, a dapo-wide step (8x the episodes, updates on 1-8
#: kept groups: 252 s median on frozenlake alone, 2026-11-29) vs GRPO's.
COST = {
    "step_s": {"frozenlake": 100.0, "sokoban": 45.0},
    "paired_s": {"frozenlake": 150.0, "sokoban": 165.0},
    "warm_s": {"frozenlake": 2000.0, "sokoban": 2000.0},
    "start_s": 30.0,
    "arm_factor": {"grpo": 1.0, "ppo": 2.0, "dapo-wide": 2.5},
}


# ---- the open-loop baseline: ragen.envs.openloop's exhaustive search (tested against brute force there) -------------

def blind_baselines(env_name: str, train_levels: int, levels: int, depth: int = 0, options: dict | None = None,
                    walker: bool = True) -> dict:
    """The best fixed action sequence chosen on ``train_levels`` training levels (seeds 10000.., split train) and its
    success on the ``levels`` held-out levels (seeds 123.., split val), beside the random walker's there: its exact
    expectation over all sequences and (``walker``) one played sample (bench/state_dependence.py)."""
    import numpy as np

    import ragen
    from ragen.envs import openloop
    from ragen.envs.resolved import train_seeds, val_seeds

    t0 = time.perf_counter()
    env = ragen.make_env(env_name, **(options or {}))
    try:
        why = openloop.supports(env)
        if why or not env.deterministic:
            raise SystemExit(f"the open-loop search does not apply: {why or env_name + ' is not deterministic'}")
        names = list(env.action_names)
        depth = depth or openloop.search_length(env)
        train_rule, val_rule = train_seeds(1), val_seeds()

        def counts_on(levels_: list) -> np.ndarray:
            out_ = np.zeros(len(names) ** depth, dtype=np.int32)
            for level in levels_:
                out_ += openloop.solved_table(env, level, depth)
            return out_

        counts = counts_on([(env_name, train_rule(i, 0), "train", 0) for i in range(train_levels)])
        held_counts = counts_on([(env_name, val_rule(0, g), "val", 0) for g in range(levels)])
    finally:
        env.close()
    best = int(counts.argmax())
    best_actions = [names[(best // len(names) ** (depth - 1 - d)) % len(names)] for d in range(depth)]
    out = {
        "depth": depth, "actions": names, "train_levels": train_levels, "levels": levels,
        "best_sequence": best_actions,
        "best_sequence_train_success": float(counts[best]) / max(1, train_levels),
        "best_sequence_success": float(held_counts[best]) / max(1, levels),
        # what the best sequence chosen on the held-out levels themselves would score: an upper bound, not a baseline
        "oracle_sequence_success": float(held_counts.max()) / max(1, levels),
        "random_expected_success": float(held_counts.mean()) / max(1, levels),
        "search_s": round(time.perf_counter() - t0, 1),
    }
    if walker:
        import state_dependence as sd

        out["random_walker_success"] = sd.play(env_name, sd.uniform, levels)["success"]
    return out


# ---- the runs --------------------------------------------------------------------------------------------------------

def plan_jobs(envs: list[str], arms: list[str], seeds: int, steps: int = 0) -> list[dict]:
    """The runs, seed-major (a stopped benchmark has every env and arm at the seeds it finished)."""
    return [{"env": e, "arm": a, "seed": s, "steps": steps or recipe_steps(e)}
            for s in range(seeds) for e in envs for a in arms]


def recipe_steps(env: str) -> int:
    return next(int(o.split("=", 1)[1]) for o in reversed(RECIPE[env]) if o.startswith("trainer.steps="))


def estimate_s(job: dict, paired_levels: int, warm: bool, cost: dict = COST, measured: dict | None = None) -> float:
    """Seconds of one run alone on the idle 2-core VM (COST, or the measured s/step of finished runs)."""
    env, arm = job["env"], job["arm"]
    step_s = (measured or {}).get((env, arm)) or cost["step_s"].get(env, 100.0) * cost["arm_factor"].get(arm, 1.0)
    return (cost["start_s"] + job["steps"] * step_s + 2 * cost["paired_s"].get(env, 150.0) * paired_levels / 128
            + (cost["warm_s"].get(env, 900.0) if warm else 0.0))


def command(job: dict, args, root: Path, name: str) -> list[str]:
    arm = ARMS[job["arm"]]
    flags, overrides = [a for a in arm if "=" not in a], [a for a in arm if "=" in a]  # the latter win over RECIPE's
    return [sys.executable, "-m", "ragen", "run", "--env", job["env"], *flags, "--model", args.model,
            *RECIPE[job["env"]], *overrides, f"trainer.seed={job['seed']}", f"trainer.steps={job['steps']}",
            # the greedy before/after pass is the verdict at any --steps (a run under 10 steps would skip it)
            "trainer.short_run_steps=0",
            f"rollout.n_paired_levels={args.paired_levels}", f"trainer.threads={args.threads}",
            "logging.progress=false", "logging.save_trajectories=0", f"logging.run_dir={root}", f"logging.name={name}",
            *args.override]


def run_one(job: dict, args, root: Path, baselines: dict) -> dict:
    """One `ragen run` in a subprocess; its paired comparison and timings from its run folder, and the env's blind
    baselines on the same levels."""
    name = f"{job['env']}-{job['arm']}-s{job['seed']}-n{job['steps']}"
    if (root / name).exists():  # a reused --run-dir with a failed or stopped try: keep it, use the next name
        name = next(f"{name}-{k}" for k in range(2, 10_000) if not (root / f"{name}-{k}").exists())
    cmd = command(job, args, root, name)
    base = {**job, "model": args.model, "command": " ".join(cmd[1:]), "threads": args.threads,
            "commit": learning.commit(), "baselines": baselines}
    out = learning.launch(cmd, base, root / name, read_run)
    if out.get("failed"):
        return out
    p = out.get("paired") or {}
    print(f"  {name}: greedy {100 * p.get('success_before', 0):.1f}% -> {100 * p.get('success_after', 0):.1f}% "
          f"(z {p.get('z', float('nan')):+.1f}; best blind sequence {100 * baselines['best_sequence_success']:.1f}%) "
          f"in {out['wall_s'] / 60:.1f} min", flush=True)
    return out


def read_run(run_dir: Path) -> dict:
    """bench/learning.py's numbers of a finished run folder plus the cost per step: tokens/s of generation and update,
    peak RSS, the phases' medians."""
    from ragen.runs.plot import read_jsonl

    rows = read_jsonl(run_dir / "metrics.jsonl")
    steps = [r for r in rows if r.get("timing/step_s") is not None]
    out = {}
    try:
        out = learning.read_run(run_dir)
    except (KeyError, IndexError, ValueError):  # no validation row (trainer.test_freq=0 and no val pass): the rest
        out = {"steps_done": max((r["step"] for r in rows), default=0),
               "rl_s": round(sum(r.get("timing/step_s") or 0.0 for r in rows), 1)}
        warm = next((r for r in rows if "sft/demo_success" in r), {})
        paired = next((r for r in reversed(rows) if r.get("paired/change") is not None), {})
        out.update({"demo_success": warm.get("sft/demo_success"), "warmstart_s": warm.get("timing/warmstart_s"),
                    "paired": {k.removeprefix("paired/"): v for k, v in paired.items() if k.startswith("paired/")}
                    or None})

    def median(key, rs=steps):
        xs = sorted(r[key] for r in rs if r.get(key) is not None)
        return xs[len(xs) // 2] if xs else None

    def rate(tokens_key, seconds_key):
        xs = sorted(r["rollout/num_trajectories"] * r[tokens_key] / r[seconds_key] for r in steps
                    if r.get(tokens_key) and r.get(seconds_key) and r.get("rollout/num_trajectories"))
        return xs[len(xs) // 2] if xs else None

    out["cost"] = {
        "s_per_step": median("timing/step_s"), "rollout_s": median("timing/rollout_s"),
        "update_s": median("timing/update_s"),
        # sampled tokens per second of the rollout phase; every token of the batch per second of the update phase
        "generation_tokens_per_s": rate("rollout/response_length_mean", "timing/rollout_s"),
        "update_tokens_per_s": rate("rollout/sequence_length_mean", "timing/update_s"),
        "peak_rss_mb": max((r["perf/peak_rss_mb"] for r in rows if r.get("perf/peak_rss_mb") is not None),
                           default=None),
    }
    return out


# ---- summary ---------------------------------------------------------------------------------------------------------

def summarise(runs: list[dict]) -> list[dict]:
    """One row per (env, arm, steps): the paired change's mean and SE over seeds, every run's z, the blind bars."""
    table = []
    ok = [r for r in runs if not r.get("failed") and r.get("paired")]
    for env, arm, steps in dict.fromkeys((r["env"], r["arm"], r["steps"]) for r in ok):
        rs = [r for r in ok if (r["env"], r["arm"], r["steps"]) == (env, arm, steps)]
        ps = [r["paired"] for r in rs]
        change, change_se = learning.mean_se([p.get("change") for p in ps])
        b = rs[0]["baselines"]
        table.append({
            "env": env, "arm": arm, "steps": steps, "seeds": len(rs), "levels": ps[0].get("levels"),
            "greedy_before": learning.mean_se([p.get("success_before") for p in ps])[0],
            "greedy_after": learning.mean_se([p.get("success_after") for p in ps])[0],
            "change": change, "change_se": change_se, "z": [p.get("z") for p in ps],
            "above_best_sequence": [p.get("success_after", 0) > b["best_sequence_success"] for p in ps],
            "best_sequence": b["best_sequence_success"], "random_walker": b.get("random_walker_success"),
            "random_expected": b["random_expected_success"],
            "s_per_step": learning.mean_se([(r.get("cost") or {}).get("s_per_step") for r in rs])[0],
            "wall_min": learning.mean_se([r["wall_s"] / 60 for r in rs])[0],
        })
    return table


def print_table(table: list[dict]) -> None:
    pct = learning.pct
    print("\nGreedy paired comparison on held-out levels (change: mean ± SE over seeds), beside the blind baselines on "
          "the same levels:")
    print(learning.markdown(
        ["env", "arm", "steps", "seeds", "levels", "before %", "after %", "change (pts)", "± s.e.", "z per run",
         "best blind sequence %", "random walker %", "s/step", "min/run"],
        [[t["env"], t["arm"], str(t["steps"]), str(t["seeds"]), f"{t['levels'] or 0:.0f}", pct(t["greedy_before"]),
          pct(t["greedy_after"]), pct(t["change"], True), pct(t["change_se"]),
          ", ".join(f"{z:+.1f}" for z in t["z"] if z is not None), pct(t["best_sequence"]),
          f"{pct(t['random_walker'])} (exp. {pct(t['random_expected'])})",
          "-" if t["s_per_step"] is None or math.isnan(t["s_per_step"]) else f"{t['s_per_step']:.0f}",
          f"{t['wall_min']:.0f}"] for t in table]))


def plot(table: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = list(dict.fromkeys(t["env"] for t in table))
    fig, axes = plt.subplots(1, len(envs), figsize=(5.0 * len(envs), 4.2), squeeze=False)
    for ax, env in zip(axes[0], envs):
        rows = [t for t in table if t["env"] == env]
        x = range(len(rows))
        before = [100 * (t["greedy_before"] or 0) for t in rows]
        after = [100 * (t["greedy_after"] or 0) for t in rows]
        se = [0.0 if t["change_se"] is None or math.isnan(t["change_se"]) else 100 * t["change_se"] for t in rows]
        ax.bar([i - 0.2 for i in x], before, 0.4, label="before RL")
        ax.bar([i + 0.2 for i in x], after, 0.4, yerr=se, label="after RL (± s.e. of the change)")
        for key, label, style, color in (("best_sequence", "best blind sequence (chosen on training levels)", "-.",
                                          "tab:brown"), ("random_expected", "random walker", ":", "tab:gray")):
            ax.axhline(100 * rows[0][key], color=color, linestyle=style, linewidth=1, label=label)
        ax.set_xticks(list(x), [f"{t['arm']}\n{t['seeds']} seed(s)" for t in rows])
        ax.set_ylabel(f"greedy success (%), {rows[0]['levels'] or 0:.0f} held-out levels")
        ax.set_title(env)
        ax.set_ylim(0, 105)
        ax.legend(fontsize=7)
    import textwrap

    fig.suptitle("\n".join(textwrap.wrap(title, int(100 * len(envs)))), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def settings_of(args) -> dict:
    """What every run of one JSON must share (a resume refuses a JSON made with other settings)."""
    return {"model": args.model, "paired_levels": args.paired_levels, "train_levels": args.train_levels,
            "override": list(args.override), "recipe": {e: RECIPE[e] for e in args.envs}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", action="store_true", help="Print the plan and its time estimate, run nothing.")
    ap.add_argument("--envs", nargs="+", default=list(RECIPE), choices=list(RECIPE))
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--seeds", type=int, default=3, help="RL seeds per (env, arm).")
    ap.add_argument("--steps", type=int, default=0, help="RL steps of every run (0 = the recipe's).")
    ap.add_argument("--paired-levels", type=int, default=128, help="Held-out levels of the greedy before/after.")
    ap.add_argument("--train-levels", type=int, default=256,
                    help="Training levels the best fixed action sequence is chosen on.")
    ap.add_argument("--model", default="smollm2",
                    help="smollm2, gemma3 (ragen's packaged models), a GGUF file or a local Hugging Face folder.")
    ap.add_argument("--threads", type=int, default=0, help="torch threads per run (0 = every core).")
    ap.add_argument("--override", nargs="*", default=[], help="Extra section.key=value overrides for every run.")
    ap.add_argument("--run-dir", type=Path, default=None, help="Keep the runs here (default: a temp folder).")
    ap.add_argument("--out", type=Path, default=None,
                    help="JSON path (default bench/results/real_llm.json for smollm2, real_llm-NAME.json for "
                         "another model).")
    ap.add_argument("--fresh", action="store_true", help="Ignore the runs already in --out (overwrite it).")
    args = ap.parse_args()
    args.threads = args.threads or (os.cpu_count() or 1)
    # one JSON per model (a resume refuses a JSON made with another model): real_llm-gemma3.json, real_llm-NAME.json
    slug = "".join(c if c.isalnum() else "-" for c in Path(args.model.rstrip("/")).stem).strip("-")
    out = args.out or RESULTS / ("real_llm.json" if args.model == "smollm2" else f"real_llm-{slug}.json")
    settings = settings_of(args)
    jobs = plan_jobs(args.envs, args.arms, args.seeds, args.steps)

    previous: dict = {}
    if out.exists() and not args.fresh:
        previous = json.loads(out.read_text())
        old = previous.get("settings", {})
        if any(old.get(k) != settings[k] for k in settings if k != "recipe") or any(
                old.get("recipe", {}).get(e, RECIPE[e]) != RECIPE[e] for e in args.envs):
            sys.exit(f"{out} was made with other settings ({old}; now {settings}): pass --fresh to overwrite it, "
                     "or another --out")
    kept, todo = learning.resume_split(previous.get("runs", []), jobs)
    measured = {k: learning._median([r["cost"]["s_per_step"] for r in rs if (r.get("cost") or {}).get("s_per_step")])
                for k, rs in _by(kept, lambda r: (r["env"], r["arm"])).items()
                if any((r.get("cost") or {}).get("s_per_step") for r in rs)}
    seen: set = set()
    est = 0.0
    for j in todo:  # the first run of an env trains its warm start; the others find it in the cache
        est += estimate_s(j, args.paired_levels, j["env"] not in seen, measured=measured)
        seen.add(j["env"])
    print(f"Plan: model {args.model}, {args.paired_levels} held-out levels, blind sequences chosen on "
          f"{args.train_levels} training levels, {args.threads} torch thread(s):")
    rows = [[j["env"], j["arm"], str(j["seed"]), str(j["steps"]),
             "run" if j in todo else "kept", f"{estimate_s(j, args.paired_levels, False, measured=measured) / 60:.0f}"]
            for j in jobs]
    print(learning.markdown(["env", "arm", "seed", "steps", "status", "est. min (warm start aside)"], rows))
    for env in args.envs:
        print(f"  {env} recipe: {' '.join(RECIPE[env])}")
    print(f"{len(jobs)} runs planned, {len(jobs) - len(todo)} already in {out}, {len(todo)} to run. Estimated wall "
          f"time: {est / 60:.0f} min on an idle 2-core VM (COST: a rough model, about +-50%)", flush=True)
    if args.plan:
        return

    root = args.run_dir or Path(tempfile.mkdtemp(prefix="ragen-real-llm-"))
    t0 = time.perf_counter()
    session = {"started": datetime.now().isoformat(timespec="seconds"), "machine": learning.machine(),
               "load_avg_at_start": [round(x, 2) for x in os.getloadavg()], "runs_planned": len(todo),
               "threads": args.threads, "estimate_min": round(est / 60), "run_dir": str(root)}
    baselines = dict(previous.get("baselines", {}))
    for env in args.envs:
        if env not in baselines:
            t = time.perf_counter()
            baselines[env] = blind_baselines(env, args.train_levels, args.paired_levels)
            b = baselines[env]
            print(f"  {env}: best blind sequence {' '.join(b['best_sequence'])}: "
                  f"{100 * b['best_sequence_train_success']:.1f}% on training levels, "
                  f"{100 * b['best_sequence_success']:.1f}% held out; random walker "
                  f"{100 * b['random_walker_success']:.1f}% (exp. {100 * b['random_expected_success']:.1f}%), "
                  f"{time.perf_counter() - t:.0f} s", flush=True)
    runs = list(kept)
    state = {"previous": previous, "settings": settings, "session": session, "t0": t0, "jobs": jobs, "out": out,
             "baselines": baselines, "args": args}
    write(runs, state)
    for job in todo:
        runs.append(run_one(job, args, root, baselines[job["env"]]))
        write(runs, state)  # after every run: a stopped benchmark keeps what it measured
    table = summarise(runs)
    print_table(table)
    print(f"wrote {out} in {(time.perf_counter() - t0) / 60:.1f} min (estimate {est / 60:.0f} min)")


def _by(items: list[dict], key) -> dict:
    out: dict = {}
    for it in items:
        out.setdefault(key(it), []).append(it)
    return out


def write(runs: list[dict], state: dict) -> None:
    out, args = state["out"], state["args"]
    table = summarise(runs)
    session = {**state["session"], "ended": datetime.now().isoformat(timespec="seconds"),
               "load_avg_at_end": [round(x, 2) for x in os.getloadavg()],
               "wall_s": round(time.perf_counter() - state["t0"], 1)}
    sessions = [*state["previous"].get("sessions", []), session]
    done = {learning.run_key(r) for r in runs if not r.get("failed")}
    planned = {learning.run_key(j) for j in state["jobs"]}
    result = {
        "benchmark": "real_llm", "date": date.today().isoformat(), "machine": session["machine"],
        "load_avg_at_start": sessions[0]["load_avg_at_start"], "load_avg_at_end": session["load_avg_at_end"],
        "python": platform.python_version(), "complete": planned <= done, "runs_done": len(planned & done),
        "runs_planned": len(planned), "settings": state["settings"], "arms": {a: " ".join(v) for a, v in ARMS.items()},
        "cost_model": COST, "sessions": sessions, "wall_s": round(sum(s["wall_s"] for s in sessions), 1),
        "baselines": state["baselines"], "table": table, "runs": runs,
        "targets": "frozenlake: paired z >= 3 on >= 128 held-out levels in each of 3 RL seeds and greedy success "
                   "after RL above the best blind sequence; <= 90 min per seed on 2 idle cores; sokoban: the same or "
                   "an honest miss",
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2))
    tmp.replace(out)
    if table:
        title = (f"bench/real_llm.py, {result['date']}, {result['machine']}, load average "
                 f"{result['load_avg_at_start'][0]} -> {result['load_avg_at_end'][0]}, model {args.model}")
        plot(table, out.with_suffix(".png"), title)


if __name__ == "__main__":
    main()
