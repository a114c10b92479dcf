"""Learning benchmark: does warm start + GRPO improve the tiny model on frozenlake-slippery, within 15 minutes?

Tiny model (random init), expert warm start with noise 0.3, then GRPO. Validation success on 128 fixed seeds
(123..250, split val) is measured before RL (right after the warm start) and after RL. Prints a table and writes
JSON. Target (issue): +15 points within 15 minutes of training on a 2-core CPU.

    python bench/learning.py [--minutes 15] [--out bench/results/learning.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from datetime import date
from pathlib import Path

from ragen.config import load_config
from ragen.trainer import train


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=15.0, help="RL wall-time budget (the warm start is extra).")
    ap.add_argument("--steps", type=int, default=200, help="Upper bound on RL steps.")
    ap.add_argument("--val-seeds", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-4, help="GRPO actor learning rate (the warm start uses 1e-3).")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "learning.json")
    ap.add_argument("--run-dir", type=Path, default=None, help="Keep the run here (default: a temp folder).")
    args = ap.parse_args()

    run_root = args.run_dir or Path(tempfile.mkdtemp(prefix="ragen-learning-"))
    overrides = [
        "env.name=frozenlake-slippery",
        "algo.name=grpo",
        "model.name=tiny",
        "rollout.n_groups=8",
        "rollout.group_size=8",
        f"rollout.n_val_groups={args.val_seeds}",
        f"trainer.actor_lr={args.lr}",
        "trainer.ppo_mini_batch_size=32",
        "trainer.micro_batch_size=8",
        f"trainer.steps={args.steps}",
        "trainer.test_freq=0",
        "trainer.save_freq=0",
        f"trainer.max_steps_wall_s={args.minutes * 60}",
        "warmstart.noise=0.3",
        "warmstart.episodes=512",
        "warmstart.epochs=10",
        "logging.save_trajectories=0",
        f"logging.run_dir={run_root}",
        "logging.name=learning",
    ]
    t0 = time.perf_counter()
    run = train(load_config(overrides=overrides), warmstart=True)
    wall = time.perf_counter() - t0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    warm = next(r for r in rows if "sft/loss_last" in r)
    before = next(r for r in rows if r["step"] == 0 and "val/success" in r)["val/success"]
    last = [r for r in rows if "val/success" in r][-1]
    after, steps = last["val/success"], last["step"]
    rl_time = sum(r.get("timing/step_s", 0.0) for r in rows)
    result = {
        "benchmark": "learning",
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()} {platform.processor() or ''} cpus={__import__('os').cpu_count()}".strip(),
        "env": "frozenlake-slippery",
        "val_seeds": args.val_seeds,
        "warmstart_noise": 0.3,
        "actor_lr": args.lr,
        "noisy_expert_demo_success": warm.get("sft/demo_success"),
        "warmstart_time_s": warm.get("timing/sft_s"),
        "val_success_before_rl": before,
        "val_success_after_rl": after,
        "gain_points": round(100 * (after - before), 1),
        "rl_steps": steps,
        "rl_time_s": round(rl_time, 1),
        "total_wall_s": round(wall, 1),
        "target": "+15 points within 15 minutes",
        "met": (after - before) >= 0.15 and rl_time <= 15 * 60,
        "run_dir": str(run),
    }
    print(f"{'stage':<28}{'val success (128 seeds)':>26}")
    print(f"{'noisy expert demos (train)':<28}{warm.get('sft/demo_success', float('nan')):>26.3f}")
    print(f"{'after warm start (noise 0.3)':<28}{before:>26.3f}")
    print(f"{'after GRPO, ' + str(steps) + ' steps':<28}{after:>26.3f}")
    print(f"gain {result['gain_points']:+.1f} points; RL {rl_time / 60:.1f} min; total {wall / 60:.1f} min; target met: {result['met']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
