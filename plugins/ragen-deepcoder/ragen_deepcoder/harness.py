"""The test harness (stdlib only, Python >= 3.8), in two roles that never share a process:

``python -I -B harness.py check`` — the CHECKER, trusted, outside the sandbox. The trainer starts it with the run's
spec on stdin (tests with their assert code, the problem's prelude, the sandbox's command line); it starts the
sandbox, drives it test by test, computes every assert verdict itself and prints one JSON report on its stdout, which
nothing in the sandbox can reach (own PID namespace: the checker is neither visible nor signalable from inside).

``python -I -B harness.py stub DIR`` — the STUB, untrusted, inside the sandbox (``DIR`` holds ``solution.py``). It
compiles the solution once and, per test, forks a child that runs the program: stdio tests return the raw stdout,
functional tests the return value, assert tests serve calls (``fn(*args)``) from the checker. Everything the stub
and its children send is data the candidate could have chosen anyway (its output, its return values): the checker
decodes it into plain built-in values (no objects with a forged ``__eq__``), and the verdicts come from comparisons
made outside — stdio and functional ones by the trainer (``code.py``), assert ones by the checker running the test
code with the candidate's functions replaced by remote calls (a call an assert tests for bare truth, ``assert f(x)`` /
``assert not f(x)``, passes only with a real bool: ``_truth_tested``). Expected outputs and assert code never enter the
sandbox, there is no token or result record to forge, and a stub that stops answering only loses its remaining tests
(the checker enforces every deadline and kills the sandbox).

Wire format: one JSON object per line. Values cross as tagged JSON (``_encode``/``_decode``): str, int, float, bool,
None, and ``{"t": tag, "v": ...}`` for tuple, list, dict, set, frozenset, bytes, complex and non-finite floats.
"""

import ast
import builtins
import io
import json
import math
import os
import resource
import select
import signal
import subprocess
import sys
import time

#: programs under test run at a lower priority than the stub, so a fork bomb cannot starve it (or the host)
CHILD_NICE = 10
#: a test's wall timeout plus this is the checker's own deadline for the stub's answer
GRACE_S = 2.0
#: how deep a value may nest on the wire (deeper is an error, not a RecursionError)
MAX_DEPTH = 100
#: most values (items, keys, containers) one message may decode to; more is an error
MAX_ELEMENTS = 1_000_000
#: most different values of one message that may share a hash: ints that differ by multiples of 2**61 - 1 all hash
#: alike, and a set of 100,000 of them costs a hash table 5e9 comparisons; with this bound every set or dict built from
#: the message (by the decoder, or by the test code: ``set(f(x))``) stays linear
MAX_SAME_HASH = 16


# ---- values on the wire ---------------------------------------------------------------------------------------------
def _encode(value, depth=0):
    """A JSON-ready, tagged form of a plain value; TypeError for anything else (objects, functions, generators)."""
    if depth > MAX_DEPTH:
        raise TypeError("value nested too deeply")
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return value if math.isfinite(value) else {"t": "float", "v": repr(value)}
    if kind in (list, tuple, set, frozenset):
        items = [_encode(v, depth + 1) for v in value]
        return items if kind is list else {"t": kind.__name__, "v": items}
    if kind is dict:
        return {"t": "dict", "v": [[_encode(k, depth + 1), _encode(v, depth + 1)] for k, v in value.items()]}
    if kind is bytes:
        return {"t": "bytes", "v": value.hex()}
    if kind is complex:
        return {"t": "complex", "v": [_encode(value.real), _encode(value.imag)]}
    raise TypeError(f"value of type {kind.__name__} cannot be passed (only plain built-in values)")


_TAGS = {"tuple": tuple, "set": set, "frozenset": frozenset}


def _decode(data, deadline=None, budget=MAX_ELEMENTS):
    """The plain value ``data`` encodes; ValueError for anything malformed. Only built-in types come out.

    The data comes from the candidate, and the checker decodes it outside the sandbox: it may hold at most ``budget``
    values, must be decoded by ``deadline`` (a monotonic time, checked per container) and may not hold more than
    ``MAX_SAME_HASH`` different values sharing one hash (checked before any set or dict is built, and over the whole
    value for what the test code may put in a set), so no value costs the checker more than linear time."""
    decoder = _Decoder(deadline, budget)
    decoder.tick(1)
    value = decoder.decode(data, 0)
    decoder.check_hashes(decoder.hashed)
    return value


