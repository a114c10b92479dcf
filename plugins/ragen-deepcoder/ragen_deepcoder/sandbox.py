"""Running untrusted programs: one bubblewrap sandbox per submission (spec §8), never in the trainer process.

Per submission the trainer starts the CHECKER, ``python -I -B harness.py check`` (trusted, outside the sandbox; its
spec on stdin), which starts ``prlimit … -- bwrap … python -I -B /sandbox/harness.py stub /sandbox`` and drives it
test by test (see ``harness.py``: the verdicts never come from anything the sandbox can write):

* the checker drops to an unprivileged user first (uid/gid 65534, no supplementary groups) when the trainer is root,
  and starts a new session (its process group, with bwrap, is what a run timeout kills);
* ``bwrap --unshare-all --unshare-user --disable-userns``: own user, PID, network (empty: no interfaces but its own
  loopback), IPC, UTS and cgroup namespaces; no nested user namespaces; ``--die-with-parent --new-session``;
  ``--seccomp``: a filter refusing ptrace and the other cross-process syscalls, memfd/SysV shm and kernel attack
  surface (``confine.py``);
* the file system is read-only ``/usr`` (plus ``/bin``, ``/lib``… as the host has them), fresh ``/proc`` and
  ``/dev`` (read-only), ``/sandbox`` holding ``harness.py`` and ``solution.py`` read-only (copied in from memory
  files, nothing is written on the host), a size-capped private ``/tmp`` (the only writable place) and a read-only
  root; no ``/etc``, no home, no project directory; a cleared environment with ``PATH=/usr/bin:/bin``;
* rlimits before exec (``prlimit``): CPU, address space, file size, core 0; inside, the stub sets the same limits
  plus the process count (counted per sandbox there, see ``Limits``) and a per-test CPU limit;
* a memory cgroup per run (``total_memory_mb`` for everything the run holds) where this process may create one.

The checker's report (one JSON line on its stdout, which the sandbox cannot reach) is the result.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import attrs

from ragen import EnvError
from ragen_deepcoder.confine import MemoryCgroup, seccomp_program

log = logging.getLogger("ragen_deepcoder")

HARNESS = Path(__file__).with_name("harness.py")
NOBODY = 65534
UNSAFE_WARNING = (
    "ragen-deepcoder: unsafe_no_sandbox=True - model-written programs run WITHOUT isolation (no bubblewrap): "
    "they can read and write your files and reach the network. Use this only inside a disposable container."
)


class SandboxUnavailable(EnvError):
    """bubblewrap is missing or cannot create its namespaces here: the env refuses to run untrusted code."""


@attrs.frozen
class Limits:
    """Resource limits of one run. ``nproc`` is set by the harness inside the sandbox: Linux counts processes per
    (user namespace, uid) there, so one sandbox's fork bomb cannot starve another running beside it (set outside, the
    count would be global for uid 65534)."""

    timeout_s: float = 4.0  #: default wall-clock limit of one test (a problem's ``time_limit_s`` overrides it)
    run_s: float = 60.0  #: cap on a whole run: min(run_s, n·timeout + 5)
    memory_mb: int = 512  #: RLIMIT_AS of every process
    file_size_mb: int = 16  #: RLIMIT_FSIZE
    processes: int = 512  #: RLIMIT_NPROC inside the sandbox
    output_bytes: int = 1 << 20  #: stdout (or return value) kept per test; more is a failure
    tmp_mb: int = 64  #: size of the private /tmp
    #: memory cgroup limit of the whole run (all processes, tmpfs and memfd pages, the checker), where available
    total_memory_mb: int = 768


@attrs.frozen
class RunResult:
    """What the harness reported for one submission (``results`` aligned with the tests), or why it did not."""

    results: list[dict[str, Any]]
    syntax_error: bool = False
    error: str | None = None  #: compile error, or why the sandbox produced no result
    wall_s: float = 0.0


# ---- availability ------------------------------------------------------------------------------------------------
_probe_lock = threading.Lock()
_probe_cache: dict[tuple, str | None] = {}


def find_bwrap() -> str | None:
    return shutil.which("bwrap") or (os.access("/usr/bin/bwrap", os.X_OK) and "/usr/bin/bwrap") or None


def default_python() -> str:
    """``/usr/bin/python3`` when present (readable by uid 65534), else the interpreter running ragen."""
    if os.access("/usr/bin/python3", os.X_OK):
        return "/usr/bin/python3"
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable) or sys.executable)


def sandbox_problem(python: str) -> str | None:
    """None when a trial sandbox runs ``python`` here; else a one-line reason (cached per process)."""
    key = (python, os.geteuid())
    with _probe_lock:
        if key not in _probe_cache:
            _probe_cache[key] = _probe(python)
        return _probe_cache[key]


def _probe(python: str) -> str | None:
    bwrap = find_bwrap()
    if bwrap is None:
        return "bubblewrap not available: no `bwrap` executable on PATH (install the Debian package `bubblewrap`)"
    bad = _unreadable(python)
    if bad:
        return f"bubblewrap not available for {python}: {bad}"
    runner = BwrapRunner(python=python, limits=Limits(timeout_s=5, run_s=10))
    try:
        res = runner.run("print('ok')", [{"kind": "stdio", "input": ""}])
    except OSError as exc:
        return f"bubblewrap not available: {exc}"
    if res.error or not res.results or res.results[0].get("stdout", "").strip() != "ok":
        reason = res.error or json.dumps(res.results)[:300]
        return (
            "bubblewrap not available: a trial sandbox failed "
            f"({reason}); unprivileged user namespaces may be disabled (sysctl kernel.unprivileged_userns_clone=1, "
            "user.max_user_namespaces > 0) or blocked by a container's seccomp profile"
        )
    return None


def _unreadable(python: str) -> str | None:
    """Why uid 65534 could not execute ``python`` (the sandbox binds only what that user may read), or None."""
    path = Path(python)
    if not path.is_absolute() or not path.exists():
        return f"python: {python!r} is not an existing absolute path"
    real = path.resolve()
    for parent in [*reversed(real.parents), real]:
        mode = parent.stat().st_mode
        need = stat.S_IXOTH if parent != real else (stat.S_IXOTH | stat.S_IROTH)
        if mode & need != need and not (os.geteuid() != 0 and os.access(parent, os.X_OK)):
            return f"python: {parent} is not readable by the sandbox user (uid {NOBODY}); use /usr/bin/python3"
    return None


# ---- the runners -------------------------------------------------------------------------------------------------
@attrs.define
class Runner:
    """Runs a solution against tests through ``harness.py`` in a fresh child process tree per call (thread-safe)."""

    python: str
    limits: Limits = attrs.Factory(Limits)
    #: whether the harness runs in its own PID namespace (then it may clean up with kill(-1))
    isolated = False

    def run(self, solution: str, tests: list[dict[str, Any]]) -> RunResult:
        timeouts = [float(t.get("timeout_s") or self.limits.timeout_s) for t in tests]
        run_s = min(self.limits.run_s, sum(timeouts) + 5.0)
        spec = {
            "tests": [dict(t, timeout_s=s) for t, s in zip(tests, timeouts, strict=True)],
            "timeout_s": self.limits.timeout_s,
            "run_s": run_s,
            "output_limit": self.limits.output_bytes,
            # a JSON-escaped stdout may be 6x its size: lines longer than this are dropped as garbage
            "line_limit": 8 * self.limits.output_bytes + (1 << 16),
            "own_pidns": self.isolated,
            "limits": {
                "as": self.limits.memory_mb << 20,
                "fsize": self.limits.file_size_mb << 20,
                "nproc": self.limits.processes,
            },
        }
        files = {"harness.py": _harness_source(), "solution.py": solution.encode("utf-8", "replace")}
        return self._launch(files, spec, run_s + 10.0)  # a safety net: the checker keeps its own deadlines

    def _launch(self, files: dict[str, bytes], spec: dict[str, Any], kill_after_s: float) -> RunResult:
        raise NotImplementedError

    def _prlimit(self) -> list[str]:
        """Outer rlimits of the sandbox, applied before exec (also set again inside by the stub)."""
        exe = shutil.which("prlimit")
        if exe is None:
            return []
        lim = self.limits
        cpu = math.ceil(lim.run_s) + 2
        return [
            exe,
            f"--cpu={cpu}",
            f"--as={lim.memory_mb << 20}",
            f"--fsize={lim.file_size_mb << 20}",
            "--core=0",
            "--",
        ]

    def _check(self, checker: list[str], spec: dict[str, Any], kill_after_s: float, pass_fds=()) -> RunResult:
        """Run the checker (``harness.py check``, outside the sandbox) on ``spec``; its report is the result."""
        kwargs: dict[str, Any] = {}
        if os.geteuid() == 0:  # never run model code as root: drop before exec (bwrap then maps 65534 -> 65534)
            kwargs.update(user=NOBODY, group=NOBODY, extra_groups=[])
        t0 = time.monotonic()
        cgroup = MemoryCgroup.create(self.limits.total_memory_mb << 20) if self.isolated else None
        try:
            result = self._check_in(cgroup, checker, spec, kill_after_s, pass_fds, kwargs)
        finally:
            if cgroup is not None:
                cgroup.close()
        return attrs.evolve(result, wall_s=time.monotonic() - t0)

    def _check_in(self, cgroup, checker, spec, kill_after_s, pass_fds, kwargs) -> RunResult:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [self.python, "-I", "-B", *checker, "check"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its process group (checker, prlimit, bwrap) is what a run timeout kills
            pass_fds=tuple(pass_fds),
            cwd="/",
            env={"PATH": "/usr/bin:/bin"},
            close_fds=True,
            **kwargs,
        )
        try:
            if cgroup is not None:  # before the checker reads its spec, so the sandbox starts inside the cgroup
                cgroup.add(proc.pid)
            out, err = proc.communicate(input=json.dumps(spec).encode(), timeout=kill_after_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out, err = proc.communicate()
            why = f"the sandbox exceeded its run time limit ({kill_after_s:.0f} s)"
            return RunResult([], error=why, wall_s=time.monotonic() - t0)
        finally:
            _kill_group(proc)  # nothing of this run may outlive it
            proc.wait()
            _reap_group_orphans(proc.pid)
        result = _parse_report(out, err, proc.returncode, time.monotonic() - t0)
        if cgroup is not None and cgroup.oom_kills():
            result = _memory_killed(result, self.limits.total_memory_mb)
        return result


@functools.cache
def _harness_source() -> bytes:
    return HARNESS.read_bytes()


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, 9)
    except (ProcessLookupError, PermissionError):
        pass


def _reap_group_orphans(pgid: int, deadline_s: float = 2.0) -> None:
    """Reap the killed group's processes that were re-parented to us.

    When the checker dies before its bwrap (``_kill_group`` kills them all at once, in no set order), that bwrap goes
    to the nearest subreaper; when that is this process, nobody else will wait for it and it stays a zombie. Its
    SIGKILL is already pending, so it is gone within moments; never block on it (WNOHANG, bounded by a deadline).
    """
    if not _we_reap_orphans():
        return
    end = time.monotonic() + deadline_s
    while True:
        try:
            pid, _ = os.waitpid(-pgid, os.WNOHANG)
        except ChildProcessError:  # no child of ours is left in the group
            return
        if pid == 0:  # some are still dying
            if time.monotonic() > end:
                return
            time.sleep(0.005)


def _parse_report(out: bytes, err: bytes, rc: int | None, wall_s: float) -> RunResult:
    """The checker's report: the last JSON line of its stdout (nothing in the sandbox can write there)."""
    lines = out.decode("utf-8", "replace").splitlines()
    try:
        report = json.loads(lines[-1]) if lines else None
    except ValueError:
        report = None
    if isinstance(report, dict) and isinstance(report.get("results"), list):
        error = report.get("error")
        if error and not report["results"]:
            error = f"the sandbox produced no result ({_last_line(err) or error})"
        return RunResult(report["results"], bool(report.get("syntax_error")), error, wall_s)
    why = _last_line(err) or f"exit status {rc}"
    return RunResult([], error=f"the sandbox produced no result ({why})", wall_s=wall_s)


