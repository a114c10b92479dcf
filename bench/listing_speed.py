"""The listing commands beside `python -c "import torch"`: `ragen --help`, `ragen plugins`, `ragen envs` and their
`--json` forms should answer in at most 0.3x the time of importing torch on the same machine (and import no torch).

Each round runs every listing command right after `python -c "import torch"` (A B A B ...), so a machine whose load
drifts slows both sides of a pair alike; the ratios are medians of each side over the rounds. Wall time (what a user
waits) and CPU time (user + sys of the child, which moves less on a busy machine) are both recorded, with the load
average before and after. One untimed run of each command first fills the page cache and writes the bytecode caches
(``__pycache__``) an installed copy has: the commands run without ``PYTHONDONTWRITEBYTECODE``, which would otherwise
make every run recompile ragen's modules (0.3 s of CPU, a third of a listing).

    python bench/listing_speed.py [--rounds 7] [--label after] [--out bench/results/listing_speed.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

LISTINGS = (("--help",), ("plugins",), ("envs",), ("plugins", "--json"), ("envs", "--json"))
#: the environment of every timed command: bytecode caches written and read, as in an installed copy
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def ragen_command() -> list[str]:
    """The `ragen` console script beside this interpreter (what a user types), else `python -m ragen`."""
    script = shutil.which("ragen", path=str(Path(sys.executable).parent)) or shutil.which("ragen")
    return [script] if script else [sys.executable, "-m", "ragen"]


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one run of ``argv``, output discarded; a failing command stops the benchmark."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600, env=ENV)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--label", default="", help="Recorded with the results (e.g. the commit or 'before').")
    ap.add_argument("--out", type=Path, default=Path("bench/results/listing_speed.json"))
    args = ap.parse_args()

    ragen = ragen_command()
    torch = [sys.executable, "-c", "import torch"]
    commands = {" ".join(("ragen", *a)): [*ragen, *a] for a in LISTINGS}
    for argv in [torch, *commands.values()]:
        timed(argv)  # warm the page cache
    load_before = os.getloadavg()
    started = datetime.now(timezone.utc)
    times: dict[str, dict[str, list[float]]] = {}
    for _ in range(args.rounds):
        for name, argv in commands.items():
            for key, cmd in (("import torch", torch), (name, argv)):
                wall, cpu = timed(cmd)
                entry = times.setdefault(key, {"wall_s": [], "cpu_s": []})
                entry["wall_s"].append(wall)
                entry["cpu_s"].append(cpu)
    load_after = os.getloadavg()

    med = {k: {m: statistics.median(v) for m, v in t.items()} for k, t in times.items()}
    ref = med["import torch"]
    rows = [{"command": name, "wall_s": med[name]["wall_s"], "cpu_s": med[name]["cpu_s"],
             "wall_x_torch": med[name]["wall_s"] / ref["wall_s"], "cpu_x_torch": med[name]["cpu_s"] / ref["cpu_s"]}
            for name in commands]
    result = {
        "benchmark": "listing_speed",
        "label": args.label,
        "started_utc": started.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.machine()} cpus={os.cpu_count()}",
        "python": platform.python_version(),
        "ragen_command": ragen,
        "rounds": args.rounds,
        "load_avg_before": load_before,
        "load_avg_after": load_after,
        "import_torch": ref,
        "rows": rows,
        "samples": times,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}; import torch: "
          f"wall {ref['wall_s']:.3f} s, CPU {ref['cpu_s']:.3f} s ({args.rounds} rounds, medians)")
    for r in rows:
        print(f"{r['command']:<22} wall {r['wall_s']:.3f} s = {r['wall_x_torch']:.2f}x   "
              f"CPU {r['cpu_s']:.3f} s = {r['cpu_x_torch']:.2f}x")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
