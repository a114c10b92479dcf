"""Learning benchmark: does StarPO make the built-in model better, per env and algorithm, matched on updates?

For every env, one warm start (the run's default: the built-in model fine-tuned on noisy expert demos, cached), then
every algorithm for the same number of RL steps with the same rollouts per step, from that same warm start, with
several seeds (trainer.seed). Validation success on fixed seeds (123, 124, ...) before RL and every few steps after;
mean and standard error across seeds; the demonstrations' own success and the noiseless expert's success are the
reference lines. Prints a table, writes JSON and a PNG (success against step, one panel per env, one line per
algorithm with a band of one standard error over seeds).

    python bench/learning.py --quick          # frozenlake, one seed, three algorithms, 10 steps, 2 runs at a time
    python bench/learning.py                  # frozenlake, sokoban, bandit x grpo, ppo, starpo-s x 3 seeds
    python bench/learning.py --jobs 2         # two runs at a time, one torch thread each

Runs are independent processes (`ragen run`), so a crash or a stop loses one run, and `--jobs` runs them side by side.
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
from datetime import date
from pathlib import Path

RESULTS = Path(__file__).parent / "results"

#: per env: RL steps, validation every N steps, and env-specific overrides. Matched across algorithms by design.
ENVS: dict[str, dict] = {
    # 12 warm-start epochs: with the prompt in the loss the small model reads the state after 12 epochs, not after 4
    # (docs/models.md, "Reading the state")
    "frozenlake": {"steps": 20, "test_freq": 10, "overrides": ["warmstart.epochs=12"]},
    "sokoban": {"steps": 20, "test_freq": 10, "overrides": ["warmstart.epochs=12"]},
    # the expert always pulls the high-risk arm: noisy demos (half the pulls random) leave RL room above imitation;
    # one-turn episodes are cheap, so the warm start gets more passes (the copy of an arm name from the prompt is
    # learnt late)
    "bandit": {"steps": 10, "test_freq": 5, "overrides": ["warmstart.noise=0.5", "warmstart.epochs=12"]},
}
QUICK_STEPS = 10  #: --quick: one env, one seed, 10 steps, two runs at a time
ALGOS = ("grpo", "ppo", "starpo-s")


def run_one(env: str, algo: str, seed: int, args, root: Path) -> dict:
    """One `ragen run` in a subprocess; returns its validation curve and timing from metrics.jsonl."""
    spec = ENVS[env]
    name = f"{env}-{algo}-s{seed}"
    steps = args.steps or spec["steps"]
    cmd = [sys.executable, "-m", "ragen", "run", "--env", env, "--algo", algo, "--model", args.model,
           f"trainer.seed={seed}", f"trainer.steps={steps}", f"trainer.test_freq={args.test_freq or spec['test_freq']}",
           "trainer.save_freq=0", f"trainer.threads={args.threads}", f"rollout.n_val_groups={args.val_seeds}",
           f"rollout.n_paired_levels={args.val_seeds}",  # the greedy before/after pass on the same levels
           "logging.progress=false", "logging.save_trajectories=0", f"logging.run_dir={root}", f"logging.name={name}",
           "collapse.enabled=false", "early_stop.enabled=false", *spec["overrides"], *args.override]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        print(f"  {name}: FAILED\n{proc.stderr[-2000:]}", file=sys.stderr)
        return {"env": env, "algo": algo, "seed": seed, "failed": True, "wall_s": wall}
    rows = [json.loads(line) for line in (root / name / "metrics.jsonl").read_text().splitlines()]
    curve = [(r["step"], r["val/success"]) for r in rows if r.get("val/success") is not None]
    warm = next((r for r in rows if "sft/demo_success" in r), {})
    out = {
        "env": env, "algo": algo, "seed": seed, "steps": max(r["step"] for r in rows), "curve": curve,
        "before": curve[0][1], "after": curve[-1][1], "wall_s": round(wall, 1),
        "rl_s": round(sum(r.get("timing/step_s", 0.0) or 0.0 for r in rows), 1),
        "demo_success": warm.get("sft/demo_success"), "warmstart_s": warm.get("timing/warmstart_s"),
        "first_step_valid_format": next((r.get("rollout/valid_format_rate") for r in rows if r["step"] == 1), None),
    }
    print(f"  {name}: {100 * out['before']:.1f}% -> {100 * out['after']:.1f}% in {out['steps']} steps, "
          f"{wall / 60:.1f} min", flush=True)
    return out


def warm_start(env: str, args, root: Path) -> None:
    """Train (or find in the cache) the env's warm start, with the settings every run of the env will use."""
    from ragen.config import load_config
    from ragen.warmstart.cache import prepare

    cfg = load_config(overrides=[f"env.name={env}", f"model.name={args.model}", *ENVS[env]["overrides"], *args.override])
    t0 = time.perf_counter()
    _, metrics = prepare(cfg, root / env)
    print(f"  {env}: warm start {'cached' if metrics['warmstart/cached'] else 'trained'} in "
          f"{time.perf_counter() - t0:.0f} s; demos' success {100 * metrics['sft/demo_success']:.1f}%", flush=True)


