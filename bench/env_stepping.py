"""Concurrent env stepping: one rollout of 32 envs (16 groups x 2) with ``env_workers=1`` vs ``env_workers=8``.

The engine is the env's expert with half of the answers replaced by wrong ones (per episode and turn, as in
tests/rollout/test_stepping.py), so the time measured is env time (sandboxed test runs for DeepCoder, shop requests and
page parsing for WebShop) plus prompt bookkeeping, not model time. Blocks alternate 1, 8, 1, 8, ...; the table reports
the median wall time per rollout and the ratio, checks that both settings give identical trajectories, and prints
the load average (the machine is shared).

    python bench/env_stepping.py [--reps 3] [--envs deepcoder webshop]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import torch  # noqa: E402
from test_stepping import _play, _view  # noqa: E402  (the test's engine and comparison)

from ragen.models.builtin import build_tiny_model
from ragen.models.load import load_model_and_tokenizer  # noqa: E402
from ragen.rollout import EnvGroups, GroupSpec  # noqa: E402

OPTIONS = {"deepcoder": {}, "webshop": {"num_products": 200}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--envs", nargs="+", default=list(OPTIONS))
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "env_stepping.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / "ragen-bench-env-stepping"
    tok = load_model_and_tokenizer(build_tiny_model(tmp / "tiny", ["frozenlake"], corpus_seeds=2), "unused")[1]
    rows = {}
    for name in args.envs:
        times: dict[int, list[float]] = {1: [], args.workers: []}
        views = []
        with EnvGroups([GroupSpec(name, 16, OPTIONS.get(name, {}))], group_size=2) as groups:
            _play(tok, groups, 1)  # warm-up: caches, sandbox probe, server start
            for _ in range(args.reps):
                for workers in (1, args.workers):
                    res, seconds = _play(tok, groups, workers)
                    times[workers].append(seconds)
                    views.append(_view(res))
        same = all(v == views[0] for v in views)
        one, many = statistics.median(times[1]), statistics.median(times[args.workers])
        rows[name] = {"envs": 32, "seconds_workers_1": times[1], f"seconds_workers_{args.workers}": times[args.workers],
                      "median_1": one, f"median_{args.workers}": many, "speedup": one / many, "identical": same,
                      "turns": sum(len(t[9]) for t in views[0][0]), "success": sum(t[7] for t in views[0][0])}
        print(f"{name:10s} 32 envs: env_workers=1 {one:.2f} s, env_workers={args.workers} {many:.2f} s: "
              f"{one / many:.2f}x, identical trajectories: {same}, load {os.getloadavg()[0]:.1f}")
    report = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": platform.processor() or
              platform.machine(), "cpus": os.cpu_count(), "load_average": os.getloadavg(), "workers": args.workers,
              "reps": args.reps, "torch_threads": 1, "results": rows}
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