def _memory_killed(result: RunResult, limit_mb: int) -> RunResult:
    """Name the cgroup's OOM kills in the failed tests' errors (the status stays what the checker saw)."""
    why = f"killed: the sandbox's memory limit ({limit_mb} MiB in all)"
    results = [dict(r, error=why) if r.get("status") != "ok" else r for r in result.results]
    return attrs.evolve(result, results=results, error=result.error and why)


def _last_line(err: bytes) -> str:
    lines = err.decode("utf-8", "replace").strip().splitlines()
    return lines[-1][:300] if lines else ""


@attrs.define
class BwrapRunner(Runner):
    """The real sandbox. See the module docstring for the exact isolation."""

    isolated = True

    def command(self, fds: dict[str, int], info_fd: int | None = None, seccomp_fd: int | None = None) -> list[str]:
        bwrap = find_bwrap()
        if bwrap is None:
            raise SandboxUnavailable("bubblewrap not available: no `bwrap` executable on PATH")
        cmd = [
            bwrap,
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
            "--uid", str(NOBODY),
            "--gid", str(NOBODY),
            "--ro-bind", "/usr", "/usr",
        ]
        cmd += _system_dirs()
        cmd += self._python_binds()
        cmd += ["--proc", "/proc", "--dev", "/dev"]
        cmd += ["--size", str(self.limits.tmp_mb << 20), "--tmpfs", "/tmp"]
        cmd += ["--tmpfs", "/sandbox"]
        for name, fd in fds.items():
            cmd += ["--ro-bind-data", str(fd), f"/sandbox/{name}"]
        cmd += ["--remount-ro", "/sandbox", "--remount-ro", "/dev", "--remount-ro", "/"]
        if info_fd is not None:
            cmd += ["--info-fd", str(info_fd)]
        if seccomp_fd is not None:
            cmd += ["--seccomp", str(seccomp_fd)]  # applied to the sandbox's first process, inherited by all
        cmd += ["--chdir", "/tmp", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp"]
        cmd += ["--", self.python, "-I", "-B", "/sandbox/harness.py", "stub", "/sandbox"]
        return cmd

    def _python_binds(self) -> list[str]:
        real = Path(self.python).resolve()
        if real.is_relative_to("/usr"):
            return []
        prefix = real.parent.parent  # <prefix>/bin/python3.x -> <prefix>
        return ["--ro-bind", str(prefix), str(prefix)]

    def _launch(self, files: dict[str, bytes], spec: dict[str, Any], kill_after_s: float) -> RunResult:
        fds = {name: _memfd(name, data) for name, data in files.items()}
        program = seccomp_program()
        seccomp_fd = _memfd("seccomp", program) if program else None
        info_r, info_w = os.pipe()
        try:
            cmd = self.command(fds, info_fd=info_w, seccomp_fd=seccomp_fd)
            spec = dict(spec, sandbox=self._prlimit() + cmd)
            spec["pass_fds"] = [*fds.values(), info_w, *([seccomp_fd] if seccomp_fd is not None else [])]
            checker = [f"/proc/self/fd/{fds['harness.py']}"]
            result = self._check(checker, spec, kill_after_s, pass_fds=spec["pass_fds"])
        finally:
            for fd in [*fds.values(), *([seccomp_fd] if seccomp_fd is not None else [])]:
                os.close(fd)
            os.close(info_w)
        _reap_namespace_init(info_r)
        return result


def _reap_namespace_init(info_r: int) -> None:
    """Reap bwrap's PID-namespace init if it was re-parented to us.

    bwrap's monitor exits as soon as it learns the exit status, before its child (the namespace's init) is reaped;
    that child goes to the nearest subreaper. When that is this process (PID 1 of a container, or a subreaper), we
    reap it by the pid bwrap reported on ``--info-fd``; otherwise the system's init does.
    """
    try:
        with os.fdopen(info_r, "rb") as f:
            info = json.loads(f.read().decode() or "{}")
        pid = int(info.get("child-pid", 0))
    except (OSError, ValueError, TypeError):
        return
    if pid > 0 and _we_reap_orphans():
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


@functools.cache
def _we_reap_orphans() -> bool:
    if os.getpid() == 1:
        return True
    try:
        import ctypes

        flag = ctypes.c_int(0)
        ctypes.CDLL(None, use_errno=True).prctl(37, ctypes.byref(flag), 0, 0, 0)  # PR_GET_CHILD_SUBREAPER
        return bool(flag.value)
    except (OSError, AttributeError):
        return False


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _system_dirs() -> list[str]:
    """``/bin``, ``/lib``... as on the host: a symlink stays a symlink (merged /usr), a directory is bound read-only."""
    args: list[str] = []
    for name in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(name):
            args += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            args += ["--ro-bind", name, name]
    return args


@attrs.define
class UnsafeRunner(Runner):
    """``unsafe_no_sandbox=True``: the same harness in a plain subprocess (temp dir, rlimits, dropped to uid 65534
    when root), WITHOUT namespaces. Only for users who already run inside a disposable container."""

    isolated = False

    def _launch(self, files: dict[str, bytes], spec: dict[str, Any], kill_after_s: float) -> RunResult:
        with tempfile.TemporaryDirectory(prefix="ragen-deepcoder-") as tmp:
            os.chmod(tmp, 0o755)
            for name, data in files.items():
                Path(tmp, name).write_bytes(data)
                os.chmod(Path(tmp, name), 0o644)
            work = Path(tmp, "work")
            work.mkdir()
            os.chmod(work, 0o777)
            harness = str(Path(tmp, "harness.py"))
            spec = dict(spec, sandbox=self._prlimit() + [self.python, "-I", "-B", harness, "stub", tmp], cwd=str(work))
            return self._check([harness], spec, kill_after_s)


def make_runner(python: str, limits: Limits, unsafe_no_sandbox: bool) -> Runner:
    """The bubblewrap runner, or a ``SandboxUnavailable`` naming why not; the unsafe runner only when asked for."""
    if unsafe_no_sandbox:
        log.warning(UNSAFE_WARNING)
        import warnings

        warnings.warn(UNSAFE_WARNING, RuntimeWarning, stacklevel=3)
        return UnsafeRunner(python=python, limits=limits)
    problem = sandbox_problem(python)
    if problem:
        raise SandboxUnavailable(
            f"{problem}. ragen-deepcoder refuses to run model-written code without a sandbox; set "
            "unsafe_no_sandbox=true only inside a disposable container"
        )
    return BwrapRunner(python=python, limits=limits)
