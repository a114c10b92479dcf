"""Sokoban level generation: ragen-sokoban vs gym-sokoban's `generate_room` (6x6, 1 box), and the level distribution.

Speed. ragen-sokoban: `ragen_sokoban.generator.generate` with the `sokoban` variant's settings (search depth 300,
min 1 push, the 10-move budget); every level is verified by the move-optimal BFS and the time includes it. The
floor-table caches (layouts, per-cell entries, distances) are cleared before each pass over the seeds, so every pass
starts cold. A second row keeps RAGEN's distribution (no budget). gym-sokoban 0.0.6 (RAGEN's generator origin):
`generate_room(dim=(6, 6), num_steps=20, num_boxes=1)` seeded per level with `random.seed(s); np.random.seed(s)`;
its reverse play has a hard-coded depth of 300 and it verifies nothing. It runs in a worker process of a throwaway
venv (`--anchor-python`, built with `python -m venv` + `pip install gym-sokoban` when missing; never a project
dependency). Each pass walks the seeds in chunks of 50, ours then gym-sokoban per chunk (interleaved, so both see
the same machine load); the table reports the median pass, as CPU time of the generating process (steadier on a
shared machine) and as wall time. RAGEN's own generator (not on PyPI) measured 0.755x gym-sokoban's time in issue
17, so 26x gym-sokoban is about 20x RAGEN's.

Distribution. For each 1- and 2-box variant: the optimal move count of its levels (histogram, mean, <= 3 and
one-move shares), the one-push share and the share of levels starting with a box on a target, next to RAGEN's
figures, measured on RAGEN's own generator (6x6: mean 3.98 moves, 8.2% one-move levels; 8x8 2 boxes:
mean 5.9 moves, 12% need <= 3 moves, no one-push level, no box on a target).

    python bench/sokoban_generation.py [--n 1000] [--reps 5] [--chunk 50] [--dist-n 1000]

The machine is shared: the load average is printed and saved, and only ratios measured in one run are compared.
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
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

ANCHOR_VENV = Path(tempfile.gettempdir()) / "anchor-venv"
GYM_WORKER = """
import random, sys, time, warnings
warnings.filterwarnings("ignore")
import numpy as np
from gym_sokoban.envs.room_utils import generate_room
print("ready", flush=True)
for line in sys.stdin:
    start, n = map(int, line.split())
    ok = 0
    t, c = time.perf_counter(), time.process_time()
    for s in range(start, start + n):
        random.seed(s); np.random.seed(s)
        try:
            generate_room(dim=(6, 6), num_steps=20, num_boxes=1)
            ok += 1
        except (RuntimeError, RuntimeWarning, ValueError):
            pass
    print(time.perf_counter() - t, time.process_time() - c, ok, flush=True)
"""
#: RAGEN's generator on the same questions (measured on its own code): variant -> figures
RAGEN_REFERENCE = {
    "sokoban": {"mean_moves": 3.98, "one_move_share": 0.082, "box_on_target_share": 0.0},
    "sokoban-large": {"mean_moves": 5.9, "le3_share": 0.12, "one_push_share": 0.0, "box_on_target_share": 0.0},
}
SEED0 = 10_000


def clear_caches() -> None:
    """Forget the floor tables of earlier levels and the room shape's per-cell entries: every pass over the seeds
    starts cold."""
    from ragen_sokoban.generator import _cell_entries, _distances, layout

    layout.cache_clear()
    _distances.cache_clear()
    _cell_entries.cache_clear()


def ours_chunk(start: int, n: int, budget: int | None) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) to generate seeds start..start+n-1."""
    from ragen_sokoban.generator import generate

    t, c = time.perf_counter(), time.process_time()
    for seed in range(start, start + n):
        generate(seed, 6, 6, 1, 300, min_pushes=1, max_moves=budget)
    return time.perf_counter() - t, time.process_time() - c