#: ints strictly inside (-_HASH_MODULUS, _HASH_MODULUS) hash to themselves (-1 to -2): only bigger ones can collide
_HASH_MODULUS = (1 << 61) - 1 if sys.hash_info.width == 64 else (1 << 31) - 1
#: types whose hash the candidate controls (str and bytes hashes are salted per process)
_HASH_CHOSEN = (int, float, complex, tuple, frozenset)


class _Decoder:
    """One value's decoding: its element budget, deadline and the values whose hashes the candidate chose."""

    def __init__(self, deadline, budget):
        self.deadline, self.left = deadline, budget
        self.hashed = []  #: decoded numbers that may share a hash (big ints, floats...), tuples and frozensets

    def tick(self, n):
        """Count ``n`` more values against the budget; check the deadline."""
        self.left -= n
        if self.left < 0:
            raise ValueError("value too large (more than %d elements)" % MAX_ELEMENTS)
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise ValueError("value took too long to decode")

    def decode(self, data, depth):
        """``data``, already counted by its container."""
        if depth > MAX_DEPTH:
            raise ValueError("value nested too deeply")
        kind = type(data)
        if data is None or kind is bool or kind is str:
            return data
        if kind is int or kind is float:
            self._number(data)
            return data
        if kind is list:
            return self.items(data, depth)
        if kind is not dict or set(data) != {"t", "v"}:
            raise ValueError("malformed value")
        value = self._tagged(data["t"], data["v"], depth)
        if type(value) in (complex, tuple, frozenset):
            self.hashed.append(value)
        return value

    def _number(self, v):
        if type(v) is float or not -_HASH_MODULUS < v < _HASH_MODULUS:
            self.hashed.append(v)

    def items(self, raw, depth):
        """The decoded items of a list (a flat list of scalars takes the fast loop)."""
        self.tick(len(raw))
        out = []
        for v in raw:
            kind = type(v)
            if kind is int or kind is float:
                self._number(v)
                out.append(v)
            elif v is None or kind is str or kind is bool:
                out.append(v)
            else:
                out.append(self.decode(v, depth + 1))
        return out

    def _tagged(self, tag, raw, depth):
        if tag in _TAGS and type(raw) is list:
            items = self.items(raw, depth)
            if tag != "tuple":
                self.check_hashes(items)
            return _TAGS[tag](items)
        if tag == "dict" and type(raw) is list and all(type(p) is list and len(p) == 2 for p in raw):
            self.tick(2 * len(raw))
            pairs = [(self.decode(k, depth + 1), self.decode(v, depth + 1)) for k, v in raw]
            self.check_hashes([k for k, _ in pairs])
            return dict(pairs)
        if tag == "bytes" and type(raw) is str:
            return bytes.fromhex(raw)
        if tag == "complex" and type(raw) is list and len(raw) == 2:
            self.tick(2)
            return complex(float(self.decode(raw[0], depth + 1)), float(self.decode(raw[1], depth + 1)))
        if tag == "float" and raw in ("nan", "inf", "-inf"):
            return float(raw)
        raise ValueError(f"malformed value tagged {str(tag)[:20]!r}")

    def check_hashes(self, values):
        """ValueError when more than ``MAX_SAME_HASH`` different values share a hash (unhashable values and NaNs are
        skipped). Found by sorting the hashes, not by a hash table: O(n log n + n * MAX_SAME_HASH), never quadratic."""
        hashed, hashes = [], []
        for v in values:
            if type(v) in _HASH_CHOSEN and v == v:
                try:
                    hashes.append(hash(v))
                except TypeError:  # a tuple holding a list
                    continue
                hashed.append(v)
        # fast path: fewer repeated hashes than the bound (a set of hash values is safe: they are distinct ints)
        if len(hashes) - len(set(hashes)) < MAX_SAME_HASH:
            return
        order = sorted(range(len(hashes)), key=hashes.__getitem__)
        start = 0
        while start < len(order):
            end, h = start, hashes[order[start]]
            while end < len(order) and hashes[order[end]] == h:
                end += 1
            if end - start > MAX_SAME_HASH:
                distinct = []
                for i in order[start:end]:
                    if not any(hashed[i] == d for d in distinct):
                        distinct.append(hashed[i])
                        if len(distinct) > MAX_SAME_HASH:
                            raise ValueError("value with more than %d different items of one hash" % MAX_SAME_HASH)
                self.tick(0)
            start = end


