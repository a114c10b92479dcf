"""A busy machine costs its share, not 10x (issue 25): the warm start and an RL step of the built-in `small` model,
idle and beside two CPU-bound processes, at each torch thread setting.

Two measurements per condition, each in a fresh process:

* warm start: `ragen sft --env sokoban --model small` with 32 demos x 1 epoch (answer-only), wall time of the command;
* RL step: `ragen run --env sokoban --algo grpo` for 3 steps from a cached warm start (`--cache DIR`, filled by the
  first run), the median `timing/step_s` of steps 2 and 3 (step 1 pays first-call allocations).

Conditions: idle, and with `--hogs` (default 2) busy loops (`python -c "while True: pass"`) started before and killed
after. Thread settings: `trainer.threads=0` (the default: the cores this process may use, capped by the load when the
load-aware default applies) and `trainer.threads=1`, plus `OMP_NUM_THREADS=1` in the environment. Rows alternate
conditions, so slow drifts of the machine hit both.

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

SETTINGS = {"threads=0 (default)": ([], {}), "threads=1": (["trainer.threads=1"], {}),
            "OMP_NUM_THREADS=1": ([], {"OMP_NUM_THREADS": "1"})}


def ragen(args: list[str], env: dict, cwd: Path) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "ragen", *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"ragen {' '.join(args[:3])} failed:\n{proc.stderr[-2000:]}")
    return time.perf_counter() - t0


def warm_start(extra: list[str], env: dict, work: Path) -> float:
    out = Path(tempfile.mkdtemp(dir=work))
    return ragen(["sft", "--env", "sokoban", "--model", "small", "--out", str(out), "rollout.parser=answer",
                  "warmstart.episodes=32", "warmstart.epochs=1", "logging.progress=false", *extra], env, work)


def rl_step(extra: list[str], env: dict, work: Path) -> float:
    run = Path(tempfile.mkdtemp(dir=work))
    ragen(["run", "--env", "sokoban", "--algo", "grpo", "trainer.steps=3", "trainer.test_freq=0", "trainer.save_freq=0",
           "rollout.n_val_groups=2", "rollout.n_paired_levels=0", "logging.progress=false",
           f"logging.run_dir={run}", "logging.name=r", *extra], env, work)
    rows = [json.loads(line) for line in (run / "r" / "metrics.jsonl").read_text().splitlines()]
    return statistics.median(r["timing/step_s"] for r in rows if r.get("step", 0) >= 2 and "timing/step_s" in r)


def hogs(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hogs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--cache", default="", help="RAGEN_CACHE_DIR holding the warm start (default: a new folder)")
    ap.add_argument("--out", default="bench/results/busy_machine.json")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ragen-busy-"))
    base = {**os.environ, "HF_HUB_OFFLINE": "1", "RAGEN_CACHE_DIR": args.cache or str(work / "cache")}
    base.pop("OMP_NUM_THREADS", None)
    rl_step([], base, work)  # fills the warm-start cache once, outside the measurements
    results: dict = {name: {"idle": {"warm_start_s": [], "rl_step_s": []}, "busy": {"warm_start_s": [], "rl_step_s": []}}
                     for name in SETTINGS}
    loads = []
    for _ in range(args.rounds):
        for name, (extra, env_extra) in SETTINGS.items():
            for cond in ("idle", "busy"):
                procs = hogs(args.hogs) if cond == "busy" else []
                try:
                    time.sleep(1.0 if procs else 0.0)
                    env = {**base, **env_extra}
                    results[name][cond]["warm_start_s"].append(warm_start(extra, env, work))
                    results[name][cond]["rl_step_s"].append(rl_step(extra, env, work))
                    loads.append((name, cond, os.getloadavg()[0]))
                finally:
                    for p in procs:
                        p.kill()
                        p.wait()
                print(name, cond, {k: round(v[-1], 2) for k, v in results[name][cond].items()}, flush=True)
    ref = {k: statistics.median(results["threads=0 (default)"]["idle"][k]) for k in ("warm_start_s", "rl_step_s")}
    rows = []
    print(f"\n{'setting':<22} {'cond':<5} {'warm start s':>13} {'x idle default':>15} {'RL step s':>10} {'x idle default':>15}")
    for name in SETTINGS:
        for cond in ("idle", "busy"):
            ws, rl = (statistics.median(results[name][cond][k]) for k in ("warm_start_s", "rl_step_s"))
            rows.append({"setting": name, "condition": cond, "warm_start_s": ws, "rl_step_s": rl,
                         "warm_start_x_idle_default": ws / ref["warm_start_s"], "rl_step_x_idle_default": rl / ref["rl_step_s"]})
            print(f"{name:<22} {cond:<5} {ws:>13.1f} {ws / ref['warm_start_s']:>15.2f} {rl:>10.2f} {rl / ref['rl_step_s']:>15.2f}")
    out = {"benchmark": "busy_machine", "date": str(date.today()), "machine": f"{platform.machine()} cpus={os.cpu_count()}",
           "hogs": args.hogs, "rounds": args.rounds, "load_average_at_each_row": loads, "rows": rows, "raw": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
