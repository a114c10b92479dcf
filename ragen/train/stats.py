"""A step's own statistics: the raw-reward metrics of the global batch, finite training scores, the phase timer
that writes ``timing/<phase>_s``, and the process memory (``perf/rss_mb``, ``perf/peak_rss_mb``)."""

from __future__ import annotations

import resource
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

#: the timed phases of ``Trainer.step``, in order (LOG is timed by ``timing/step_s``, which it writes)
PHASES = ("rollout", "diagnose", "filter", "shape", "advantages", "update")


class StepTimer:
    """Wall-clock seconds of a step and its phases, written into the step's metrics (SkyRL's and verl's pattern), and
    the process's CPU seconds of each (``perf/cpu_<phase>_s``, ``perf/cpu_step_s``): on a shared machine the wall time
    grows with the other work, the CPU time much less, so a phase's share of a step is read from the CPU numbers."""

    def __init__(self, metrics: dict):
        self.metrics, self.start, self.cpu_start = metrics, time.perf_counter(), time.process_time()

    @contextmanager
    def phase(self, *names: str) -> Iterator[None]:
        """Add the block's seconds to ``timing/<name>_s`` and its CPU seconds to ``perf/cpu_<name>_s`` of each name (one
        block may count towards several)."""
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            for name in names:
                for key, value in ((f"timing/{name}_s", seconds), (f"perf/cpu_{name}_s", cpu)):
                    self.metrics[key] = self.metrics.get(key, 0.0) + value

    def finish(self) -> float:
        """``timing/step_s`` (seconds since the timer was made) and ``perf/cpu_step_s``, the memory numbers, and 0.0 for
        the phases the step ended before (an empty step after the filter), so that every step row has the same timing
        keys. Returns the step's seconds."""
        for name in PHASES:
            self.metrics.setdefault(f"timing/{name}_s", 0.0)
            self.metrics.setdefault(f"perf/cpu_{name}_s", 0.0)
        self.metrics["timing/step_s"] = seconds = time.perf_counter() - self.start
        self.metrics["perf/cpu_step_s"] = time.process_time() - self.cpu_start
        self.metrics.update(memory_metrics())
        return seconds


def memory_mb() -> tuple[float | None, float]:
    """This process's resident memory now (None where ``/proc`` is absent) and its high-water mark so far, in MiB.

    Read from ``/proc/self/status`` (VmRSS, VmHWM: one small read, microseconds); elsewhere the peak comes from
    ``getrusage``, whose ``ru_maxrss`` is KiB on Linux and bytes on macOS."""
    try:
        with open("/proc/self/status") as f:
            fields = dict(line.split(":", 1) for line in f if line.startswith(("VmRSS", "VmHWM")))
        return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024
    except (OSError, KeyError, ValueError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return None, peak / (2**20 if sys.platform == "darwin" else 1024)


def memory_metrics() -> dict[str, float]:
    """``perf/rss_mb`` (resident now, at the end of the step) and ``perf/peak_rss_mb`` (the process's peak so far:
    a step that raises it holds more at once than any before it)."""
    rss, peak = memory_mb()
    return {"perf/peak_rss_mb": peak} | ({} if rss is None else {"perf/rss_mb": rss})


def reward_metrics(raw: list[float], groups: list[int]) -> dict:
    """Statistics of the raw scores R_i (env rewards + format penalties) and of their spread within groups."""
    by_group: dict[int, list[float]] = {}
    for r, g in zip(raw, groups, strict=True):
        by_group.setdefault(g, []).append(r)
    stds = [float(np.std(v, ddof=1)) if len(v) > 1 else 0.0 for v in by_group.values()]
    return {
        "reward/mean": float(np.mean(raw)),
        "reward/max": float(np.max(raw)),
        "reward/min": float(np.min(raw)),
        "reward/group_std": float(np.mean(stds)),
        "rollout/frac_zero_std_groups": float(np.mean([s <= 1e-10 for s in stds])),
    }


def finite_scores(scores: list[float]) -> tuple[list[float], int]:
    """Scores with NaN/inf replaced by 0.0, and how many were replaced."""
    bad = sum(not np.isfinite(s) for s in scores)
    return ([float(s) if np.isfinite(s) else 0.0 for s in scores], int(bad)) if bad else (scores, 0)
