"""A busy machine costs its share, not 10x: the warm start and an RL step of the main job's model (the
built-in `small`, sokoban, answer-only), idle and beside CPU-bound processes, at each thread setting.

One fresh `ragen run --env sokoban --algo grpo` per cell, with the warm start trained in the run (its cache off) at a
reduced size (`warmstart.episodes=64`, `epochs=2`: 32 SFT updates of the default batch) and 4 RL steps, each with an
update (`algo.options.success_gate=never`: the gate would drop the all-fail groups of this weak model). Read from
the run's own `metrics.jsonl`: the warm start's wall time (`timing/warmstart_s`, demos, tokenizer and model build
included) and the median `timing/step_s` of steps 2-4 (step 1 pays first-call allocations).

Conditions: idle, and with `--hogs` (default 2) busy loops (`python -c "while True: pass"`, one process each)
started before the run and killed after it. Settings: what `trainer.threads=0` (the default) resolves to, and each
explicit one in SETTINGS. Cells run setting by setting, idle then busy, so a slow drift of the machine hits both
conditions of a setting alike; `--rounds` repeats the whole sweep and the tables give medians. The default lets
`import ragen` choose the OpenMP wait policy from the load at start (ragen/models/openmp.py); the other settings fix
one in the environment, which ragen then leaves alone.

    python bench/busy_machine.py [--hogs 2] [--rounds 1] [--out bench/results/busy_machine.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

#: name -> (config overrides, extra environment). OMP_WAIT_POLICY must be in the environment before torch loads.
SETTINGS = {
    "default (threads=0)": ([], {}),
    # what torch did before ragen chose a wait policy: libgomp's own default spin (300,000 rounds, the GNU libgomp
    # manual)
    "threads=2 + GOMP_SPINCOUNT=300000 (libgomp's default)": (["trainer.threads=2"], {"GOMP_SPINCOUNT": "300000"}),
    "threads=2 + OMP_WAIT_POLICY=passive": (["trainer.threads=2"], {"OMP_WAIT_POLICY": "passive"}),
    "threads=1": (["trainer.threads=1"], {}),
    "threads=2 + GOMP_SPINCOUNT=10000": (["trainer.threads=2"], {"GOMP_SPINCOUNT": "10000"}),
    "threads=2 + GOMP_SPINCOUNT=1000": (["trainer.threads=2"], {"GOMP_SPINCOUNT": "1000"}),
}


def run_cell(extra: list[str], env: dict, work: Path) -> dict:
    run = Path(tempfile.mkdtemp(dir=work))
    args = [sys.executable, "-m", "ragen", "run", "--env", "sokoban", "--algo", "grpo", "trainer.steps=4",
            "trainer.test_freq=0", "trainer.save_freq=0", "rollout.n_val_groups=1", "rollout.n_paired_levels=0",
            "warmstart.cache=false", "warmstart.episodes=64", "warmstart.epochs=2", "logging.progress=false",
            "algo.options.success_gate=never",  # every step updates (the gate drops all-fail groups of a weak model)
            f"logging.run_dir={run}", "logging.name=r", *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(args, check=False, env=env, cwd=work, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"ragen run failed:\n{proc.stderr[-2000:]}")
    rows = [json.loads(line) for line in (run / "r" / "metrics.jsonl").read_text().splitlines()]
    warm = next(r["timing/warmstart_s"] for r in rows if "timing/warmstart_s" in r)
    steps = [r["timing/step_s"] for r in rows if r.get("step", 0) >= 2 and "timing/step_s" in r]
    threads = next(
        (line for line in proc.stderr.splitlines() + proc.stdout.splitlines() if "torch_threads" in line), ""
    )
    return {"warm_start_s": warm, "rl_step_s": statistics.median(steps), "wall_s": wall, "threads_log": threads.strip()}


def hogs(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hogs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated names from SETTINGS")
    ap.add_argument(
        "--merge", default="", help="a JSON this script wrote: its cells are kept and the sweep adds to them"
    )
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "busy_machine.json"))
    args = ap.parse_args()
    names = [n.strip() for n in args.settings.split(",") if n.strip() in SETTINGS]
    work = Path(tempfile.mkdtemp(prefix="ragen-busy-"))
    base = {**os.environ, "HF_HUB_OFFLINE": "1", "RAGEN_CACHE_DIR": str(work / "cache")}
    base.pop("OMP_NUM_THREADS", None)
    for var in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
        base.pop(var, None)
    cells: dict = {n: {"idle": [], "busy": []} for n in names}
    if args.merge:  # earlier cells kept; the sweep's cells are added to theirs (medians over all rounds)
        earlier = json.loads(Path(args.merge).read_text())["cells"]
        cells = {**earlier, **{n: earlier.get(n, cells[n]) for n in names}}
    load_before = os.getloadavg()
    for r in range(args.rounds):
        for name in names:
            extra, env_extra = SETTINGS[name]
            for cond in ("idle", "busy"):
                procs = hogs(args.hogs) if cond == "busy" else []
                try:
                    time.sleep(2.0 if procs else 0.0)
                    cell = run_cell(extra, {**base, **env_extra}, work)
                    cell["load_1min_after"] = os.getloadavg()[0]
                finally:
                    for p in procs:
                        p.kill()
                        p.wait()
                cells[name][cond].append(cell)
                print(f"round {r + 1} {name} {cond}: warm start {cell['warm_start_s']:.1f} s, RL step "
                      f"{cell['rl_step_s']:.2f} s (load {cell['load_1min_after']:.1f})", flush=True)
    names = [n for n in SETTINGS if n in cells]
    med = {n: {c: {k: statistics.median(x[k] for x in cells[n][c]) for k in ("warm_start_s", "rl_step_s")}
               for c in ("idle", "busy")} for n in names}
    ref = med[names[0]]["idle"]
    rows = []
    print(f"\n{'setting':<36} {'cond':<5} {'warm start s':>12} {'busy/idle':>9} {'RL step s':>10} {'busy/idle':>9}"
          f" {'vs default idle':>16}")
    for n in names:
        for c in ("idle", "busy"):
            ws, rl = med[n][c]["warm_start_s"], med[n][c]["rl_step_s"]
            ws_x, rl_x = ws / med[n]["idle"]["warm_start_s"], rl / med[n]["idle"]["rl_step_s"]
            rows.append(
                {
                    "setting": n,
                    "condition": c,
                    "warm_start_s": ws,
                    "rl_step_s": rl,
                    "warm_start_x_own_idle": ws_x,
                    "rl_step_x_own_idle": rl_x,
                    "warm_start_x_default_idle": ws / ref["warm_start_s"],
                    "rl_step_x_default_idle": rl / ref["rl_step_s"],
                }
            )
            print(f"{n:<36} {c:<5} {ws:>12.1f} {ws_x:>9.2f} {rl:>10.2f} {rl_x:>9.2f}"
                  f" {ws / ref['warm_start_s']:>7.2f} / {rl / ref['rl_step_s']:.2f}")
    out = {
        "benchmark": "busy_machine",
        "date": str(date.today()),
        "machine": f"{platform.machine()} cpus={os.cpu_count()}",
        "hogs": args.hogs,
        "rounds": args.rounds,
        "load_avg_before": load_before,
        "load_avg_after": os.getloadavg(),
        "rows": rows,
        "cells": cells,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
