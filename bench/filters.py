"""Filter benchmark: grpo vs starpo-s vs ppo on frozenlake-slippery, same warm-started tiny model, equal
wall time per algorithm.

One expert warm start (`ragen sft`, noise 0.3) is shared by the three runs; each run then trains for the same
wall-time budget from that checkpoint and validates on the same fixed seeds before and after. Prints a table
(success before/after, gain, steps done, mean kept ratio of the rollout filter) and writes JSON.

    python bench/filters.py [--minutes 6] [--val-seeds 128] [--out bench/results/filters.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from datetime import date
from pathlib import Path

from ragen.config import load_config
from ragen.runs.loop import train
from ragen.runs.sft import run_sft

ALGOS = ("grpo", "starpo-s", "ppo")
ENV = "frozenlake-slippery"


def common(args, root: Path) -> list[str]:
    return [
        f"env.name={ENV}",
        # the settings of the measured run (2026-11-23), pinned: the defaults have changed since (docs/models.md)
        "rollout.temperature=1.0",
        "trainer.format_penalty=-0.1",
        "rollout.n_groups=8",
        "rollout.group_size=8",
        f"rollout.n_val_groups={args.val_seeds}",
        f"rollout.n_paired_levels={args.val_seeds}",  # the greedy before/after pass on the same levels
        "trainer.ppo_mini_batch_size=32",
        "trainer.micro_batch_size=8",
        "trainer.save_freq=0",
        "trainer.test_freq=0",
        "logging.save_trajectories=0",
        "logging.progress=false",
        f"logging.run_dir={root}",
        # the collapse diagnostics (about 70 s at steps 1, 5, 10, ... on this CPU) would take a third of each budget
        # and are the same for every algorithm: the budget goes to training
        "collapse.enabled=false",
    ]


def run_algo(args, root: Path, model: Path, algo: str) -> dict:
    overrides = [*common(args, root), f"model.name={model}", f"algo.name={algo}", f"trainer.actor_lr={args.lr}",
                 f"trainer.steps={args.max_steps}", f"trainer.max_steps_wall_s={args.minutes * 60}",
                 "early_stop.enabled=false", f"logging.name={algo}"]
    t0 = time.perf_counter()
    run = train(load_config(overrides=overrides))
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    vals = [r for r in rows if "val/success" in r]
    steps = [r for r in rows if r["step"] > 0]
    kept = [r["rollout/filter_kept_ratio"] for r in steps if "rollout/filter_kept_ratio" in r]
    return {
        "algo": algo,
        "val_success_before": vals[0]["val/success"],
        "val_success_after": vals[-1]["val/success"],
        "gain_points": round(100 * (vals[-1]["val/success"] - vals[0]["val/success"]), 1),
        "steps": steps[-1]["step"] if steps else 0,
        "train_success_mean": round(sum(r["rollout/success"] for r in steps) / max(len(steps), 1), 4),
        "kept_ratio_mean": round(sum(kept) / max(len(kept), 1), 3),
        "rl_time_s": round(sum(r.get("timing/step_s", 0.0) for r in steps), 1),
        "wall_s": round(time.perf_counter() - t0, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=6.0, help="RL wall-time budget per algorithm.")
    ap.add_argument("--max-steps", type=int, default=500, help="Upper bound on RL steps per algorithm.")
    ap.add_argument("--val-seeds", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-4, help="Actor learning rate after the warm start.")
    ap.add_argument("--demos", type=int, default=512, help="Expert demonstrations for the shared warm start.")
    ap.add_argument("--epochs", type=int, default=10, help="Warm-start epochs.")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "filters.json")
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="ragen-filters-"))
    cfg = load_config(overrides=[*common(args, root), "model.name=tiny", "warmstart.noise=0.3",
                                 f"warmstart.episodes={args.demos}", f"warmstart.epochs={args.epochs}",
                                 "warmstart.batch_size=16", "warmstart.lr=1e-3"])
    t0 = time.perf_counter()
    model, warm = run_sft(cfg, root / "warm")
    warm_s = time.perf_counter() - t0
    rows = [run_algo(args, root, model, algo) for algo in ALGOS]
    result = {
        "benchmark": "filters",
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()} cpus={os.cpu_count()}",
        "env": ENV,
        "val_seeds": args.val_seeds,
        "budget_min_per_algo": args.minutes,
        "warmstart": {
            "noise": 0.3,
            "demos": args.demos,
            "epochs": args.epochs,
            "demo_success": warm.get("sft/demo_success"),
            "time_s": round(warm_s, 1),
        },
        "rows": rows,
    }
    header = (
        f"{'algo':<10}{'success before':>16}{'after':>8}{'gain (pts)':>12}{'steps':>7}{'kept ratio':>12}"
        f"{'train succ':>12}"
    )
    print(header)
    for r in rows:
        print(f"{r['algo']:<10}{r['val_success_before']:>16.3f}{r['val_success_after']:>8.3f}{r['gain_points']:>12.1f}"
              f"{r['steps']:>7}{r['kept_ratio_mean']:>12.3f}{r['train_success_mean']:>12.3f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