def _json_normal(value, depth=0):
    """The JSON form the trainer compares functional results in: tuples -> lists, dict keys -> str; else TypeError."""
    if depth > MAX_DEPTH:
        raise TypeError("return value nested too deeply")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_json_normal(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {k if isinstance(k, str) else str(k): _json_normal(v, depth + 1) for k, v in value.items()}
    raise TypeError(f"return value of type {type(value).__name__} is not JSON-serializable")


# ---- line channel ---------------------------------------------------------------------------------------------------
class _Lines:
    """JSON-object lines from a file descriptor, each line capped in size (longer ones are dropped whole)."""

    def __init__(self, fd, limit):
        self.fd, self.limit, self.buf, self.eof, self.skipping = fd, limit, b"", False, False

    def fill(self):
        """One read (call when the fd is readable)."""
        data = os.read(self.fd, 1 << 16)
        if not data:
            self.eof = True
            return
        if self.skipping:  # inside an over-long line: drop up to its end
            if b"\n" not in data:
                return
            data, self.skipping = data.split(b"\n", 1)[1], False
        self.buf += data
        if len(self.buf) > self.limit and b"\n" not in self.buf:
            self.buf, self.skipping = b"", True

    def pop(self):
        """The next buffered JSON object (other lines are skipped); None when no whole line is buffered."""
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            try:
                msg = json.loads(line.decode("utf-8", "replace"))
            except (ValueError, RecursionError):
                continue
            if isinstance(msg, dict):
                return msg
        return None

    def message(self, deadline=None):
        return _next_message([self], deadline)[1]


def _next_message(readers, deadline=None):
    """(reader, message) of the first JSON object from any of ``readers``; (None, None) once ``deadline`` (a
    monotonic time) has passed or every reader is at end of file."""
    while True:
        for reader in readers:
            msg = reader.pop()
            if msg is not None:
                return reader, msg
        live = [r for r in readers if not r.eof]
        wait = None if deadline is None else deadline - time.monotonic()
        if not live or (wait is not None and wait <= 0):
            return None, None
        for fd in select.select([r.fd for r in live], [], [], wait)[0]:
            next(r for r in live if r.fd == fd).fill()


def _send(fd, obj):
    _send_bytes(fd, json.dumps(obj) + "\n")


def _send_bytes(fd, text):
    view = memoryview(text.encode("utf-8"))
    while view:
        view = view[os.write(fd, view):]


def _short(text, limit=500):
    text = str(text)
    return text if len(text) <= limit else text[:limit] + "..."


# =====================================================================================================================
# The stub: inside the sandbox, untrusted
# =====================================================================================================================
def _prctl_not_dumpable():
    """Make /proc/<stub>/{mem,fd,environ} inaccessible to the (same-uid) programs under test."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:
        pass


def _set_limit(name, value):
    res = getattr(resource, name, None)
    if res is None or value is None:
        return
    try:
        resource.setrlimit(res, (value, value))
    except (ValueError, OSError):
        # the hard limit may already be lower (set outside the sandbox); keep the lower one
        soft, hard = resource.getrlimit(res)
        if hard == resource.RLIM_INFINITY or value < hard:
            try:
                resource.setrlimit(res, (min(value, hard), hard))
            except (ValueError, OSError):
                pass


def _close_other_fds(keep):
    try:
        fds = [int(x) for x in os.listdir("/proc/self/fd")]
    except OSError:
        fds = range(3, 256)
    for fd in fds:
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _stdin_fd(text):
    """A readable fd holding ``text``: an unlinked file in /tmp (memfd_create is denied by the seccomp filter)."""
    if text is None:
        return os.open("/dev/null", os.O_RDONLY)
    path = f"/tmp/.stdin-{os.getpid()}-{time.monotonic_ns()}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.unlink(path)
    view = memoryview(text.encode("utf-8"))
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, 0)
    return fd


def _child_setup(test, stdin_fd, out_fd, keep):
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    _set_limit("RLIMIT_CPU", int(test["cpu_s"]))
    try:
        os.nice(CHILD_NICE)
    except OSError:
        pass
    os.dup2(stdin_fd, 0)
    os.dup2(out_fd, 1)
    os.dup2(os.open("/dev/null", os.O_WRONLY), 2)
    _close_other_fds(keep)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8", errors="replace")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="replace")
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="replace")


def _exec_solution(code, kind):
    """Run the program; a SystemExit(0) of a stdio program is its normal end. Returns the namespace."""
    ns = {"__name__": "__main__" if kind == "stdio" else "solution", "__builtins__": builtins}
    try:
        exec(code, ns)
    except SystemExit as e:
        if kind != "stdio" or e.code not in (None, 0):
            raise
    return ns


def _error(e):
    if isinstance(e, SystemExit):
        return {"status": "error", "error": f"SystemExit({e.code!r}) before the test finished"}
    return {"status": "error", "error": _short(f"{type(e).__name__}: {e}"), "exc": type(e).__name__}


def _resolve(ns, name):
    cls = ns.get("Solution")
    if isinstance(cls, type) and hasattr(cls, name):
        return getattr(cls(), name)
    if callable(ns.get(name)):
        return ns[name]
    raise NameError(f"no function {name!r} (nor Solution.{name}) defined")


def _child_data(code, test, res_w):
    """stdio / functional: run, then send what happened (untrusted data) to the stub on a private pipe."""
    result = {"status": "ok"}
    try:
        ns = _exec_solution(code, test["kind"])
        if test["kind"] == "functional":
            result["value"] = _encode(_resolve(ns, test["fn_name"])(*_decode(test["args"], budget=math.inf)))
    except BaseException as e:  # noqa: B902 - everything the program raises is a test failure
        result = _error(e)
    try:
        sys.stdout.flush()
    except BaseException:
        pass
    try:
        data = json.dumps(result)
    except BaseException as e:  # noqa: B902 - e.g. an int too large to print
        data = json.dumps({"status": "error", "error": _short(f"result: {type(e).__name__}: {e}")})
    if len(data) > test["output_limit"] + 4096:
        data = json.dumps({"status": "output_limit", "error": "return value too large"})
    _send_bytes(res_w, data + "\n")


def _child_calls(code, test, lines, msg_out):
    """assert: run the program, then answer the checker's calls (on the stub's line reader) until ``end``."""
    try:
        ns = _exec_solution(code, "assert")
    except BaseException as e:  # noqa: B902
        _send(msg_out, dict(_error(e), i=test["i"], call=None))
        return
    lines.limit = test["line_limit"]
    while True:
        msg = lines.message()
        if msg is None or msg.get("op") != "call":
            return
        reply = {"i": test["i"], "call": msg.get("call")}
        try:
            reply["value"] = _encode(_resolve(ns, msg["name"])(*_decode(msg["args"], budget=math.inf)))
        except BaseException as e:  # noqa: B902
            reply.update(_error(e))
        _send(msg_out, reply)


def _child(code, test, fds, lines):
    keep = {fds["res_w"]} if test["kind"] != "assert" else {fds["cmd_in"], fds["msg_out"]}
    _child_setup(test, fds["stdin"], fds["out_w"], keep)
    if test["kind"] == "assert":
        _child_calls(code, test, lines, fds["msg_out"])
    else:
        _child_data(code, test, fds["res_w"])
    os._exit(0)


def _kill_all(pid, own_pidns):
    for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            kill()
        except OSError:
            pass
    if own_pidns:
        # inside the sandbox's PID namespace this reaches every process but us and the namespace's init
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass


def _stub_run_one(code, test, config, lines, msg_out):
    """Fork one child for ``test``; wait for it (collecting stdout and its result) up to the test's wall time."""
    limit = config["output_limit"]
    out_r, out_w = os.pipe()
    res_r, res_w = os.pipe()
    try:
        stdin = _stdin_fd(test.get("input"))
    except OSError as e:
        return {"status": "error", "error": _short(f"could not prepare stdin: {e}")}
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns
        try:
            fds = {"stdin": stdin, "out_w": out_w, "res_w": res_w, "cmd_in": lines.fd, "msg_out": msg_out}
            _child(code, test, fds, lines)
        finally:
            os._exit(70)
    if test["kind"] == "assert":
        lines.buf = b""  # calls the checker sent right behind the test command belong to the child (its copy)
    for fd in (out_w, res_w, stdin):
        os.close(fd)
    child = _Child(pid)
    out, res, status = _collect(child, out_r, res_r, limit, t0 + float(test["wall_s"]))
    _kill_all(pid, config.get("own_pidns", False))
    exit_status = child.reap()
    for fd in (out_r, res_r):
        os.close(fd)
    return _outcome(test, out, res, status, exit_status, time.monotonic() - t0)


