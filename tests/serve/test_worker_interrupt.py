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


def _as_a_terminal_job() -> None:
    """The server's SIGINT as a terminal's foreground job has it: default. A job started with ``&`` by a shell without
    job control (a CI script's background step, ``nohup``-style launches) inherits SIGINT *ignored*, and Python keeps
    an inherited SIG_IGN: the server then rightly ignores the Ctrl-C, which is what failed this test in a clone whose
    ``.ci/run`` was started in the background."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_while_workers_start_prints_one_line():
    """No traceback from the server or its workers, and one line, for a Ctrl-C while the workers start; the first
    Ctrl-C stops the server."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("RAGEN_ENV_TOKEN", None)  # loopback, no token
    proc = subprocess.Popen([sys.executable, "-m", "ragen", "serve-env", "frozenlake", "--port", "0", "--workers", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True,  # its own process group, as a terminal's foreground job
                            preexec_fn=_as_a_terminal_job)
    try:
        deadline = time.monotonic() + 120
        while len([c for c in _children(proc.pid) if _is_worker(c)]) < 3:  # the workers are starting
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the workers did not start"
            time.sleep(0.05)
        time.sleep(0.2)  # the server is past starting them, waiting for the first; they are importing ragen
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("the server served on after a Ctrl-C sent while its workers started")
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
