"""Memory and collapse-diagnostics cost of the main job: `ragen run --env sokoban --algo grpo`.

Runs the job in a child process (the warm start comes from $RAGEN_CACHE_DIR when cached), samples its resident memory
every 0.2 s and reads each step row's `perf/rss_mb`, `perf/peak_rss_mb` and CPU seconds per phase. Prints the peak
by phase (warm start and start-up, validation before step 1, each step) and the collapse diagnostics' share of the RL
steps' CPU time. With `--scoring` it then cross-scores the step-1 batch of that run once with the shared-prefix path
(now) and once with the plain path (before 0b8f5ee), each in a fresh process, and prints their peak memory, CPU time
and the largest difference between their estimates. Writes JSON.

    python bench/memory.py [--steps 10] [--scoring] [--out bench/results/memory.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from datetime import date
from pathlib import Path

SCORE = r"""
import json, sys, time
import attrs
from ragen.config import load_config
from ragen.contract.trajectory import Trajectory, TurnRecord
from ragen.models.load import load_model_and_tokenizer
from ragen.train import collapse as C
from ragen.train.stats import memory_mb

run, path = sys.argv[1], sys.argv[2]
cfg = load_config(run + "/config.yaml")
model, tok = load_model_and_tokenizer(run + "/model-source/warmstart", run + "/model-source", ["sokoban"])
fields = {a.name for a in attrs.fields(Trajectory)}
trajs = []
for line in open(run + "/trajectories.jsonl"):
    row = json.loads(line)
    if row["step"] != 1:
        continue
    d = {k: v for k, v in row.items() if k in fields}
    d["turns"] = [TurnRecord(**{**t, "span": tuple(t["span"])}) for t in d["turns"]]
    d["segments"] = [tuple(s) for s in d["segments"]]
    trajs.append(Trajectory(**d))
if path == "plain":
    shared_path = C.cross_score
    C.cross_score = lambda *a, **k: shared_path(*a, **{**k, "shared": False})
diag = C.CollapseDiagnostics(cfg.collapse, tok, cfg.trainer.seed)
rss0, _ = memory_mb()
c0 = time.process_time()
metrics = diag(model, trajs, step=1, temperature=cfg.rollout.temperature)
cpu = time.process_time() - c0
_, peak = memory_mb()
metrics.pop("timing_s/collapse_metrics")
print(json.dumps({"path": path, "trajectories": len(trajs), "cpu_s": cpu, "rss_before_mb": rss0, "peak_mb": peak,
                  "metrics": metrics}))