class _Child:
    """A forked child: exit notification through a pidfd where available, else by polling ``waitpid``."""

    def __init__(self, pid):
        self.pid, self.status, self.reaped = pid, None, False
        self.pidfd = None
        if hasattr(os, "pidfd_open"):
            try:
                self.pidfd = os.pidfd_open(pid)
            except OSError:
                self.pidfd = None

    def poll(self):
        """True once the child has exited (reaps it on the polling path)."""
        if self.reaped:
            return True
        if self.pidfd is not None:
            return bool(select.select([self.pidfd], [], [], 0)[0])
        pid, st = os.waitpid(self.pid, os.WNOHANG)
        if pid:
            self.status, self.reaped = st, True
        return self.reaped

    def reap(self):
        if not self.reaped:
            try:
                self.status = os.waitpid(self.pid, 0)[1]
            except ChildProcessError:
                self.status = None
            self.reaped = True
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        return self.status


def _collect(child, out_r, res_r, limit, deadline):
    """Read the child's stdout and result pipes until it exits, the deadline passes or stdout exceeds ``limit``."""
    chunks = {out_r: [], res_r: []}
    sizes = {out_r: 0, res_r: 0}
    open_fds = [out_r, res_r]
    while True:
        now = time.monotonic()
        if now >= deadline:
            return b"".join(chunks[out_r]), b"".join(chunks[res_r]), "timeout"
        watch = list(open_fds)
        if child.pidfd is not None:
            watch.append(child.pidfd)
            wait = deadline - now
        else:
            wait = min(deadline - now, 0.02)
        ready = select.select(watch, [], [], wait)[0]
        for fd in ready:
            if fd != child.pidfd and not _read_into(fd, chunks, sizes, limit):
                open_fds.remove(fd)
        if sizes[out_r] > limit:
            return b"".join(chunks[out_r]), b"".join(chunks[res_r]), "output_limit"
        if child.poll():
            # the child is gone: what it wrote is in the pipes (its descendants may still hold them open)
            for fd in open_fds:
                # bounded: a grandchild may keep writing after the child exited
                while sizes[fd] <= limit and select.select([fd], [], [], 0)[0] and _read_into(fd, chunks, sizes, limit):
                    pass
            status = "output_limit" if sizes[out_r] > limit else None
            return b"".join(chunks[out_r]), b"".join(chunks[res_r]), status


