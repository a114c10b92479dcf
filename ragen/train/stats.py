"""A step's own statistics: the raw-reward metrics of the global batch, finite training scores, and the phase timer
that writes ``timing/<phase>_s``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

#: the timed phases of ``Trainer.step``, in order (LOG is timed by ``timing/step_s``, which it writes)
PHASES = ("rollout", "diagnose", "filter", "shape", "advantages", "update")


class StepTimer:
    """Wall-clock seconds of a step and its phases, written into the step's metrics (SkyRL's and verl's pattern)."""

    def __init__(self, metrics: dict):
        self.metrics, self.start = metrics, time.perf_counter()

    @contextmanager
    def phase(self, *names: str) -> Iterator[None]:
        """Add the block's seconds to ``timing/<name>_s`` of each name (one block may count towards several)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            seconds = time.perf_counter() - t0
            for name in names:
                key = f"timing/{name}_s"
                self.metrics[key] = self.metrics.get(key, 0.0) + seconds

    def finish(self) -> float:
        """``timing/step_s`` (seconds since the timer was made), and 0.0 for the phases the step ended before (an empty
        step after the filter), so that every step row has the same timing keys. Returns the step's seconds."""
        for name in PHASES:
            self.metrics.setdefault(f"timing/{name}_s", 0.0)
        self.metrics["timing/step_s"] = seconds = time.perf_counter() - self.start
        return seconds


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