def anchor_python(path: str | None) -> str:
    python = Path(path) if path else ANCHOR_VENV / "bin" / "python"
    if not python.exists():
        print(f"building {python.parent.parent} (pip install gym-sokoban)...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(python.parent.parent)], check=True, capture_output=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "gym-sokoban"], check=True, capture_output=True,
                       timeout=900)
    return str(python)


class GymWorker:
    """gym-sokoban's generate_room in a process of the anchor venv; ``block(n)`` returns (seconds, rooms made)."""

    def __init__(self, python: str) -> None:
        self.proc = subprocess.Popen([python, "-c", GYM_WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("gym-sokoban worker did not start (is gym-sokoban installed in the anchor venv?)")

    def chunk(self, start: int, n: int) -> tuple[float, float, int]:
        """(wall seconds, CPU seconds of the worker, rooms made) for seeds start..start+n-1."""
        self.proc.stdin.write(f"{start} {n}\n")
        self.proc.stdin.flush()
        wall, cpu, ok = self.proc.stdout.readline().split()
        return float(wall), float(cpu), int(ok)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def speed(args) -> dict:
    try:
        gym = GymWorker(anchor_python(args.anchor_python))
    except (subprocess.SubprocessError, OSError, RuntimeError) as exc:
        print(f"gym-sokoban unavailable ({type(exc).__name__}: {exc}); comparison skipped")
        gym = None
    keys = ["ours_budget", "ours_no_budget"] + (["gym"] if gym is not None else [])
    wall = {k: [] for k in keys}  # per pass over all seeds: total seconds
    cpu = {k: [] for k in keys}
    gym_ok = 0
    for _ in range(args.reps):
        for key, budget in (("ours_budget", 10), ("ours_no_budget", None)):
            clear_caches()  # each of our passes starts cold; gym-sokoban runs one pass beside each
            totals = {k: [0.0, 0.0] for k in (key, "gym")}
            for start in range(SEED0, SEED0 + args.n, args.chunk):  # chunks interleaved: ours, gym, ours, gym ...
                n = min(args.chunk, SEED0 + args.n - start)
                w, c = ours_chunk(start, n, budget)
                totals[key][0] += w
                totals[key][1] += c
                if gym is not None:
                    w, c, ok = gym.chunk(start, n)
                    totals["gym"][0] += w
                    totals["gym"][1] += c
                    gym_ok += ok
            for k in keys:
                if k in totals:
                    wall[k].append(totals[k][0])
                    cpu[k].append(totals[k][1])
    if gym is not None:
        gym.close()
        wall["gym"] = [x for x in wall["gym"] if x]  # a pass with gym-sokoban unavailable records nothing
    def ms(xs: list[float]) -> float:  # ms per level of the median pass
        return 1000 * statistics.median(xs) / args.n

    rows = [("ragen-sokoban (move-BFS verified, budget 10)", "ours_budget"),
            ("ragen-sokoban (move-BFS verified, no budget)", "ours_no_budget"),
            (f"gym-sokoban 0.0.6 generate_room ({gym_ok}/{2 * args.n * args.reps} ok)", "gym")]
    print(f"\nGeneration, 6x6 1 box, seeds {SEED0}..{SEED0 + args.n - 1}, {args.reps} cold passes, chunks of "
          f"{args.chunk} interleaved (median pass)")
    print(f"{'generator':<48}{'CPU ms/level':>13}{'gym / this':>11}{'wall ms/level':>15}{'gym / this':>11}")
    out = []
    for name, key in rows:
        if key not in wall:
            continue
        row = {"generator": name, "cpu_ms_per_level": ms(cpu[key]), "wall_ms_per_level": ms(wall[key]),
               "cpu_pass_seconds": cpu[key], "wall_pass_seconds": wall[key]}
        if "gym" in wall:
            row["gym_sokoban_over_this_cpu"] = ms(cpu["gym"]) / row["cpu_ms_per_level"]
            row["gym_sokoban_over_this_wall"] = ms(wall["gym"]) / row["wall_ms_per_level"]
        ratio = (f"{row['gym_sokoban_over_this_cpu']:>10.1f}x", f"{row['gym_sokoban_over_this_wall']:>10.1f}x") \
            if "gym" in wall else ("", "")
        print(f"{name:<48}{row['cpu_ms_per_level']:>13.4f}{ratio[0]}{row['wall_ms_per_level']:>15.4f}{ratio[1]}")
        out.append(row)
    if "gym" in wall:
        print("target: >= 26x gym-sokoban (about 20x RAGEN's generate_room, which took 0.755x gym-sokoban's time)")
    return {"rows": out, "gym_sokoban_over_ours_cpu": out[0].get("gym_sokoban_over_this_cpu"),
            "gym_sokoban_over_ours_wall": out[0].get("gym_sokoban_over_this_wall")}


def distribution(args) -> list[dict]:
    from ragen_sokoban.solver import solve, solve_moves

    import ragen

    out = []
    print(f"\nLevel distribution, seeds {SEED0}..{SEED0 + args.dist_n - 1} (optimal moves by move-BFS)")
    head = f"{'variant':<22}{'mean':>6}{'<=3':>7}{'1 move':>8}{'1 push':>8}{'box on T':>10}  histogram (moves: share %)"
    print(head)
    for name in ("sokoban", "sokoban-vocab", "sokoban-large"):
        env = ragen.make_env(name)
        moves, pushes, on_target = [], [], 0
        for seed in range(SEED0, SEED0 + args.dist_n):
            env.reset(seed=seed)
            moves.append(len(solve_moves(env.board, env.player, env.boxes)))
            pushes.append(solve(env.board, env.player, env.boxes)[0])
            on_target += bool(env.boxes & env.board.targets)
        n = len(moves)
        row = {"variant": name, "levels": n, "mean_moves": statistics.mean(moves),
               "le3_share": sum(m <= 3 for m in moves) / n, "one_move_share": moves.count(1) / n,
               "one_push_share": pushes.count(1) / n, "box_on_target_share": on_target / n,
               "histogram": {str(k): v / n for k, v in sorted(Counter(moves).items())}}
        hist = " ".join(f"{k}:{100 * v:.1f}" for k, v in row["histogram"].items())
        print(f"{name:<22}{row['mean_moves']:>6.2f}{100 * row['le3_share']:>6.1f}%{100 * row['one_move_share']:>7.1f}%"
              f"{100 * row['one_push_share']:>7.1f}%{100 * row['box_on_target_share']:>9.1f}%  {hist}")
        ref = RAGEN_REFERENCE.get(name)
        if ref:
            cells = "  ".join(f"{k}={v:g}" for k, v in ref.items())
            print(f"{'  RAGEN (its generator)':<22}{cells}")
            row["ragen_reference"] = ref
        out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="Seeds per timed pass.")
    ap.add_argument("--reps", type=int, default=5, help="Cold passes over the seeds per generator.")
    ap.add_argument("--chunk", type=int, default=50, help="Seeds per interleaved chunk.")
    ap.add_argument("--dist-n", type=int, default=1000, help="Levels per variant for the distribution.")
    ap.add_argument("--anchor-python", default=None, help=f"Python of a venv with gym-sokoban (default {ANCHOR_VENV}).")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "sokoban_generation.json")
    args = ap.parse_args()
    load_before = os.getloadavg()
    result = {"benchmark": "sokoban_generation", "date": datetime.now(timezone.utc).isoformat(timespec="minutes"),
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared)", "python": platform.python_version(),
              "room": "6x6", "boxes": 1, "n": args.n, "reps": args.reps, "chunk": args.chunk}
    result.update(speed(args))
    result["loadavg_1m_before_after"] = [load_before[0], os.getloadavg()[0]]
    print(f"load average (1 min) before/after the timing: {load_before[0]:.2f} / {os.getloadavg()[0]:.2f} "
          f"on {os.cpu_count()} CPUs (shared machine: absolute times are noisy, the ratio is from one run)")
    result["distribution"] = distribution(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
