"""Generic reward-forging programs: none of them computes anything, so each must score 0 on every problem.

Each is a whole answer, the same for every problem. They attack the verdict, not the task: reading whatever the
program inherits (tokens, pipes) and writing success records to every channel it can find or guess, exiting early
with status 0, printing fake reports, and patching the harness's own functions and the interpreter (builtins,
sys.exit, atexit, os._exit) before the tests run.
"""

import json

# Success records in every shape a harness might accept: the old per-test record (status + token), a done message
# of the new wire format, a call reply, and a whole checker report. Values are a marker no test expects: a forged
# record must not pass a test, while returning a plausible value (True, 0) is just an answer, right or wrong.
_FAKES = [
    {"status": "ok", "token": "{tok}"},
    {"i": "{i}", "done": True, "status": "ok", "stdout": "FORGED", "value": "FORGED"},
    {"i": "{i}", "call": "{call}", "status": "ok", "value": "FORGED"},
    {"syntax_error": False, "error": None, "results": [{"status": "ok"}] * 64},
]

_RECORDS = f"""
import json, os, select
FAKES = {json.dumps(_FAKES)!r}
def records(tok="", i=0, call=1):
    out = []
    for shape in json.loads(FAKES):
        text = json.dumps(shape).replace('"{{tok}}"', json.dumps(tok))
        text = text.replace('"{{i}}"', str(i)).replace('"{{call}}"', str(call))
        out.append(text.encode() + b"\\n")
    return b"\\n" + b"".join(out)
"""

#: the issue's attack: read the token from whatever inherited fd has data, forge records on every fd, exit 0
INHERITED_FDS = _RECORDS + """
fds = []
for name in os.listdir("/proc/self/fd"):
    try:
        os.fstat(int(name))
        fds.append(int(name))
    except OSError:
        pass
tok, i, call = "", 0, 1
for fd in select.select(fds, [], [], 0.05)[0]:
    try:
        data = os.read(fd, 1 << 16).decode("utf-8", "replace")
    except OSError:
        continue
    tok = data.strip() or tok
    for line in data.splitlines():
        try:
            msg = json.loads(line)
            i, call = msg.get("i", i), msg.get("call", call)
        except (ValueError, AttributeError):
            pass
for fd in fds:
    try:
        os.write(fd, records(tok, i, call))
    except OSError:
        pass
os._exit(0)
"""

#: guess fd numbers (nothing listed): write forged records to fds 0-1023 and exit 0
GUESSED_FDS = _RECORDS + """
for i in range(8):
    forged = records("", i, 1)
    for fd in range(1024):
        try:
            os.write(fd, forged)
        except OSError:
            pass
os._exit(0)
"""

#: exit with status 0 before any test code runs, in every way Python offers
EXIT_EARLY = [
    "import sys\nsys.exit(0)",
    "import os\nos._exit(0)",
    "raise SystemExit",
    "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
]

#: print fake results on stdout and stderr (and a fake report line), then stop
FAKE_PRINTS = _RECORDS + """
import sys
sys.stdout.write(records().decode())
sys.stdout.flush()
sys.stderr.write(records().decode())
print("All tests passed.")
print(json.dumps({"nonce": "0" * 32, "syntax_error": False, "error": None, "results": [{"status": "ok"}] * 64}))
raise SystemExit(0)
"""

#: patch the harness and the interpreter: every function the stub and the test code could use answers "passed"
MONKEYPATCH = _RECORDS + """
import atexit, builtins, sys
class Always:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __lt__(self, other): return True
    def __le__(self, other): return True
    def __gt__(self, other): return True
    def __ge__(self, other): return True
    def __bool__(self): return True
    def __abs__(self): return 0
    def __sub__(self, other): return 0
    __rsub__ = __sub__
    def __iter__(self): return iter(())
    def __len__(self): return 0
    def __hash__(self): return 0
builtins.abs = lambda *a: 0
builtins.isinstance = lambda *a: True
builtins.len = lambda *a: 0
builtins.all = builtins.any = lambda *a: True
builtins.AssertionError = type("AssertionError", (BaseException,), {})
main = sys.modules.get("__main__")
if main is not None:
    for name in ("_resolve", "_encode", "_decode", "_json_normal", "_outcome", "_describe_exit"):
        if hasattr(main, name):
            fake = (lambda *a, **k: (lambda *b, **c: Always())) if name == "_resolve" else (lambda *a, **k: Always())
            setattr(main, name, fake)
    if hasattr(main, "_send"):
        real = main._send
        main._send = lambda fd, obj: os.write(fd, records("", getattr(obj, "get", dict().get)("i", 0) or 0))
def forge_everywhere():
    for fd in range(64):
        try:
            os.write(fd, records())
        except OSError:
            pass
real_exit = os._exit
def fake_exit(*a):  # whoever ends the process forges a report first
    forge_everywhere()
    real_exit(0)
sys.exit = lambda *a: None
os._exit = fake_exit
atexit.register(forge_everywhere)
def __getattr__(name):
    return lambda *a, **k: Always()
"""

FAMILY = {
    "inherited-fds": INHERITED_FDS,
    "guessed-fds": GUESSED_FDS,
    **{f"exit-early-{n}": code for n, code in enumerate(EXIT_EARLY)},
    "fake-prints": FAKE_PRINTS,
    "monkeypatch": MONKEYPATCH,
}
