"""FrozenLake step + text render: ragen-frozenlake's env.step (which returns the rendered observation) vs gymnasium's
``FrozenLakeEnv.step`` + ``render()`` in ansi mode, on the same maps, noise seeds and actions.

For each variant (`frozenlake`: success_rate 1, `frozenlake-slippery`: 0.8), maps of seeds 10000.. are reset (not
timed) and stepped with a fixed pseudo-random action sequence until the episode ends or 10 actions; gymnasium's env
is built on the same map and reset with the same noise seed, so both walk the same trajectories (the test suite
checks that the states match). Blocks alternate ours, gymnasium, ours, gymnasium ...; the table reports the median
block time per step, as CPU time of this process (steadier on a shared machine) and as wall time, and ours /
gymnasium (target <= 1.0). The machine is shared: the load average is printed.

    python bench/frozenlake_step.py [--maps 300] [--reps 7]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymFrozenLake

import ragen

MOVES = ["Left", "Down", "Right", "Up"]
SEED0 = 10_000


def episodes(name: str, maps: int) -> list[tuple[int, list[str]]]:
    """(seed, actions) per map: up to 10 actions, stopping where the episode ends (the same for both envs)."""
    env = ragen.make_env(name)
    out = []
    for seed in range(SEED0, SEED0 + maps):
        env.reset(seed=seed)
        actions = []
        for i in range(10):
            actions.append(MOVES[(seed * 5 + i * i + 3 * i) % 4])
            if env.step(actions[-1])[2]:
                break
        out.append((seed, actions))
    env.close()
    return out


def ours_block(name: str, plan, clock) -> tuple[float, int]:
    env = ragen.make_env(name)
    total, steps = 0.0, 0
    for seed, actions in plan:
        env.reset(seed=seed)
        step = env.step
        t = clock()
        for a in actions:
            step(a)  # returns the observation text: the render is part of the step
        total += clock() - t
        steps += len(actions)
    env.close()
    return total, steps


def gym_block(name: str, plan, clock) -> tuple[float, int]:
    env = ragen.make_env(name)  # only for the map and the noise seed of each episode
    rate = env.config.success_rate
    total, steps = 0.0, 0
    for seed, actions in plan:
        env.reset(seed=seed)
        gym = GymFrozenLake(render_mode="ansi", desc=list(env.lake.desc), is_slippery=rate < 1, success_rate=rate)
        gym.reset(seed=int(env.noise_rng().integers(2**63 - 1)))
        indices = [MOVES.index(a) for a in actions]
        t = clock()
        for a in indices:
            gym.step(a)
            gym.render()
        total += clock() - t
        steps += len(actions)
        gym.close()
    env.close()
    return total, steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--maps", type=int, default=300, help="Maps (episodes) per block.")
    ap.add_argument("--reps", type=int, default=7, help="Interleaved blocks per env.")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "frozenlake_step.json")
    args = ap.parse_args()
    load_before = os.getloadavg()[0]
    result = {"benchmark": "frozenlake_step", "date": datetime.now(timezone.utc).isoformat(timespec="minutes"),
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared)", "python": platform.python_version(),
              "maps": args.maps, "reps": args.reps, "rows": []}
    print(f"FrozenLake step + text render, {args.maps} maps x {args.reps} interleaved blocks (median block)")
    print(f"{'variant':<22}{'clock':<7}{'ours us/step':>14}{'gymnasium us/step':>19}{'ours / gymnasium':>18}")
    for name in ("frozenlake", "frozenlake-slippery"):
        plan = episodes(name, args.maps)
        for clock_name, clock in (("cpu", time.process_time), ("wall", time.perf_counter)):
            ours, gym = [], []
            for _ in range(args.reps):  # A B A B
                seconds, steps = ours_block(name, plan, clock)
                ours.append(1e6 * seconds / steps)
                seconds, steps = gym_block(name, plan, clock)
                gym.append(1e6 * seconds / steps)
            row = {"variant": name, "clock": clock_name, "steps_per_block": steps,
                   "ours_us_per_step": statistics.median(ours), "gymnasium_us_per_step": statistics.median(gym),
                   "ours_blocks": ours, "gymnasium_blocks": gym}
            row["ours_over_gymnasium"] = row["ours_us_per_step"] / row["gymnasium_us_per_step"]
            print(f"{name:<22}{clock_name:<7}{row['ours_us_per_step']:>14.2f}{row['gymnasium_us_per_step']:>19.2f}"
                  f"{row['ours_over_gymnasium']:>17.2f}x")
            result["rows"].append(row)
    result["loadavg_1m_before_after"] = [load_before, os.getloadavg()[0]]
    print(f"target: ours / gymnasium <= 1.0; load average (1 min) before/after: {load_before:.2f} / "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs (shared machine, noisy; the ratio is from one run)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
