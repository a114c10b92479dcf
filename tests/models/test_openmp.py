"""OpenMP's wait policy (ragen/models/openmp.py): chosen by ``import ragen`` before torch loads, from what
is running at that moment, and never over the user's own choice."""

import subprocess
import sys

import pytest

from ragen.models import openmp

CHILD = (
    "import os, sys, ragen\nfrom ragen.models.openmp import choice\n"
    "print(choice['policy'], os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'), "
    "'torch' in sys.modules)"
)


def _child(env: dict) -> list[str]:
    out = subprocess.run([sys.executable, "-c", CHILD], check=False, capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "HOME": "/tmp", **env})
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_import_ragen_sets_a_policy_without_loading_torch():
    policy, wait, spin, torch_loaded = _child({})
    assert torch_loaded == "False"  # the policy is in place before torch (and its libgomp) is loaded
    assert (policy, wait, spin) in {("OMP_WAIT_POLICY=passive", "passive", "None"),
                                    (f"GOMP_SPINCOUNT={openmp.IDLE_SPIN_COUNT}", "None", openmp.IDLE_SPIN_COUNT)}


@pytest.mark.parametrize("var,value", [("OMP_WAIT_POLICY", "active"), ("GOMP_SPINCOUNT", "5")])
def test_the_users_wait_policy_wins(var, value):
    policy, wait, spin, _ = _child({var: value})
    assert policy == f"{var}={value}"
    assert (wait, spin) == (("active", "None") if var == "OMP_WAIT_POLICY" else ("None", "5"))


def test_busy_machine_gets_passive_and_idle_gets_a_short_spin(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)  # as if torch were not loaded yet
    monkeypatch.setattr(openmp.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(openmp, "others_running", lambda: 2)  # two busy loops on 2 cores
    env: dict = {}
    assert openmp.choose_wait_policy(env)["policy"] == "OMP_WAIT_POLICY=passive" and env == {
        "OMP_WAIT_POLICY": "passive"
    }
    monkeypatch.setattr(openmp, "others_running", lambda: 0)
    env = {}
    assert openmp.choose_wait_policy(env)["reason"] == "idle at start"
    assert env == {"GOMP_SPINCOUNT": openmp.IDLE_SPIN_COUNT}
    # one thread asked for leaves a core free for one other task: no barrier shares a core, so no need to sleep
    monkeypatch.setattr(openmp, "others_running", lambda: 1)
    env = {"OMP_NUM_THREADS": "1"}
    assert openmp.choose_wait_policy(env)["policy"] == f"GOMP_SPINCOUNT={openmp.IDLE_SPIN_COUNT}"


def test_one_thread_skips_the_sampling_and_threads_are_counted_as_the_trainer_counts_them(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setattr(openmp.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    calls = []
    monkeypatch.setattr(openmp, "others_running", lambda: calls.append(1) or 9)
    env = {"OMP_NUM_THREADS": "1"}  # one thread meets no barrier: no 40 ms of /proc/loadavg reads in every worker
    assert openmp.choose_wait_policy(env)["reason"] == "one thread: nothing waits at a barrier" and calls == []
    assert env == {"OMP_NUM_THREADS": "1", "GOMP_SPINCOUNT": openmp.IDLE_SPIN_COUNT}
    # 4 cores among 2 local ranks: 2 threads each (the trainer's default_threads), so 9 busy tasks mean passive
    env = {"LOCAL_WORLD_SIZE": "2"}
    assert openmp.default_threads(env) == 2
    assert openmp.choose_wait_policy(env)["policy"] == "OMP_WAIT_POLICY=passive" and calls == [1]
    from ragen.models.distributed import default_threads

    assert default_threads is openmp.default_threads  # one definition, re-exported where torch is


def test_torch_already_loaded_changes_nothing(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", object())
    env: dict = {}
    assert openmp.choose_wait_policy(env)["policy"] == "unchanged" and env == {}


def test_others_running_reads_the_runnable_count():
    n = openmp.others_running(samples=3, interval=0.0)
    assert isinstance(n, int) and n >= 0


@pytest.mark.slow
def test_the_wait_policy_changes_no_number_of_a_run(tmp_path, monkeypatch):
    """How threads wait changes when work runs, not what it computes: a run gives the same metrics (timings and
    memory aside) under either policy ragen picks."""
    from ragen.testing import run_two_steps

    runs = []
    for name, value in (("OMP_WAIT_POLICY", "passive"), ("GOMP_SPINCOUNT", openmp.IDLE_SPIN_COUNT)):
        for var in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv(name, value)
        monkeypatch.setenv("OMP_NUM_THREADS", "2")  # barriers only exist with more than one thread
        _, rows = run_two_steps("frozenlake", tmp_path / name)
        runs.append([{k: v for k, v in r.items() if not k.startswith(("timing", "perf/")) and "/time/" not in k}
                     for r in rows])
    assert len(runs[0]) >= 3
    for a, b in zip(*runs, strict=True):
        assert a == b, {k: (a.get(k), b.get(k)) for k in a.keys() | b.keys() if a.get(k) != b.get(k)}


@pytest.mark.parametrize("reads, median, opened", [
    ([3, 3, 3, 9, 9], 2, 3),  # a count read 3 times of 5 is the median: the last two reads are skipped
    ([1, 5, 5, 2, 5], 4, 5),
    ([1, 9, 4, 2, 7], 3, 5),  # no count repeats: all five reads, their median
    ([1, 8, 1, 8, 1], 0, 5),  # the majority is known at the last read only
])
def test_others_running_stops_reading_once_the_median_is_known(monkeypatch, reads, median, opened):
    import io

    left = list(reads)

    def fake_open(path):
        return io.StringIO(f"0.50 0.40 0.30 {left.pop(0)}/300 12345\n")

    monkeypatch.setattr(openmp, "open", fake_open, raising=False)
    monkeypatch.setattr(openmp.time, "sleep", lambda s: None)
    assert openmp.others_running(samples=5, interval=0.01) == median
    assert len(reads) - len(left) == opened