def _read_into(fd, chunks, sizes, limit):
    """Read one chunk; False at end of file. Data past ``limit`` is counted, not kept."""
    data = os.read(fd, 1 << 16)
    if not data:
        return False
    sizes[fd] += len(data)
    if sizes[fd] <= limit + 65536:
        chunks[fd].append(data)
    return True


def _outcome(test, out, res, status, exit_status, elapsed):
    base = {"time_s": round(elapsed, 4)}
    if status == "timeout":
        return dict(base, status="timeout", error="wall-clock timeout")
    if status == "output_limit":
        return dict(base, status="output_limit", error="output exceeded the limit")
    if test["kind"] == "assert":  # the verdict is the checker's; this only says how the child ended
        return dict(base, status="ok" if exit_status == 0 else "crashed", error=_describe_exit(exit_status))
    try:
        result = json.loads(res.decode("utf-8", "replace")) if res else None
    except (ValueError, RecursionError):
        result = None
    if not isinstance(result, dict):
        return dict(base, status="crashed", error=_describe_exit(exit_status))
    result.update(base)
    if test["kind"] == "stdio":
        result["stdout"] = out.decode("utf-8", "replace")
    return result


def _describe_exit(st):
    if st is None:
        return "the program ended without a result"
    if os.WIFSIGNALED(st):
        sig = os.WTERMSIG(st)
        names = {
            signal.SIGXCPU: "CPU time limit",
            signal.SIGKILL: "killed (CPU or memory limit)",
            signal.SIGSEGV: "segmentation fault",
            signal.SIGXFSZ: "file size limit",
        }
        return "the program was terminated: " + names.get(sig, f"signal {sig}")
    return f"the program exited (status {os.WEXITSTATUS(st)}) before reporting a result"


