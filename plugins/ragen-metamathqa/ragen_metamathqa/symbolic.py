"""Symbolic answer equality in worker processes, with a timeout that works from any thread (spec §7, check (2)).

``math-verify`` (and sympy) can run for minutes or exhaust memory on short inputs such as ``9^{9^{9}}``, and
``math-verify``'s own timeouts use ``signal.alarm``, which only works in the main thread. So each check runs in a
separate interpreter spawned fresh (``python -P -c BOOT FILE BACKEND``, which loads this file alone: it never
re-imports the caller's ``__main__``, nor this package, whose ``import ragen`` costs seconds), talking JSON lines over
pipes. The caller waits on the pipe with ``select`` and a deadline; a worker that misses it is killed and replaced and
the answer counts as wrong. Workers are shared per process and reference-counted
(``acquire_pool`` / ``release_pool``); they also exit on their own when their parent goes away (stdin closes).

A check is staged (``staged_check``): within a short budget (a tenth of the timeout by default) both answers are
read and compared by value at two points; different values are "not equal" at once, and only an answer numerically
equal to the gold earns the full timeout for the simplifying check. The worker stops itself with its own alarm (it is
its process's main thread), so a check that runs out of time costs no restart.

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
#: seconds a staged check's worker may overrun its own alarm before it is killed (the alarm fires between bytecodes)
ALARM_GRACE_S = 0.25
#: the parent's wall-clock deadline of a staged check's first stage, in multiples of its CPU budget: the worker stops
#: itself after ``quick`` CPU seconds, which a busy machine stretches; only a worker stuck in one long C call (which
#: the alarm cannot interrupt) reaches this and is killed
QUICK_WALL_FACTOR = 4.0


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


def _sympy_read(text: str):
    """The whitelisted reading of ``text`` as a sympy expression, or None."""
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
    s = latex_to_sympy_text(text)
    if s is None or not s.strip():
        return None
    return parse_expr(s, local_dict=dict(names), global_dict={"__builtins__": {}, **base}, transformations=transforms)


def sympy_equal(gold: str, pred: str) -> bool:
    import sympy

    g, p = _sympy_read(gold), _sympy_read(pred)
    if g is None or p is None:
        return False
    return bool(sympy.simplify(g - p) == 0)


def _equal(backend: str, gold: str, pred: str) -> bool:
    try:
        return math_verify_equal(gold, pred) if backend == "math_verify" else sympy_equal(gold, pred)
    except Exception:  # an unreadable answer (or RecursionError on deep nesting) is simply not equal
        return False


# -- the staged check: a numeric probe first, the full (simplifying) check only for an answer that passes it ---------
class _OutOfTime(BaseException):
    """Raised in a worker by its own alarm. A BaseException, so that no solver's ``except Exception`` swallows it."""


class _Alarm:
    """``with _Alarm(seconds):`` raises ``_OutOfTime`` in this (the worker's main) thread once the worker has used
    ``seconds`` of CPU time. CPU time, not wall time: on a busy machine a check gets the same work done before it is
    stopped, so a verdict does not depend on the load (a wall-clock alarm stopped correct answers, and the workers it
    left to the parent's kill took seconds each to replace). Python runs the handler between bytecodes, so pure-Python
    solver work stops on time; a long C call (a huge integer power) is stopped by the parent's wall-clock deadline,
    which kills the worker."""

    def __init__(self, seconds: float):
        self.seconds = max(float(seconds), 0.001)

    def __enter__(self) -> None:
        import signal

        def fire(signum, frame):
            raise _OutOfTime()

        self._previous = signal.signal(signal.SIGPROF, fire)
        signal.setitimer(signal.ITIMER_PROF, self.seconds)

    def __exit__(self, *exc) -> None:
        import signal

        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, self._previous)


