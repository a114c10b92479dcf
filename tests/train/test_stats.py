"""The step's own statistics: the memory numbers every step row carries (ragen/train/stats.py)."""

import sys

import numpy as np
import pytest

from ragen.train.stats import StepTimer, memory_mb


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmRSS/VmHWM come from /proc")
def test_step_row_carries_resident_and_peak_memory_and_the_peak_sees_a_freed_allocation():
    metrics: dict = {}
    StepTimer(metrics).finish()
    assert 0 < metrics["perf/rss_mb"] <= metrics["perf/peak_rss_mb"]
    before = metrics["perf/peak_rss_mb"]
    size_mb = 256 + before  # certainly above the old peak even if all of it was resident at once
    block = np.ones(int(size_mb * 2**20), dtype=np.uint8)  # ones: the pages are touched, so they are resident
    del block
    rss, peak = memory_mb()
    assert peak >= size_mb  # the high-water mark remembers the freed block ...
    assert rss < size_mb  # ... the resident size does not (numpy returns a block this large to the OS)
    after: dict = {}
    StepTimer(after).finish()
    assert after["perf/peak_rss_mb"] >= size_mb


def test_cpu_seconds_count_work_not_waiting_and_every_phase_has_its_key():
    import time

    from ragen.train.stats import PHASES

    metrics: dict = {}
    timer = StepTimer(metrics)
    with timer.phase("rollout"):
        time.sleep(0.3)  # waiting: wall time, next to no CPU time
    with timer.phase("diagnose"):
        end = time.process_time() + 0.2
        while time.process_time() < end:  # busy: CPU time
            pass
    timer.finish()
    assert metrics["timing/rollout_s"] >= 0.3 and metrics["perf/cpu_rollout_s"] < 0.1
    assert metrics["perf/cpu_diagnose_s"] >= 0.2
    assert metrics["perf/cpu_step_s"] >= metrics["perf/cpu_rollout_s"] + metrics["perf/cpu_diagnose_s"]
    assert all(f"perf/cpu_{name}_s" in metrics for name in PHASES)  # phases a step never reached count 0.0