def expert_success(env: str, seeds: int) -> float:
    """The noiseless expert on the validation seeds, through the real rollout loop (the reference line)."""
    from ragen.models.builtin import build_tiny_model
    from ragen.warmstart.sft import expert_demos
    from ragen.rollout import ChatFormat
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        tok = AutoTokenizer.from_pretrained(build_tiny_model(Path(tmp) / "m", [env], corpus_seeds=5))
        res = expert_demos(tok, ChatFormat(tok), env, {}, seeds, 0.0, 0, 3600, seed_base=123)
    return float(res.metrics["success"])


def mean_se(xs: list[float]) -> tuple[float, float]:
    n = len(xs)
    m = sum(xs) / n
    if n < 2:
        return m, float("nan")
    var = sum((x - m) ** 2 for x in xs) / (n - 1)
    return m, math.sqrt(var / n)


def summarise(runs: list[dict], experts: dict) -> list[dict]:
    table = []
    for env in dict.fromkeys(r["env"] for r in runs):
        for algo in dict.fromkeys(r["algo"] for r in runs if r["env"] == env):
            ok = [r for r in runs if r["env"] == env and r["algo"] == algo and not r.get("failed")]
            if not ok:
                continue
            before, before_se = mean_se([r["before"] for r in ok])
            after, after_se = mean_se([r["after"] for r in ok])
            gain, gain_se = mean_se([r["after"] - r["before"] for r in ok])
            table.append({"env": env, "algo": algo, "seeds": len(ok), "steps": ok[0]["steps"],
                          "before": before, "after": after, "after_se": after_se, "gain": gain, "gain_se": gain_se,
                          "demo_success": ok[0]["demo_success"], "expert_success": experts.get(env),
                          "rl_min": sum(r["rl_s"] for r in ok) / len(ok) / 60,
                          "first_step_valid_format": ok[0]["first_step_valid_format"]})
    return table