#: the values the probe gives the answers' symbols (by the sorted position of their names in both answers), at two
#: points: irrational-looking, away from 0, 1 and the integers where poles and special cases sit
PROBE_POINTS = ((0.3183098862, 1.6180339887, 2.2360679775, 0.7071067812, 1.2020569032, 2.6651441427),
                (1.3247179572, 0.5772156649, 1.4142135624, 2.7182818285, 0.9159655942, 1.7320508076))
#: relative difference beyond which two values are different numbers: far looser than any checker's own tolerance
#: (math-verify rounds to 6 decimals), so an answer a checker would call equal is never refused by the probe
PROBE_TOLERANCE = 1e-4


def _parse(backend: str, gold: str, pred: str) -> tuple[list, list]:
    """Both answers as the backend reads them: math-verify's candidate lists, or one sympy expression each."""
    if backend == "math_verify":
        from math_verify import parse

        g = list(parse(_wrap(gold), parsing_timeout=None) or [])
        return g, list(parse(_wrap(pred), parsing_timeout=None) or [])
    return [x for x in (_sympy_read(gold),) if x is not None], [x for x in (_sympy_read(pred),) if x is not None]


def _verify(backend: str, g: list, p: list) -> bool:
    if not g or not p:
        return False
    if backend == "math_verify":
        from math_verify import verify

        return bool(verify(g, p, timeout_seconds=None))
    import sympy

    return bool(sympy.simplify(g[0] - p[0]) == 0)


def _values(expr, names: list[str]) -> list[complex] | None:
    """``expr`` evaluated at the probe points (15 digits), or None when it has no finite number there."""
    out = []
    for point in PROBE_POINTS:
        subs = {s: point[names.index(s.name)] for s in expr.free_symbols}
        value = complex(expr.evalf(15, subs=subs))
        if not (abs(value.real) < 1e300 and abs(value.imag) < 1e300):
            return None
        out.append(value)
    return out


def _probe(g: list, p: list) -> str | None:
    """"differ" when the two answers are different numbers at the probe points (every pair of the readings of both),
    "close" when some pair agrees at every point, None when the probe cannot tell (a set, an interval, an equation,
    text, too many symbols, a value it cannot compute): then the full check decides."""
    import sympy

    if any(isinstance(a, str) and a in [b for b in p if isinstance(b, str)] for a in g):
        return None  # the same text: the checker says equal at once
    ge = [x for x in g if not isinstance(x, str)]
    pe = [x for x in p if not isinstance(x, str)]
    if not ge or not pe or not all(isinstance(x, sympy.Expr) for x in (*ge, *pe)):
        return None
    names = sorted({s.name for x in (*ge, *pe) for s in x.free_symbols})
    if len(names) > len(PROBE_POINTS[0]):
        return None
    try:
        gv = [_values(x, names) for x in ge]
        pv = [_values(x, names) for x in pe]
    except Exception:  # noqa: BLE001 - not a number (an unevaluated integral or sum), a failed evaluation
        return None
    if any(v is None for v in (*gv, *pv)):
        return None
    close = any(all(abs(a - b) <= PROBE_TOLERANCE * max(1.0, abs(a), abs(b)) for a, b in zip(x, y))
                for x in gv for y in pv)
    return "close" if close else "differ"


