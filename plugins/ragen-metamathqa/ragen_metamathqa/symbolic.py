"""Symbolic answer equality in worker processes, with a timeout that works from any thread (spec §7, check (2)).

``math-verify`` (and sympy) can run for minutes or exhaust memory on short inputs such as ``9^{9^{9}}``, and
``math-verify``'s own timeouts use ``signal.alarm``, which only works in the main thread. So each check runs in a
separate interpreter spawned fresh (``python -P -c BOOT FILE BACKEND``, which loads this file alone: it never
re-imports the caller's ``__main__``, nor this package, whose ``import ragen`` costs seconds), talking JSON lines over
pipes. The caller waits on the pipe with ``select`` and a deadline; a worker that misses it is killed and replaced and
the answer counts as wrong. Workers are shared per process and reference-counted
(``acquire_pool`` / ``release_pool``); they also exit on their own when their parent goes away (stdin closes).

Backends: ``math_verify`` — ``verify(parse("$gold$"), parse("$pred$"))`` with math-verify's signal timeouts disabled;
``sympy`` — a whitelisted LaTeX/plain-text reading and ``simplify(gold - pred) == 0``. ``auto`` = math_verify when
importable, else sympy.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from pathlib import Path

BACKENDS = ("auto", "math_verify", "sympy")
STARTUP_TIMEOUT_S = 180.0  #: importing sympy on a loaded machine can take a while; checks are timed separately
WORKER_MEMORY_BYTES = 2 << 30  #: address-space cap of a worker, so a runaway power cannot take the machine down
#: CPU-seconds cap of a worker's whole life: a backstop for a check left running by a parent that died abruptly
#: (C-level big-integer work holds the GIL, so the parent watchdog cannot stop it); the pool retries a dead worker
WORKER_CPU_SECONDS = 900
CACHE_SIZE = 20_000  #: (backend, gold, pred) -> equal; GRPO groups repeat answers a lot


# ==== the worker side ================================================================================================
def _wrap(text: str) -> str:
    """Give math-verify a LaTeX environment unless the text already has one."""
    text = text.strip()
    if "$" in text or "\\boxed" in text or "\\(" in text or "\\[" in text:
        return text
    return f"${text}$"


def math_verify_equal(gold: str, pred: str) -> bool:
    from math_verify import parse, verify

    g = parse(_wrap(gold), parsing_timeout=None)
    p = parse(_wrap(pred), parsing_timeout=None)
    if not g or not p:
        return False
    return bool(verify(g, p, timeout_seconds=None))


# -- sympy backend: a small, whitelisted reading of LaTeX / plain expressions ----------------------------------------
_ALLOWED_NAMES = {"sqrt", "pi", "E", "exp", "log", "ln", "sin", "cos", "tan", "oo", "I"}
_LATEX = [
    ("\\left", ""),
    ("\\right", ""),
    ("\\!", ""),
    ("\\,", ""),
    ("\\;", ""),
    ("\\ ", ""),
    ("\\cdot", "*"),
    ("\\times", "*"),
    ("\\div", "/"),
    ("\\pi", "pi"),
    ("\\infty", "oo"),
    ("\\ln", "ln"),
    ("\\log", "log"),
    ("\\sin", "sin"),
    ("\\cos", "cos"),
    ("\\tan", "tan"),
    ("\\exp", "exp"),
    ("\\dfrac", "\\frac"),
    ("\\tfrac", "\\frac"),
    ("$", ""),
    ("^", "**"),
    ("\u2212", "-"),
    ("\u00d7", "*"),
    ("\u00f7", "/"),
    ("\u03c0", "pi"),
    ("\u221a", "sqrt"),
]


def _unbox(text: str) -> str:
    """``\\boxed{X}`` -> ``X`` when the box is the whole text (this module stays free of package imports)."""
    while text.startswith("\\boxed{") and text.endswith("}"):
        inner = _braced(text, len("\\boxed"))
        if inner is None or inner[1] != len(text):
            break
        text = inner[0].strip()
    return text


def _braced(text: str, i: int) -> tuple[str, int] | None:
    """The ``{...}`` group starting at ``text[i]`` and the index after it."""
    if i >= len(text) or text[i] != "{":
        return None
    depth = 0
    for j in range(i, len(text)):
        depth += text[j] == "{"
        depth -= text[j] == "}"
        if depth == 0:
            return text[i + 1 : j], j + 1
    return None


def latex_to_sympy_text(text: str) -> str | None:
    """``\\frac{a}{b}`` -> ``((a)/(b))``, ``\\sqrt{x}`` -> ``sqrt(x)``, ``\\sqrt[n]{x}``, braces -> parentheses.

    Returns None for anything outside a small whitelist (letters only as single-letter symbols or known functions),
    so sympy's ``parse_expr`` (which calls ``eval``) never sees attribute access, dunder names or calls it does not
    know.
    """
    s = _unbox(text.strip())
    for a, b in _LATEX:
        s = s.replace(a, b)
    out, i = [], 0
    while i < len(s):
        if s.startswith("\\frac", i):
            num = _braced(s, i + 5)
            den = _braced(s, num[1]) if num else None
            if not den:
                return None
            out.append(f"(({latex_to_sympy_text(num[0])})/({latex_to_sympy_text(den[0])}))")
            i = den[1]
        elif s.startswith("\\sqrt", i):
            j, root = i + 5, "2"
            if j < len(s) and s[j] == "[":
                k = s.find("]", j)
                if k < 0:
                    return None
                root, j = s[j + 1 : k], k + 1
            arg = _braced(s, j)
            if not arg:
                return None
            out.append(f"(({latex_to_sympy_text(arg[0])})**(1/({latex_to_sympy_text(root)})))")
            i = arg[1]
        elif s[i] == "\\":
            return None  # an unknown command
        else:
            out.append({"{": "(", "}": ")"}.get(s[i], s[i]))
            i += 1
    result = "".join(out)
    if "None" in result or not _whitelisted(result):
        return None
    return result


def _whitelisted(text: str) -> bool:
    import re

    if re.search(r"[^0-9A-Za-z_+\-*/().,\s]", text) or "__" in text or "." in re.sub(r"\d\.\d|\d\.|\.\d", "", text):
        return False
    return all(len(name) == 1 or name in _ALLOWED_NAMES for name in re.findall(r"[A-Za-z_]+", text))


def sympy_equal(gold: str, pred: str) -> bool:
    import sympy
    from sympy.parsing.sympy_parser import (
        convert_xor,
        implicit_multiplication_application,
        parse_expr,
        standard_transformations,
    )

    names = {n: getattr(sympy, n) for n in ("sqrt", "pi", "E", "exp", "log", "sin", "cos", "tan", "oo", "I")}
    names["ln"] = sympy.log
    base = {n: getattr(sympy, n) for n in ("Integer", "Float", "Rational", "Symbol", "Function")}
    transforms = (*standard_transformations, implicit_multiplication_application, convert_xor)

    def read(text: str):
        s = latex_to_sympy_text(text)
        if s is None or not s.strip():
            return None
        return parse_expr(
            s, local_dict=dict(names), global_dict={"__builtins__": {}, **base}, transformations=transforms
        )

    g, p = read(gold), read(pred)
    if g is None or p is None:
        return False
    return bool(sympy.simplify(g - p) == 0)


def _equal(backend: str, gold: str, pred: str) -> bool:
    try:
        return math_verify_equal(gold, pred) if backend == "math_verify" else sympy_equal(gold, pred)
    except Exception:  # an unreadable answer (or RecursionError on deep nesting) is simply not equal
        return False


def resolve_backend(backend: str) -> str:
    """``auto`` -> ``math_verify`` when it imports, else ``sympy``."""
    if backend != "auto":
        return backend
    try:
        import math_verify  # noqa: F401
    except ImportError:
        return "sympy"
    return "math_verify"


def _limit(name: str, soft: int) -> None:
    """Lower a resource's soft limit (kept when the hard limit is already lower, or off POSIX)."""
    try:
        import resource

        kind = getattr(resource, name)
        hard = resource.getrlimit(kind)[1]
        if hard == resource.RLIM_INFINITY or hard >= soft:
            resource.setrlimit(kind, (soft, hard))
    except (ImportError, AttributeError, ValueError, OSError):  # pragma: no cover
        pass