def stub_main(root):
    cmd_in, msg_out = os.dup(0), os.dup(1)  # the channel to the checker; fds 0-2 become /dev/null
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    _prctl_not_dumpable()
    lines = _Lines(cmd_in, 64 << 20)
    config = lines.message() or {}
    # the control channel: ready/done messages go only there, and no child keeps it (so none can fake a "done")
    ctl = int(config.get("control_fd", msg_out))
    limits = config.get("limits", {})
    for name, key in (("RLIMIT_AS", "as"), ("RLIMIT_FSIZE", "fsize"), ("RLIMIT_NPROC", "nproc")):
        _set_limit(name, limits.get(key))
    _set_limit("RLIMIT_CORE", 0)
    config["own_pidns"] = bool(config.get("own_pidns")) and os.getpid() <= 3
    with open(os.path.join(root, "solution.py"), encoding="utf-8", errors="replace") as f:
        source = f.read()
    try:
        code = compile(source, "solution.py", "exec")
    except BaseException as e:  # SyntaxError, ValueError (null bytes), MemoryError, RecursionError
        _send(ctl, {"syntax_error": _short(f"{type(e).__name__}: {e}")})
        return
    _send(ctl, {"ready": True})
    while True:
        test = lines.message()
        if test is None:
            return
        if test.get("op") != "test":  # a call the child did not live to read
            continue
        result = _stub_run_one(code, test, config, lines, msg_out)
        os.write(msg_out, b"\n")  # ends any line a killed child left unfinished on the data channel
        _send(ctl, dict(result, i=test["i"], done=True))


# =====================================================================================================================
# The checker: outside the sandbox, trusted
# =====================================================================================================================
class SandboxGone(Exception):
    """The stub stopped answering (killed, frozen or lying): this and every later test fail."""

    def __init__(self, message, status="crashed"):
        super().__init__(message)
        self.status = status  #: of the test it happened in


class _Remote:
    """A function of the candidate's, called in the sandbox: arguments and the result cross as plain values."""

    def __init__(self, session, name):
        self.session, self.name = session, name

    def __call__(self, *args):
        return self.session.call(self.name, args)


def _remote_exception(reply):
    """The built-in exception class the candidate's call raised (so ``pytest.raises``-style tests work); a
    control-flow exception (``StopIteration``, ``StopAsyncIteration``) comes back as a RuntimeError, as PEP 479 does
    for generators: raised inside ``map``, ``filter`` or ``zip`` it would end the iteration quietly, and
    ``assert all(map(f, xs))`` would pass with a candidate that raises on every call."""
    cls = getattr(builtins, str(reply.get("exc")), None)
    error = _short(reply.get("error") or "the call failed")
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls = RuntimeError
    if issubclass(cls, (StopIteration, StopAsyncIteration)):
        return RuntimeError(f"the candidate raised {cls.__name__}: {error}")
    return cls(error)


#: the checker's name for the wrapper of truth-tested calls (a dunder no test or prelude uses)
_TRUTH = "__ragen_truth__"


class _TruthTests(ast.NodeTransformer):
    """Routes every call an ``assert`` tests for bare truth through ``_TRUTH``: ``assert f(x)``, ``assert not f(x)``
    and ``and``/``or``/``not`` of such calls. Comparisons (``f(x) == 3``, ``f(x) is True``) are left alone."""

    def visit_Assert(self, node):
        node.test = self._truth(node.test)
        return node

    def _truth(self, expr):
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
            expr.operand = self._truth(expr.operand)
        elif isinstance(expr, ast.BoolOp):
            expr.values = [self._truth(v) for v in expr.values]
        elif isinstance(expr, ast.Call):
            wrapped = ast.Call(func=ast.Name(id=_TRUTH, ctx=ast.Load()), args=[expr.func] + expr.args,
                               keywords=expr.keywords)
            return ast.copy_location(wrapped, expr)
        return expr


def _assert_code(code):
    """The test code, compiled with its truth-tested calls wrapped (see ``_truth_tested``)."""
    tree = ast.fix_missing_locations(_TruthTests().visit(ast.parse(code)))
    return compile(tree, "<test>", "exec")


def _truth_tested(fn, *args, **kwargs):
    """A call an assert tests for truth. When the candidate made it, only a real bool counts: ``assert f(x)`` needs
    True and ``assert not f(x)`` False. The predicates these tests check are specified to return bools; with Python's
    truthiness a value that is no answer at all (a forged reply's string, a list, 1) would pass every ``assert f(x)``
    and a falsy one every ``assert not f(x)``. A constant bool still earns what it earns on ``f(x) == True`` tests."""
    value = fn(*args, **kwargs)
    if isinstance(fn, _Remote) and type(value) is not bool:
        raise AssertionError(f"{fn.name}() returned {type(value).__name__} {_short(repr(value), 60)}: "
                             "a truth test needs a bool")
    return value