def staged_check(backend: str, gold: str, pred: str, quick_s: float, full_s: float, emit) -> None:
    """One staged check, answered with ``emit(dict)``: within ``quick_s`` the answers are read and probed numerically;
    different numbers are answered ``{"equal": false}`` at once; answers the probe cannot tell apart are checked in
    full within the same ``quick_s``; only an answer numerically equal to the gold earns the full check, announced by
    ``{"stage": "close"}`` and given ``full_s`` in all. Out of time: ``{"equal": false, "timeout": true}``.

    Why: an answer that is not equal to the gold is cheap to tell from it by value, and crafted answers that a
    simplifier spends its whole budget on (``\\sin(x+1)^{4}``, ``\\Gamma(10^{9})``, ``\\int x^{100} \\sin x dx``, 39
    nested roots) are, so each cost the full timeout on every call; no list of forms bounds them all."""
    start = time.process_time()
    verdict: dict = {"equal": False}
    try:
        with _Alarm(quick_s):
            g, p = _parse(backend, gold, pred)
            probe = _probe(g, p) if g and p else "differ"
            if probe is None:
                verdict = {"equal": _verify(backend, g, p)}
        if probe == "close":
            emit({"stage": "close"})
            with _Alarm(full_s - (time.process_time() - start)):
                verdict = {"equal": _verify(backend, g, p)}
    except _OutOfTime:
        verdict = {"equal": False, "timeout": True}
    except Exception:  # noqa: BLE001 - an unreadable answer (or RecursionError on deep nesting) is simply not equal
        verdict = {"equal": False}
    emit(verdict)


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
    def emit(answer: dict) -> None:
        print(json.dumps(answer), flush=True)

    for line in sys.stdin:
        try:
            req = json.loads(line)
            if req.get("quick") is not None:  # the staged check (``SymbolicPool.equal`` with ``quick``)
                staged_check(backend, str(req["gold"]), str(req["pred"]), float(req["quick"]), float(req["full"]),
                             emit)
                continue
            equal = _equal(backend, str(req["gold"]), str(req["pred"]))
        except MemoryError:
            equal = False
        except Exception:
            equal = False
        emit({"equal": equal})
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

    def ask(self, gold: str, pred: str, timeout: float, quick: float | None = None) -> tuple[bool | None, bool]:
        """(True/False, whether the worker ran out of its own time); (None, False) when the worker missed the deadline
        or died (it must then be killed). With ``quick``, the staged check (``staged_check``): ``quick`` seconds, and
        ``timeout`` in all only for an answer numerically equal to the gold; the worker stops itself after that much
        CPU time, and is killed at a wall-clock deadline if it could not (a long C call)."""
        request = {"gold": gold, "pred": pred}
        if quick is not None:
            request.update(quick=quick, full=timeout)
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self.died = True
            return None, False
        start = time.monotonic()
        if quick is None:
            reply = self.read_line(timeout)
        else:
            reply = self.read_line(min(QUICK_WALL_FACTOR * quick, timeout) + ALARM_GRACE_S)
            if reply is not None and reply.get("stage") == "close":
                reply = self.read_line(max(0.0, start + timeout + ALARM_GRACE_S - time.monotonic()))
        if reply is None:
            return None, False
        return bool(reply.get("equal")), bool(reply.get("timeout"))

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

    def equal(self, gold: str, pred: str, timeout: float, quick: float | None = None) -> bool | None:
        """Symbolic equality; None when the check ran out of time (the answer then counts as wrong).

        ``quick`` (seconds): the staged check (``staged_check``), in which only an answer numerically equal to the
        gold gets ``timeout``; the check's own time starts when a worker takes it (waiting for a free one counts
        against ``timeout``, not against the answer's ``quick``). None: one check of up to ``timeout``."""
        key = (gold, pred)
        with self._cond:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        deadline = time.monotonic() + timeout
        result, out_of_time = None, False
        for _ in range(2):  # a worker that died (rather than ran late) gets one retry on another, in the same time
            worker, restart_clock = self._take(deadline, timeout)
            if worker is None:
                break
            if restart_clock:  # the first start-up is not part of the check's time
                deadline = time.monotonic() + timeout
            left = max(0.0, deadline - time.monotonic())
            if quick is not None:  # the staged check's own clock: from now, full time for a numerically equal answer
                left = timeout
            result, out_of_time = worker.ask(gold, pred, left, None if quick is None else min(quick, left))
            self._give_back(worker, healthy=result is not None)
            if result is not None or not worker.died or time.monotonic() >= deadline:
                break
        if out_of_time:  # the worker stopped itself on time: it keeps serving
            with self._cond:
                self.timeouts += 1
            return None
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
    def warm(self) -> bool:
        """Whether a worker has started once (a check on a cold pool first waits for a start-up)."""
        return self._warm

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