"""


def sample_rss(pid: int, out: list, stop: threading.Event) -> None:
    """(seconds since start, MiB) of ``pid`` every 0.2 s until it exits."""
    t0 = time.perf_counter()
    while not stop.is_set():
        try:
            with open(f"/proc/{pid}/status") as f:
                kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))
        except (OSError, StopIteration):
            return
        out.append((time.perf_counter() - t0, kb / 1024))
        time.sleep(0.2)


def run_job(args, root: Path) -> dict:
    cmd = [sys.executable, "-m", "ragen", "run", "--env", "sokoban", "--algo", "grpo", f"trainer.steps={args.steps}",
           f"logging.run_dir={root}", "logging.name=run", "logging.progress=false", "logging.save_trajectories=-1",
           *args.overrides]
    t0 = time.perf_counter()
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(root / "stderr.log", "w"))
    samples: list = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample_rss, args=(child.pid, samples, stop), daemon=True)
    sampler.start()
    _, status, usage = os.wait4(child.pid, 0)
    stop.set()
    if status:
        raise SystemExit(f"ragen run failed ({status}); see {root / 'stderr.log'}")
    rows = [json.loads(line) for line in (root / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["step"] > 0 and "perf/cpu_step_s" in r]
    total = lambda key: sum(r.get(key, 0.0) for r in steps)  # noqa: E731
    first_peak = steps[0]["perf/peak_rss_mb"] if steps else None
    return {
        "command": " ".join(cmd[2:]), "wall_s": time.perf_counter() - t0,
        "peak_rss_mb": usage.ru_maxrss / 1024,  # the child's high-water mark (Linux: KiB)
        "sampled_max_rss_mb": max((mb for _, mb in samples), default=None),
        "warmstart_cached": any(r.get("warmstart/cached") for r in rows),
        "steps": [{"step": r["step"], "rss_mb": r["perf/rss_mb"], "peak_rss_mb": r["perf/peak_rss_mb"],
                   "step_s": r["timing/step_s"], "cpu_step_s": r["perf/cpu_step_s"],
                   "cpu_diagnose_s": r["perf/cpu_diagnose_s"], "diagnose_s": r["timing/diagnose_s"]} for r in steps],
        "first_step_peak_mb": first_peak,
        "rl_wall_s": total("timing/step_s"), "rl_cpu_s": total("perf/cpu_step_s"),
        "collapse_wall_s": total("timing/diagnose_s"), "collapse_cpu_s": total("perf/cpu_diagnose_s"),
        "collapse_share_wall": total("timing/diagnose_s") / max(total("timing/step_s"), 1e-9),
        "collapse_share_cpu": total("perf/cpu_diagnose_s") / max(total("perf/cpu_step_s"), 1e-9),
        "collapse_steps": [r["step"] for r in steps if "timing_s/collapse_metrics" in r],
    }


def scoring(run: Path) -> dict:
    out = {}
    for path in ("shared", "plain"):
        res = subprocess.run([sys.executable, "-c", SCORE, str(run), path], capture_output=True, text=True, check=True)
        out[path] = json.loads(res.stdout.strip().splitlines()[-1])
    a, b = out["shared"]["metrics"], out["plain"]["metrics"]
    out["max_abs_metric_diff"] = max((abs(a[k] - b[k]) for k in a if k in b), default=0.0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10, help="trainer.steps (10 = the default run)")
    ap.add_argument("--scoring", action="store_true", help="also compare the collapse scoring paths on step 1's batch")
    ap.add_argument("--keep", type=Path, default=None, help="run folder parent to keep (default: a temporary one)")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "memory.json")
    ap.add_argument("overrides", nargs="*", help="extra section.key=value overrides for the run")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        job = run_job(args, root)
        result = {"date": str(date.today()), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                  "load_average": os.getloadavg(), "job": job}
        if args.scoring:
            result["scoring"] = scoring(root / "run")
    print(f"peak RSS {job['peak_rss_mb']:.0f} MiB (warm start cached: {job['warmstart_cached']}); "
          f"RL {job['rl_wall_s']:.0f} s wall, {job['rl_cpu_s']:.0f} CPU-s")
    print(f"{'step':>4} {'rss MiB':>8} {'peak MiB':>9} {'cpu s':>7} {'collapse cpu s':>15}")
    for s in job["steps"]:
        print(
            f"{s['step']:>4} {s['rss_mb']:>8.0f} {s['peak_rss_mb']:>9.0f} {s['cpu_step_s']:>7.1f} "
            f"{s['cpu_diagnose_s']:>15.1f}"
        )
    print(
        f"collapse diagnostics at steps {job['collapse_steps']}: {job['collapse_cpu_s']:.1f} CPU-s, "
        f"{100 * job['collapse_share_cpu']:.1f}% of the RL CPU time ({100 * job['collapse_share_wall']:.1f}% of wall)"
    )
    if args.scoring:
        sc = result["scoring"]
        for path in ("plain", "shared"):
            r = sc[path]
            print(
                f"scoring {path:>6}: peak {r['peak_mb']:.0f} MiB (from {r['rss_before_mb']:.0f}), "
                f"{r['cpu_s']:.1f} CPU-s"
            )
        print(f"largest estimate difference: {sc['max_abs_metric_diff']:.2e}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
