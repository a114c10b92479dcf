"""Confinement beyond bubblewrap's namespaces: a seccomp filter and a per-run memory cgroup.

* ``seccomp_program()`` — a classic-BPF filter for ``bwrap --seccomp FD``: ``EPERM`` for the syscalls that reach
  other processes (``ptrace``, ``process_vm_readv/writev``, ``pidfd_getfd``, ``kcmp``), that hold memory outside
  every rlimit (``memfd_create``, ``memfd_secret``, SysV ``shmget``), and kernel attack surface a test never needs
  (``bpf``, ``perf_event_open``, ``userfaultfd``, ``io_uring_*``, ``keyctl``/``add_key``/``request_key``); a foreign
  syscall ABI (i386 ``int 0x80``, x32) is refused too, so the filter cannot be bypassed through another table.
* ``MemoryCgroup`` — one memory cgroup per run when this process may create one (cgroup v2 with the memory
  controller delegated, or a writable cgroup v1 memory hierarchy): the limit covers every page the sandbox charges
  (anonymous, tmpfs and memfd pages, page tables, kernel memory the kernel accounts), summed over all its
  processes, and the kernel's OOM killer acts inside the cgroup only. Without one the fallback is the rlimits and
  the filter above (documented in docs/security.md).
"""

from __future__ import annotations

import errno
import os
import platform
import struct
import threading
import time
from pathlib import Path

# ---- seccomp ---------------------------------------------------------------------------------------------------------
_BPF_LD_W_ABS, _BPF_JEQ_K, _BPF_JGE_K, _BPF_RET_K = 0x20, 0x15, 0x35, 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_X32_BIT = 0x40000000

#: syscalls denied, by name; numbers per architecture below
DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
    "memfd_create", "memfd_secret", "shmget",
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "keyctl", "add_key", "request_key",
)  # fmt: skip
_ARCHES = {
    # AUDIT_ARCH value, syscall numbers (from the kernel's syscall tables)
    "x86_64": (0xC000003E, {
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_getfd": 438, "kcmp": 312,
        "memfd_create": 319, "memfd_secret": 447, "shmget": 29, "bpf": 321, "perf_event_open": 298,
        "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "keyctl": 250, "add_key": 248, "request_key": 249,
    }),
    "aarch64": (0xC00000B7, {
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "pidfd_getfd": 438, "kcmp": 272,
        "memfd_create": 279, "memfd_secret": 447, "shmget": 194, "bpf": 280, "perf_event_open": 241,
        "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "keyctl": 219, "add_key": 217, "request_key": 218,
    }),
}  # fmt: skip


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def seccomp_program(machine: str | None = None) -> bytes | None:
    """The filter as ``struct sock_filter[]`` bytes, or None on an architecture without a table here."""
    machine = machine or platform.machine()
    if machine not in _ARCHES:
        return None
    arch, numbers = _ARCHES[machine]
    deny = _RET_ERRNO | errno.EPERM
    nrs = [numbers[name] for name in DENIED]
    prog = [
        _insn(_BPF_LD_W_ABS, 4),  # seccomp_data.arch
        _insn(_BPF_JEQ_K, arch, jt=1),
        _insn(_BPF_RET_K, deny),  # another ABI (i386 on x86_64): refused
        _insn(_BPF_LD_W_ABS, 0),  # seccomp_data.nr
    ]
    if machine == "x86_64":
        prog += [_insn(_BPF_JGE_K, _X32_BIT, jt=0, jf=1), _insn(_BPF_RET_K, deny)]  # the x32 ABI
    for i, nr in enumerate(nrs):  # jump to the final "deny" when equal
        prog.append(_insn(_BPF_JEQ_K, nr, jt=len(nrs) - i, jf=0))
    prog += [_insn(_BPF_RET_K, _RET_ALLOW), _insn(_BPF_RET_K, deny)]
    return b"".join(prog)


# ---- memory cgroup ---------------------------------------------------------------------------------------------------
_counter_lock = threading.Lock()
_counter = [0]


def _own_cgroup_dirs() -> list[tuple[str, Path]]:
    """(version, directory) of this process's memory cgroup, v2 first."""
    out = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        _, controllers, path = line.split(":", 2)
        rel = path.lstrip("/")
        if controllers == "":
            for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
                if (root / "cgroup.controllers").exists():
                    out.insert(0, ("v2", root / rel))
                    break
        elif "memory" in controllers.split(","):
            out.append(("v1", Path("/sys/fs/cgroup/memory") / rel))
    return out


def cgroup_parent() -> tuple[str, Path] | None:
    """Where this process can create per-run memory cgroups, or None (then the rlimit fallback applies)."""
    for version, path in _own_cgroup_dirs():
        if version == "v2":
            enabled = path / "cgroup.subtree_control"
            try:
                usable = "memory" in enabled.read_text().split()
            except OSError:
                usable = False
        else:
            usable = (path / "memory.limit_in_bytes").exists()
        if usable and os.access(path, os.W_OK | os.X_OK):
            return version, path
    return None


class MemoryCgroup:
    """A memory cgroup for one run: ``add(pid)`` before the sandbox starts, ``close()`` after it ended."""

    def __init__(self, version: str, parent: Path, limit_bytes: int):
        with _counter_lock:
            _counter[0] += 1
            n = _counter[0]
        self.version = version
        self.path = parent / f"ragen-sandbox-{os.getpid()}-{n}"
        self.path.mkdir()
        try:
            if version == "v2":
                (self.path / "memory.max").write_text(str(limit_bytes))
                _try_write(self.path / "memory.swap.max", "0")
            else:
                (self.path / "memory.limit_in_bytes").write_text(str(limit_bytes))
                _try_write(self.path / "memory.memsw.limit_in_bytes", str(limit_bytes))  # no escape into swap
        except OSError:
            self.close()
            raise

    @classmethod
    def create(cls, limit_bytes: int) -> MemoryCgroup | None:
        parent = cgroup_parent()
        if parent is None:
            return None
        try:
            return cls(parent[0], parent[1], limit_bytes)
        except OSError:
            return None

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def oom_kills(self) -> int:
        name = "memory.events" if self.version == "v2" else "memory.oom_control"
        try:
            for line in (self.path / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def close(self) -> None:
        """Remove the cgroup (it empties as the killed sandbox's processes are reaped: retried briefly)."""
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)


def _try_write(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError:
        pass
