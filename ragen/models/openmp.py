"""How torch's OpenMP threads wait, chosen before torch loads, so that a busy machine costs a run its share of the
cores and not a multiple of its idle time.

libgomp (torch's OpenMP on Linux) reads its wait policy once, when torch is imported. Unset, a thread that reaches a
barrier spins for up to 300,000 rounds (milliseconds) before it sleeps. On cores shared with other CPU-bound work the
spinning thread burns the time slice its partner needs, and every parallel region waits for a descheduled thread. So
``import ragen`` (which loads no torch) sets, unless the user chose already:

* ``OMP_WAIT_POLICY=passive`` when other tasks are running now and some of torch's threads (``OMP_NUM_THREADS``, else
  one per core) would share a core with them: threads sleep at once at a barrier, which costs a little on an idle
  machine and much less than spinning on a busy one;
* ``GOMP_SPINCOUNT=10000`` otherwise (spin a fraction of a millisecond, then sleep): as fast as the default when idle,
  and far cheaper than the default if the machine becomes busy later.

A wait policy the user set (``OMP_WAIT_POLICY``, ``GOMP_SPINCOUNT``) wins, and nothing changes once torch is loaded.
The measurements behind the choice (``bench/busy_machine.py``) are in docs/notes/2026-11-27-openmp-wait-policy.md.
"""

from __future__ import annotations

import os
import sys
import time

#: spin rounds before a waiting thread sleeps on an idle machine (libgomp's own default is 300,000)
IDLE_SPIN_COUNT = "10000"
#: how many times /proc/loadavg's runnable count is sampled, and how far apart (seconds)
SAMPLES, INTERVAL_S = 5, 0.01
#: what was chosen and why (logged with the thread count by ``distributed.set_threads``)
choice: dict[str, str] = {}


def others_running(samples: int = SAMPLES, interval: float = INTERVAL_S) -> int:
    """Runnable tasks other than this one, now: the median of ``samples`` reads of /proc/loadavg's fourth field
    (runnable/total, this reader included). 0 where the file does not exist (not Linux).

    A count read more than ``samples // 2`` times is the median whatever the other reads say, so the reading stops
    there: on a quiet machine 3 reads of 5, and every ``import ragen`` (a listing too) waits 20 ms, not 40."""
    counts: list[int] = []
    for i in range(samples):
        try:
            with open("/proc/loadavg") as f:
                counts.append(int(f.read().split()[3].split("/")[0]) - 1)
        except (OSError, ValueError, IndexError):
            return 0
        if counts.count(counts[-1]) > samples // 2:
            return counts[-1]
        if i + 1 < samples:
            time.sleep(interval)
    return sorted(counts)[len(counts) // 2]


def default_threads(environ=os.environ) -> int:
    """The thread count ``trainer.threads=0`` means: the user's ``OMP_NUM_THREADS`` when set (torch's own convention;
    launchers such as torchrun set it per rank), else the CPU cores this process may use divided among the local
    processes of a launch (at least 1). Here, torch-free, so the wait policy can count threads before torch loads;
    ``ragen.models.distributed`` re-exports it."""
    user = environ.get("OMP_NUM_THREADS", "").strip()
    if user.isdigit() and int(user) > 0:
        return int(user)
    local = int(environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    return max(1, _cores() // max(local, 1))


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def choose_wait_policy(environ=os.environ) -> dict[str, str]:
    """Set the OpenMP wait policy in ``environ`` for the torch that loads next (see the module's doc); returns what
    was chosen, as ``{"policy": ..., "reason": ...}``."""
    if "torch" in sys.modules:
        return {"policy": "unchanged", "reason": "torch was imported before ragen"}
    for var in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
        if environ.get(var, "").strip():
            return {"policy": f"{var}={environ[var]}", "reason": "set by the user"}
    cores, threads = _cores(), default_threads(environ)
    # one thread meets no barrier, so the policy cannot matter: skip the sampling (every env worker and subprocess
    # imports ragen) and keep the short spin in case a later trainer.threads asks for more
    busy = others_running() if threads > 1 else 0
    if busy > cores - threads:  # some of our threads would share a core with other work
        environ["OMP_WAIT_POLICY"] = "passive"
        return {"policy": "OMP_WAIT_POLICY=passive",
                "reason": f"{busy} other task(s) running at start beside {threads} thread(s) on {cores} core(s)"}
    environ["GOMP_SPINCOUNT"] = IDLE_SPIN_COUNT
    return {"policy": f"GOMP_SPINCOUNT={IDLE_SPIN_COUNT}",
            "reason": "idle at start" if threads > 1 else "one thread: nothing waits at a barrier"}


def apply() -> None:
    """``choose_wait_policy`` on this process's environment, once (called by ``import ragen``)."""
    if not choice:
        choice.update(choose_wait_policy())
