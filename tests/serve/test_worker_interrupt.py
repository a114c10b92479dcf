"""Ctrl-C while `ragen serve-env`'s worker processes start: one line, no traceback per worker.

A terminal's Ctrl-C reaches the whole process group. Each worker still importing ragen raised KeyboardInterrupt, and
each one that finished after the server had closed its pipe raised BrokenPipeError: with --workers 3, three
tracebacks after the server's own one line ("Aborted.")."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads child processes from /proc")


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


@pytest.mark.xfail(strict=False, reason=(
    "a known race, not yet fixed: while a worker is started the server's SIGINT disposition is SIG_IGN (so the "
    "spawned interpreter starts ignoring it); a process-directed Ctrl-C in that window taken by a thread that does "
    "not block it (likely numpy's BLAS pool) is discarded, and the server serves on. Blocking the signal on the "
    "starting thread instead was tried: the spawned worker did not keep the mask and printed a KeyboardInterrupt "
    "traceback. Failed in 2 of 3 fresh clones on the loaded 2-core VM, passed on CI; XPASS when the race is missed"))
def test_ctrl_c_while_workers_start_prints_one_line():
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("RAGEN_ENV_TOKEN", None)  # loopback, no token
    proc = subprocess.Popen([sys.executable, "-m", "ragen", "serve-env", "frozenlake", "--port", "0", "--workers", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)  # its own process group, as a terminal's foreground job
    try:
        deadline = time.monotonic() + 120
        while len([c for c in _children(proc.pid) if _is_worker(c)]) < 3:  # the workers are starting
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the workers did not start"
            time.sleep(0.05)
        time.sleep(0.2)  # the server is past starting them, waiting for the first; they are importing ragen
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "Traceback" not in err and "Error" not in err, err
    if "serving" in out:  # a fast machine: the first worker was up before the Ctrl-C, the server stopped cleanly
        assert err.strip() == "" and proc.returncode == 0, (out, err)
    else:  # the CLI's own one line for a Ctrl-C, and nothing from the workers
        assert err.strip().splitlines() in (["Aborted."], ["Interrupted."]), err
        assert proc.returncode != 0


def _is_worker(pid: int) -> bool:
    """A spawned multiprocessing child (not the resource tracker)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(b"spawn_main" in part for part in cmd)