def _free_names(code, defined):
    """Names the test code reads but neither assigns nor gets from the prelude or builtins: the candidate's."""
    tree = ast.parse(code)
    stored, loaded = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else stored).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stored.add(node.name)
        elif isinstance(node, ast.alias):
            stored.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.arg):
            stored.add(node.arg)
    return sorted(n for n in loaded - stored if n not in defined and not hasattr(builtins, n))


class _Session:
    """One sandbox driven by the checker, a test at a time, every read under a deadline. Two channels come out:
    control (the stub's ready/done messages; no child holds it) and data (the children's call replies)."""

    def __init__(self, proc, control_fd, line_limit):
        self.proc = proc
        self.ctl = _Lines(control_fd, line_limit)
        self.data = _Lines(proc.stdout.fileno(), line_limit)
        self.test_i, self.deadline, self.calls = None, None, 0
        self.startup_error = None  #: the program raised before serving calls (this test)

    def send(self, obj):
        try:
            _send(self.proc.stdin.fileno(), obj)
        except OSError as e:
            raise SandboxGone(f"the sandbox closed its input ({e.strerror})") from None

    def _next(self, deadline):
        """(is_control, message) of this test; SandboxGone when the control channel ends or the deadline passes."""
        while True:
            reader, msg = _next_message([self.ctl, self.data], deadline)
            if msg is None:
                if self.ctl.eof:
                    raise SandboxGone("the sandbox ended early")
                raise SandboxGone("wall-clock timeout (the sandbox stopped answering)", status="timeout")
            if reader is self.ctl and ("ready" in msg or "syntax_error" in msg):
                return True, msg
            if msg.get("i") != self.test_i:
                continue  # a late or invented message of another test
            if reader is self.data and msg.get("call") is None and msg.get("status") == "error":
                self.startup_error = _short(msg.get("error") or "the program failed")
            return reader is self.ctl, msg

    def start(self, deadline):
        while True:
            control, msg = self._next(deadline)
            if control:
                return msg

    def call(self, name, args):
        self.calls += 1
        call = self.calls
        self.send({"op": "call", "call": call, "name": name, "args": _encode(list(args))})
        while True:
            control, msg = self._next(self.deadline)
            if control:  # the stub says the child ended: no answer is coming
                raise _TestOver(msg)
            if msg.get("call") not in (call, None):
                continue
            if msg.get("status") == "error":
                raise _remote_exception(msg)
            try:
                return _decode(msg.get("value"), self.deadline)
            except (ValueError, TypeError, RecursionError, OverflowError) as e:
                raise TypeError(f"unreadable return value: {e}") from None

    def wait_done(self, deadline):
        while True:
            control, msg = self._next(deadline)
            if control:
                return msg


class _TestOver(Exception):
    def __init__(self, done):
        super().__init__("the program ended before the test finished")
        self.done = done


def _assert_test(session, test, prelude_ns, t0):
    """Run the (trusted) test code here, the candidate's functions as remote calls; ok iff it raises nothing."""
    ns = dict(prelude_ns)
    for name in _free_names(test["code"], ns):
        ns[name] = _Remote(session, name)
    ns[_TRUTH] = _truth_tested
    try:
        exec(_assert_code(test["code"]), ns)
        verdict = {"status": "ok"}
    except _TestOver as over:
        return dict(_done_error(over.done), time_s=round(time.monotonic() - t0, 4))
    except SandboxGone:
        raise
    except BaseException as e:  # noqa: B902 - an AssertionError, or what the candidate's calls raised
        verdict = {"status": "error", "error": _short(f"{type(e).__name__}: {e}")}
    session.send({"op": "end"})
    done = session.wait_done(session.deadline)
    if session.startup_error and verdict["status"] == "ok":  # the program itself failed before any call
        verdict = {"status": "error", "error": session.startup_error}
    elif done.get("status") in ("timeout", "output_limit"):
        verdict = _done_error(done)
    return dict(verdict, time_s=round(time.monotonic() - t0, 4))


def _done_error(done):
    status = done.get("status")
    if status in ("timeout", "output_limit"):
        return {"status": status, "error": _short(done.get("error") or status)}
    return {"status": "error", "error": _short(done.get("error") or "the program ended before the test finished")}


def _data_test(session, test, t0):
    """stdio / functional: the stub's report of the raw output or return value (compared later by the trainer)."""
    done = session.wait_done(session.deadline)
    result = {"status": str(done.get("status")), "time_s": round(time.monotonic() - t0, 4)}
    if test["kind"] == "stdio" and "stdout" in done:
        result["stdout"] = done["stdout"] if isinstance(done["stdout"], str) else ""
    if result["status"] != "ok":
        result["error"] = _short(done.get("error") or "")
        return result
    if test["kind"] == "stdio":
        return result
    try:
        result["value"] = _json_normal(_decode(done.get("value"), session.deadline))
    except (ValueError, TypeError, RecursionError, OverflowError) as e:
        result = {"status": "error", "error": _short(f"return value: {e}"), "time_s": result["time_s"]}
    return result