def _watch_parent() -> None:
    """Exit when the parent dies, even in the middle of a long check (closed stdin is only seen between checks)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def worker_main(argv: list[str]) -> int:
    """Serve ``{"gold", "pred"}`` lines with ``{"equal"}`` lines until stdin closes."""
    import logging

    _limit("RLIMIT_AS", WORKER_MEMORY_BYTES)
    _limit("RLIMIT_CPU", WORKER_CPU_SECONDS)
    _watch_parent()
    logging.disable(logging.WARNING)  # math-verify warns that its (signal) timeouts are off: we time it from outside
    backend = argv[0] if argv else "auto"
    try:
        backend = resolve_backend(backend)
        import sympy  # noqa: F401

        if backend == "math_verify":
            import math_verify  # noqa: F401
    except Exception as exc:
        print(json.dumps({"ready": False, "error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 1
    # warm up (lazy imports, the LaTeX grammar) before saying ready, so a check's deadline times the check alone
    _equal(backend, "\\frac{1}{2}", "x+1")
    print(json.dumps({"ready": True, "backend": backend}), flush=True)
    for line in sys.stdin:
        try:
            req = json.loads(line)
            equal = _equal(backend, str(req["gold"]), str(req["pred"]))
        except MemoryError:
            equal = False
        except Exception:
            equal = False
        print(json.dumps({"equal": equal}), flush=True)
    return 0


# ==== the caller side ================================================================================================
class WorkerError(RuntimeError):
    """A worker could not start (its backend does not import)."""


#: loads this file under a private name and serves: argv = [file, backend]
_BOOT = (
    "import importlib.util, sys\n"
    "spec = importlib.util.spec_from_file_location('_ragen_metamathqa_symbolic', sys.argv[1])\n"
    "mod = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(mod)\n"
    "sys.exit(mod.worker_main(sys.argv[2:]))\n"
)


class _Worker:
    """One worker process and the line buffer of its stdout."""

    def __init__(self, backend: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-c", _BOOT, str(Path(__file__).resolve()), backend],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )
        self._buf = b""
        self.died = False
        hello = self.read_line(STARTUP_TIMEOUT_S)
        if not hello or not hello.get("ready"):
            self.kill()
            why = hello.get("error") if hello else "no answer"
            raise WorkerError(f"the symbolic checker ({backend}) did not start: {why}")
        self.backend = hello["backend"]

    def read_line(self, timeout: float) -> dict | None:
        """The next JSON line, or None at the deadline or when the worker died (``self.died`` tells which)."""
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                self.died = True  # EOF: killed by its CPU limit, the OOM killer...
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def ask(self, gold: str, pred: str, timeout: float) -> bool | None:
        """True/False, or None when the worker missed the deadline or died (it must then be killed)."""
        try:
            self.proc.stdin.write((json.dumps({"gold": gold, "pred": pred}) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self.died = True
            return None
        reply = self.read_line(timeout)
        return None if reply is None else bool(reply.get("equal"))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:  # pragma: no cover
                pass


class SymbolicPool:
    """Up to ``size`` checks at a time; ``equal(gold, pred, timeout)`` is thread-safe.

    Workers start lazily; the first start is not part of a check's time (importing sympy takes seconds). Once warm,
    the pool keeps ``size + 1`` workers (one standby): a worker killed for a timeout is replaced at once by an idle
    one while its successor starts in the background, so no answer ever waits for a start-up, and one answer never
    costs more than its timeout (waiting for a worker included)."""

    def __init__(self, backend: str = "auto", size: int = 2):
        self.backend = resolve_backend(backend)
        self.size = max(1, int(size))
        self._idle: list[_Worker] = []
        self._started = 0  #: workers alive or starting
        self._warm = False  #: a worker has started once: from now on nothing waits for a start-up
        self._cond = threading.Condition()
        self._cache: OrderedDict[tuple[str, str], bool] = OrderedDict()
        self._closed = False
        self.timeouts = 0  #: checks that missed their deadline (their worker was killed and replaced)
        self.restarts = 0

    def _take(self, deadline: float, timeout: float) -> tuple[_Worker | None, bool]:
        """(an idle worker, whether the check's clock restarts); (None, False) when none is free by ``deadline``.

        While the pool is cold (no worker ever started) a check waits for the start-up, and its ``timeout`` counts
        from when the pool is warm; once warm, it waits at most until ``deadline``."""
        cold = False
        with self._cond:
            while True:
                if self._closed:
                    raise RuntimeError("the symbolic checker pool is closed")
                if self._idle:
                    return self._idle.pop(), cold
                if not self._warm and self._started < self.size:
                    self._started += 1
                    break
                if not self._warm:
                    cold = True
                    self._cond.wait()
                    continue
                if cold:  # the pool warmed up while we waited: this check's time starts now
                    deadline = time.monotonic() + timeout
                self._top_up()
                left = deadline - time.monotonic()
                if left <= 0:
                    return None, False
                self._cond.wait(left)
        try:
            worker = _Worker(self.backend)  # the cold start, outside the lock: other threads keep using idle workers
        except BaseException:
            with self._cond:
                self._started -= 1
                self._cond.notify()
            raise
        with self._cond:
            self._warm = True
            self._top_up()
            self._cond.notify_all()  # checks waiting for the first start-up
        return worker, True

    def _top_up(self) -> None:
        """Start (in the background) the workers a warm pool is missing: ``size`` plus one standby. Holds the lock."""
        while self._warm and not self._closed and self._started < self.size + 1:
            self._started += 1
            threading.Thread(target=self._start_in_background, name="symbolic-worker-start", daemon=True).start()

    def _start_in_background(self) -> None:
        try:
            worker = _Worker(self.backend)
        except BaseException:  # the backend stopped importing (or the machine is out of memory): a later top-up retries
            with self._cond:
                self._started -= 1
                self._cond.notify_all()
            return
        with self._cond:
            if not self._closed:
                self._idle.append(worker)
                self._cond.notify_all()
                return
            self._started -= 1
        worker.kill()

    def _give_back(self, worker: _Worker, healthy: bool) -> None:
        with self._cond:
            if healthy and not self._closed:
                self._idle.append(worker)
            else:
                self._started -= 1
                self._top_up()  # its successor starts now, not when the next check needs it
            self._cond.notify()
        if not healthy or self._closed:
            worker.kill()

    def equal(self, gold: str, pred: str, timeout: float) -> bool | None:
        """Symbolic equality; None when the check ran out of time (the answer then counts as wrong)."""
        key = (gold, pred)
        with self._cond:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        deadline = time.monotonic() + timeout
        result = None
        for _ in range(2):  # a worker that died (rather than ran late) gets one retry on another, in the same time
            worker, restart_clock = self._take(deadline, timeout)
            if worker is None:
                break
            if restart_clock:  # the first start-up is not part of the check's time
                deadline = time.monotonic() + timeout
            result = worker.ask(gold, pred, max(0.0, deadline - time.monotonic()))
            self._give_back(worker, healthy=result is not None)
            if result is not None or not worker.died or time.monotonic() >= deadline:
                break
        if result is None:
            with self._cond:
                self.timeouts += 1
                self.restarts += 1
            return None
        with self._cond:
            self._cache[key] = result
            if len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return result

    @property
    def live_workers(self) -> list[int]:
        """PIDs of the idle workers (for tests and diagnostics)."""
        with self._cond:
            return [w.proc.pid for w in self._idle]

    def close(self) -> None:
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._started -= len(idle)
            self._cond.notify_all()
        for worker in idle:
            worker.kill()


# ---- one pool per (backend, size) per process, reference-counted --------------------------------------------------
_POOLS: dict[tuple[str, int], list] = {}  # key -> [pool, refcount]
_POOLS_LOCK = threading.Lock()


def acquire_pool(backend: str = "auto", size: int = 2) -> SymbolicPool:
    """The shared pool for this backend and size (no process starts until the first check)."""
    key = (resolve_backend(backend), max(1, int(size)))
    with _POOLS_LOCK:
        entry = _POOLS.get(key)
        if entry is None:
            entry = _POOLS[key] = [SymbolicPool(*key), 0]
        entry[1] += 1
        return entry[0]


def release_pool(pool: SymbolicPool) -> None:
    """Drop one reference; the last one stops the workers."""
    with _POOLS_LOCK:
        key = (pool.backend, pool.size)
        entry = _POOLS.get(key)
        if entry is None or entry[0] is not pool:
            return
        entry[1] -= 1
        if entry[1] > 0:
            return
        del _POOLS[key]
    pool.close()


@atexit.register
def _shutdown() -> None:
    with _POOLS_LOCK:
        pools = [entry[0] for entry in _POOLS.values()]
        _POOLS.clear()
    for pool in pools:
        pool.close()
