"""The README's smoke run, timed: ``ragen run --env frozenlake --model tiny --no-warmstart trainer.steps=3``.

Two arms, interleaved A B A B on the same machine (a ratio of runs next to each other is what a shared machine can
measure), each a fresh process with its own run folder:

* ``short``: the command as a user types it. A run of fewer than ``trainer.short_run_steps`` steps plays no
  validation and no greedy pass (ragen/envs/resolved.py), so its time is its steps;
* ``passes``: the same run with the evaluation a short run used to play, 8 validation groups and 8 greedy levels
  before and after RL (``trainer.short_run_steps=0 rollout.n_val_groups=8 rollout.n_paired_levels=8``).

Per run: wall and CPU seconds (the child's user + system), the load average at start and end, and the summary's
"RL: 3 steps in ... min". Medians per arm and the ratio short/passes; JSON in bench/results/smoke_run.json.

    python bench/smoke_run.py --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
COMMAND = ["run", "--env", "frozenlake", "--model", "tiny", "--no-warmstart", "trainer.steps=3",
           "logging.progress=false"]
ARMS = {"short": [], "passes": ["trainer.short_run_steps=0", "rollout.n_val_groups=8", "rollout.n_paired_levels=8"]}


def load() -> float:
    return os.getloadavg()[0]


def one(arm: str, root: Path) -> dict:
    argv = [sys.executable, "-m", "ragen", *COMMAND, *ARMS[arm], f"logging.run_dir={root}", f"logging.name={arm}"]
    start_load, t0 = load(), time.perf_counter()
    before = os.times()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    wall = time.perf_counter() - t0
    after = os.times()
    if proc.returncode != 0:
        raise SystemExit(f"{arm}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    rl = re.search(r"RL: 3 steps in ([0-9.]+) min", proc.stdout)
    return {"arm": arm, "wall_s": round(wall, 1),
            "cpu_s": round((after.children_user - before.children_user)
                           + (after.children_system - before.children_system), 1),
            "rl_min": float(rl.group(1)) if rl else None, "load_start": round(start_load, 2),
            "load_end": round(load(), 2),
            "short_run_line": "no validation and no greedy pass" in proc.stdout}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2, help="A B pairs (each about 4-5 min on 2 cores)")
    ap.add_argument("--out", type=Path, default=RESULTS / "smoke_run.json")
    args = ap.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for arm in ("short", "passes") if r % 2 == 0 else ("passes", "short"):
                row = one(arm, Path(tmp) / f"round{r}")
                print(json.dumps(row), flush=True)
                runs.append(row)
    med = {arm: statistics.median(x["wall_s"] for x in runs if x["arm"] == arm) for arm in ARMS}
    cpu = {arm: statistics.median(x["cpu_s"] for x in runs if x["arm"] == arm) for arm in ARMS}
    out = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": platform.platform(),
           "cores": os.cpu_count(), "command": "ragen " + " ".join(COMMAND), "arms": ARMS, "runs": runs,
           "median_wall_s": med, "median_cpu_s": cpu, "ratio_short_to_passes": round(med["short"] / med["passes"], 3),
           "target_s": 120}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"median wall: short {med['short']:.0f} s, passes {med['passes']:.0f} s "
          f"(ratio {out['ratio_short_to_passes']}); median CPU: {cpu['short']:.0f} / {cpu['passes']:.0f} s")


if __name__ == "__main__":
    main()