def _run_test(session, i, test, spec, preludes, wall):
    t0 = time.monotonic()
    session.test_i, session.deadline, session.startup_error = i, t0 + wall + GRACE_S, None
    msg = {"op": "test", "i": i, "kind": test["kind"], "wall_s": wall, "cpu_s": math.ceil(wall) + 1,
           "line_limit": spec["line_limit"], "output_limit": spec["output_limit"]}
    if test["kind"] == "stdio":
        msg["input"] = test.get("input")
    elif test["kind"] == "functional":
        msg.update(fn_name=test["fn_name"], args=_encode(list(test.get("args", []))))
    session.send(msg)
    if test["kind"] == "assert":
        prelude = test.get("prelude") or ""
        if prelude not in preludes:
            preludes[prelude] = _prelude_namespace(prelude)
        return _assert_test(session, test, preludes[prelude], t0)
    return _data_test(session, test, t0)


def _prelude_namespace(prelude):
    ns = {"__name__": "checker", "__builtins__": builtins}
    if prelude:
        exec(compile(prelude, "<prelude>", "exec"), ns)
    return ns


def _start(spec, control_fd):
    """The sandbox (bwrap, or the plain stub when unsafe); its stderr (bwrap's own errors) is ours."""
    return subprocess.Popen(
        spec["sandbox"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        pass_fds=(*spec.get("pass_fds", ()), control_fd),
        cwd=spec.get("cwd") or "/",
        env={"PATH": "/usr/bin:/bin"},
    )


def _run_all(spec, report):
    preludes = {}  # prelude source -> its namespace (trusted code: the problem's imports and helpers)
    ctl_r, ctl_w = os.pipe()
    try:
        proc = _start(spec, ctl_w)
    finally:
        os.close(ctl_w)
    session = _Session(proc, ctl_r, spec["line_limit"])
    deadline = time.monotonic() + float(spec["run_s"])
    try:
        session.send({"limits": spec["limits"], "output_limit": spec["output_limit"], "own_pidns": spec["own_pidns"],
                      "control_fd": ctl_w})
        first = session.start(time.monotonic() + float(spec.get("start_s", 30)))
        if "syntax_error" in first:
            report["syntax_error"], report["error"] = True, _short(first["syntax_error"])
            report["results"] = [{"status": "error", "error": report["error"], "time_s": 0.0}] * len(spec["tests"])
            return
        for i, test in enumerate(spec["tests"]):
            left = deadline - time.monotonic()
            if left <= 0.05:
                report["results"].append({"status": "skipped", "error": "run time limit reached", "time_s": 0.0})
                continue
            wall = min(float(test.get("timeout_s", spec["timeout_s"])), left)
            report["results"].append(_run_test(session, i, test, spec, preludes, wall))
    except SandboxGone as e:
        if not report["results"] and len(spec["tests"]) and report["error"] is None:
            report["error"] = str(e)
        n = len(spec["tests"]) - len(report["results"])
        if n:
            report["results"].append({"status": e.status, "error": str(e), "time_s": 0.0})
        report["results"] += [{"status": "crashed", "error": "the sandbox was stopped", "time_s": 0.0}] * (n - 1)
    finally:
        _stop(proc)
        os.close(ctl_r)


def _stop(proc):
    for pipe in (proc.stdin, proc.stdout):
        try:
            pipe.close()
        except OSError:
            pass
    try:
        proc.kill()  # bwrap --die-with-parent and its PID namespace take every sandboxed process with it
    except OSError:
        pass
    proc.wait()


def check_main():
    spec = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    out = os.dup(1)  # the report channel: the sandbox never gets it
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    report = {"syntax_error": False, "error": None, "results": []}
    try:
        _run_all(spec, report)
    except OSError as e:
        report["error"] = _short(f"the sandbox could not start: {e}")
    report["results"] = report["results"][: len(spec["tests"])]
    _send(out, report)


if __name__ == "__main__":
    if sys.argv[1:2] == ["check"]:
        check_main()
    else:
        stub_main(sys.argv[2] if len(sys.argv) > 2 else "/sandbox")