def pct(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


def print_table(table: list[dict]) -> None:
    head = ["env", "algo", "seeds", "steps", "before %", "after %", "gain (pts)", "± s.e.", "demos %", "expert %",
            "RL min/run"]
    rows = [[t["env"], t["algo"], str(t["seeds"]), str(t["steps"]), pct(t["before"]), pct(t["after"]),
             f"{100 * t['gain']:+.1f}", pct(t["gain_se"]), pct(t["demo_success"]), pct(t["expert_success"]),
             f"{t['rl_min']:.1f}"] for t in table]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")


def plot(runs: list[dict], experts: dict, demos: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = list(dict.fromkeys(r["env"] for r in runs if not r.get("failed")))
    fig, axes = plt.subplots(1, len(envs), figsize=(5 * len(envs), 4), squeeze=False)
    for ax, env in zip(axes[0], envs):
        for algo in dict.fromkeys(r["algo"] for r in runs if r["env"] == env):
            ok = [r for r in runs if r["env"] == env and r["algo"] == algo and not r.get("failed")]
            steps = sorted({s for r in ok for s, _ in r["curve"]})
            stats = [mean_se([dict(r["curve"])[s] for r in ok if s in dict(r["curve"])]) for s in steps]
            m = [100 * a for a, _ in stats]
            se = [0.0 if math.isnan(b) else 100 * b for _, b in stats]
            ax.plot(steps, m, marker="o", label=algo)
            ax.fill_between(steps, [a - b for a, b in zip(m, se)], [a + b for a, b in zip(m, se)], alpha=0.2)
        for value, label, style in ((demos.get(env), "demonstrations", ":"), (experts.get(env), "expert", "--")):
            if value is not None:
                ax.axhline(100 * value, color="grey", linestyle=style, label=label)
        ax.set_title(env)
        ax.set_xlabel("RL step")
        ax.set_ylabel("validation success (%)")
        ax.set_ylim(0, 105)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="One env (frozenlake), one seed, every algorithm.")
    ap.add_argument("--envs", nargs="+", default=None, choices=list(ENVS))
    ap.add_argument("--algos", nargs="+", default=list(ALGOS))
    ap.add_argument("--seeds", type=int, default=None, help="RL seeds per (env, algo) (default 3; --quick 1).")
    ap.add_argument("--steps", type=int, default=0, help="RL steps per run (0 = the env's default).")
    ap.add_argument("--test-freq", type=int, default=0, help="Validate every N steps (0 = the env's default).")
    ap.add_argument("--val-seeds", type=int, default=128)
    ap.add_argument("--model", default="small")
    ap.add_argument("--jobs", type=int, default=1, help="Runs at a time (each gets --threads torch threads).")
    ap.add_argument("--threads", type=int, default=0, help="torch threads per run (0 = cores / jobs).")
    ap.add_argument("--override", nargs="*", default=[], help="Extra section.key=value overrides for every run.")
    ap.add_argument("--run-dir", type=Path, default=None, help="Keep the runs here (default: a temp folder).")
    ap.add_argument("--out", type=Path, default=None, help="JSON path (default bench/results/learning[-quick].json).")
    args = ap.parse_args()
    envs = args.envs or (["frozenlake"] if args.quick else list(ENVS))
    seeds = args.seeds or (1 if args.quick else 3)
    if args.quick:
        args.steps = args.steps or QUICK_STEPS
        args.test_freq = args.test_freq or QUICK_STEPS // 2
        args.jobs = max(args.jobs, 2)
    args.threads = args.threads or max(1, (os.cpu_count() or 1) // args.jobs)
    root = args.run_dir or Path(tempfile.mkdtemp(prefix="ragen-learning-"))
    out = args.out or RESULTS / ("learning-quick.json" if args.quick else "learning.json")
    t0 = time.perf_counter()
    load = os.getloadavg()

    # the warm start of each env first, alone (it is cached: every run of that env then starts from it)
    for env in envs:
        warm_start(env, args, root / "warm")
    experts = {env: expert_success(env, args.val_seeds) for env in envs}
    # seed-major: a run cut short still has every env and algorithm at the seeds it finished
    jobs = [(env, algo, seed) for seed in range(seeds) for env in envs for algo in args.algos]
    print(f"{len(jobs)} runs, {args.jobs} at a time, {args.threads} torch thread(s) each; runs in {root}", flush=True)
    args.envs = envs
    runs: list[dict] = []
    tables: list[list[dict]] = []
    lock = threading.Lock()

    def one(job):
        res = run_one(*job, args, root)
        with lock:  # the JSON and PNG are rewritten after every run: a stopped benchmark keeps what it measured
            runs.append(res)
            tables.append(write(runs, experts, args, out, t0, load, planned=len(jobs)))

    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(one, jobs))
    print_table(tables[-1])
    print(f"wrote {out} and {out.with_suffix('.png')} in {(time.perf_counter() - t0) / 60:.1f} min")


def write(runs: list[dict], experts: dict, args, out: Path, t0: float, load, planned: int) -> list[dict]:
    """Summarise the runs so far (in env, algorithm, seed order) into the JSON and the PNG; returns the table."""
    runs = sorted(runs, key=lambda r: (args.envs.index(r["env"]), args.algos.index(r["algo"]), r["seed"]))
    table = summarise(runs, experts)
    demos = {r["env"]: r["demo_success"] for r in runs if r.get("demo_success") is not None}
    result = {
        "benchmark": "learning", "date": date.today().isoformat(),
        "machine": f"{platform.machine()} {platform.processor() or ''} cpus={os.cpu_count()}".strip(),
        "load_avg_at_start": [round(x, 2) for x in load], "load_avg_at_end": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "mode": "quick" if args.quick else "full",
        "complete": len(runs) == planned, "runs_done": len(runs), "runs_planned": planned,
        "model": args.model, "val_seeds": args.val_seeds,
        "jobs": args.jobs, "threads_per_run": args.threads, "overrides": args.override,
        "wall_s": round(time.perf_counter() - t0, 1), "table": table, "runs": runs,
        "targets": "frozenlake and sokoban: best algo's gain >= 15 points and > 2 s.e.; starpo-s >= ppo; "
                   "bandit: high-risk arm (success) >= 90% after RL",
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    if any(not r.get("failed") for r in runs):
        plot(runs, experts, demos, out.with_suffix(".png"))
    return table


if __name__ == "__main__":
    main()
