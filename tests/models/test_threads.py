"""The user's thread setting wins: ``OMP_NUM_THREADS`` decides what ``trainer.threads=0`` means, and the
count used is logged."""

import subprocess
import sys

import structlog.testing
import torch


def test_omp_num_threads_decides_the_default(monkeypatch):
    from ragen.models.distributed import default_threads, set_threads

    before = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    try:
        with structlog.testing.capture_logs() as events:
            assert default_threads() == 1 and set_threads(0) == 1 and torch.get_num_threads() == 1
        logged = next(e for e in events if e["event"] == "torch_threads")
        assert (logged["threads"], logged["source"]) == (1, "OMP_NUM_THREADS")
        assert "openmp_wait" in logged and "openmp_reason" in logged  # the wait policy beside the count
        with structlog.testing.capture_logs() as events:
            assert set_threads(2) == 2  # an explicit trainer.threads still wins over the variable
        assert events[-1]["source"] == "trainer.threads"
    finally:
        torch.set_num_threads(before)


def test_a_run_honours_omp_num_threads_in_a_fresh_process():
    """In a fresh process (torch reads the variable at start-up too), ragen's default keeps the user's one thread."""
    code = ("import os, torch\nfrom ragen.models.distributed import set_threads\n"
            "print(set_threads(0), torch.get_num_threads())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "HOME": "/tmp"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1].split() == ["1", "1"]
