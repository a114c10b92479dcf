"""Lean 4 backends: the Lean REPL's JSON protocol (a local toolchain) and a Kimina Lean server (HTTP).

**REPL** (leanprover-community/repl; ``lake exe repl`` in a Mathlib project, or any executable speaking the
protocol): JSON objects separated by blank lines on stdin/stdout. ``{"cmd": header}`` gives environment 0;
``{"cmd": "<statement> := by\\n  sorry", "env": 0}`` reports the ``sorry`` with its ``proofState`` and goal;
``{"tactic": t, "proofState": k}`` answers ``{"proofState": k', "goals": [...], "messages": [...]}`` or
``{"message": "Lean error: ..."}``. A tactic is accepted when the answer has no error message and no ``sorry``; the
proof is complete when no goals remain (and the REPL's ``proofStatus``, when it sends one, is ``Completed``).
A timeout kills the REPL; a new one replays the header, the statement and the accepted tactics.

**Kimina** (project-numina/kimina-lean-server): ``POST {url}/api/check`` re-checks the whole proof (header, statement,
accepted tactics and the candidate) as RAGEN does; accepted = no error except "unsolved goals" and no ``sorry``;
complete = no error at all; the goals are read from the "unsolved goals" message.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
import weakref
from pathlib import Path
from typing import Any

from ragen_lean.backend import (
    ProblemLoadError,
    ProofState,
    ProverBackend,
    ProverUnavailable,
    SessionLost,
    SessionProofState,
    SessionTimeout,
    StepResult,
    kill_process_group,
)  # fmt: skip
from ragen_lean.tactics import Checked, check_lean_tactic

NOT_AVAILABLE = "Lean 4 toolchain or Kimina server not available"
_MAX_BUFFER = 16 * 1024 * 1024


def proof_skeleton(statement: str) -> str:
    """``statement`` ending in ``:= by`` (a trailing ``sorry`` or bare ``:=`` normalised)."""
    text = statement.rstrip()
    if text.endswith("sorry"):
        text = text[: -len("sorry")].rstrip()
    if text.endswith(":= by"):
        return text
    if text.endswith(":="):
        return text + " by"
    return text + " := by"


def indent_tactics(tactics: list[str]) -> str:
    """Tactics as the lines of a ``by`` block (two spaces; continuation lines keep their own extra indent)."""
    return "\n".join("  " + line for t in tactics for line in t.splitlines())


def _errors(messages: list[dict]) -> list[str]:
    return [str(m.get("data", "")) for m in messages or [] if m.get("severity") == "error"]


def _format_goals(goals: list[str]) -> str:
    return "\n\n".join(g.strip() for g in goals)


# ---- the REPL protocol -----------------------------------------------------------------------------------------------
class ReplTimeout(SessionTimeout):
    pass


class ReplDied(SessionLost):
    pass


class LeanRepl:
    """A REPL process: ``request(obj)`` writes one JSON command and reads the JSON answer."""

    def __init__(self, command: list[str], cwd: str | None = None):
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            cwd=cwd, start_new_session=True, bufsize=0,
        )  # fmt: skip
        self._fd = self.proc.stdout.fileno()
        self._buf = b""
        self._finalizer = weakref.finalize(self, kill_process_group, self.proc)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def request(self, payload: dict, timeout_s: float) -> dict:
        try:
            self.proc.stdin.write(json.dumps(payload).encode() + b"\n\n")
        except (BrokenPipeError, OSError) as exc:
            raise ReplDied(f"the REPL is not running ({exc})") from None
        return self._read(timeout_s)

    def _read(self, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        while True:
            answer = self._take()
            if answer is not None:
                return answer
            left = deadline - time.monotonic()
            if left <= 0:
                raise ReplTimeout()
            ready, _, _ = select.select([self._fd], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(self._fd, 65536)
            if not chunk:
                raise ReplDied(f"the REPL exited with status {self.proc.wait()}")
            self._buf += chunk
            if len(self._buf) > _MAX_BUFFER:
                raise ReplDied("the REPL sent more than 16 MiB without a complete answer")

    def _take(self) -> dict | None:
        """Pop the first JSON answer: answers end at a blank line (Lean's JSON escapes newlines inside strings);
        lines before the '{' are logs some REPL builds print."""
        while b"\n\n" in self._buf:
            block, self._buf = self._buf.split(b"\n\n", 1)
            text = block.decode("utf-8", "replace")
            start = text.find("{")
            if start < 0:
                continue  # a log line or stray blank line
            try:
                return json.loads(text[start:])
            except ValueError:
                return {"message": f"unreadable REPL answer: {text[start:start + 200]}"}
        return None

    def kill(self) -> None:
        self._finalizer()


class LeanReplBackend(ProverBackend):
    """Lean 4 through the REPL: ``repl_path`` is a project folder (``lake exe repl`` there) or an executable."""

    name = "lean4-repl"
    language = "lean"

    def __init__(self, repl_path: str, load_timeout_s: float = 600.0):
        self.repl_path = Path(repl_path).expanduser()
        self.load_timeout_s = load_timeout_s

    def command(self) -> tuple[list[str], str | None]:
        if self.repl_path.is_dir():
            return ["lake", "exe", "repl"], str(self.repl_path)
        return [str(self.repl_path)], None

    def available(self) -> tuple[bool, str]:
        if self.repl_path.is_dir():
            if shutil.which("lake") is None:
                return False, f"{NOT_AVAILABLE}: 'lake' is not on PATH (needed to run the REPL in {self.repl_path})"
            return True, f"Lean REPL project {self.repl_path}"
        if self.repl_path.is_file() and os.access(self.repl_path, os.X_OK):
            return True, f"Lean REPL executable {self.repl_path}"
        return (
            False,
            f"{NOT_AVAILABLE}: lean_repl_path {str(self.repl_path)!r} is neither a project folder nor an executable",
        )

    def open(self, header: str, statement: str, recycle: ProofState | None = None) -> LeanReplProofState:
        """A proof in a new REPL, or in ``recycle``'s REPL when it loaded the same header (its environment is kept:
        importing Mathlib again would take many seconds)."""
        ok, reason = self.available()
        if not ok:
            if recycle is not None:
                recycle.close()
            raise ProverUnavailable(reason)
        return LeanReplProofState(self, header, statement, recycle if isinstance(recycle, LeanReplProofState) else None)

    def check_tactic(self, tactic: str) -> Checked:
        return check_lean_tactic(tactic)


class LeanReplProofState(SessionProofState):
    """One theorem in one REPL process; proof states are the REPL's ``proofState`` numbers."""

    def __init__(
        self, backend: LeanReplBackend, header: str, statement: str, recycle: LeanReplProofState | None = None
    ):
        self.backend = backend
        self.header, self.statement = header, statement
        self.accepted: list[str] = []
        self._goals, self._complete = "", False
        self._lock = threading.Lock()
        self.repl: LeanRepl | None = None
        self._env: int | None = None  #: the REPL environment holding the header
        self.restarts = 0
        self.reused = False
        self._state = 0
        if recycle is not None and self._adopt(recycle):
            return
        self._start(backend.load_timeout_s)

    def _adopt(self, old: LeanReplProofState) -> bool:
        repl, env, same = old.repl, old._env, old.header == self.header
        old.repl = None
        if repl is None or env is None or not same or repl.proc.poll() is not None:
            if repl is not None:
                repl.kill()
            return False
        self.repl, self._env = repl, env
        try:
            self._open_statement(self.backend.load_timeout_s)
        except (ReplTimeout, ReplDied, ProblemLoadError):
            self.close()
            return False
        self.reused = True
        return True

    @property
    def pid(self) -> int | None:
        return self.repl.pid if self.repl else None

    def _send(self, pieces: tuple[str, ...], timeout_s: float) -> StepResult:
        answer = self.repl.request({"tactic": pieces[0], "proofState": self._state}, timeout_s)
        return self._apply(pieces[0], answer)

    def close(self) -> None:
        if self.repl is not None:
            self.repl.kill()
            self.repl = None

    # ---- internals ------------------------------------------------------------------------------------------------
    def _apply(self, tactic: str, answer: dict) -> StepResult:
        verdict = tactic_verdict(answer)
        if verdict is not None:
            return StepResult("rejected", self._goals, (verdict,))
        self._state = int(answer["proofState"])
        self._goals = _format_goals(answer.get("goals") or [])
        self._complete = not answer.get("goals")
        self.accepted.append(tactic)
        notes = tuple(str(m.get("data", "")) for m in answer.get("messages") or [])
        return StepResult("accepted", self._goals, notes, complete=self._complete)

    def _start(self, timeout_s: float) -> None:
        command, cwd = self.backend.command()
        try:
            self.repl = LeanRepl(command, cwd)
        except OSError as exc:
            raise ProverUnavailable(f"{NOT_AVAILABLE}: could not start {command}: {exc}") from None
        try:
            self._load(timeout_s)
        except (ReplTimeout, ReplDied) as exc:
            self.close()
            raise ProblemLoadError(f"the REPL failed while loading the theorem: {exc or 'timeout'}") from None
        except BaseException:
            self.close()
            raise

    def _load(self, timeout_s: float) -> None:
        env = self.repl.request({"cmd": self.header}, timeout_s)
        if "message" in env or _errors(env.get("messages")):
            raise ProblemLoadError(f"header: {env.get('message') or _errors(env.get('messages'))[0]}")
        self._env = int(env.get("env", 0))
        self._open_statement(timeout_s)
        for tactic in self.accepted:
            step = self.repl.request({"tactic": tactic, "proofState": self._state}, timeout_s)
            if tactic_verdict(step) is not None:
                raise ProblemLoadError(f"replaying {tactic!r} failed: {tactic_verdict(step)}")
            self._state = int(step["proofState"])
            self._goals = _format_goals(step.get("goals") or [])

    def _open_statement(self, timeout_s: float) -> None:
        cmd = proof_skeleton(self.statement) + "\n  sorry"
        answer = self.repl.request({"cmd": cmd, "env": self._env}, timeout_s)
        errors = _errors(answer.get("messages"))
        if "message" in answer or errors:
            raise ProblemLoadError(f"statement: {answer.get('message') or errors[0]}")
        sorries = answer.get("sorries") or []
        if not sorries or "proofState" not in sorries[0]:
            raise ProblemLoadError("the statement gave no proof state (is it a 'theorem ... := by' statement?)")
        self._state = int(sorries[0]["proofState"])
        self._goals = str(sorries[0].get("goal", "")).strip()


def tactic_verdict(answer: dict) -> str | None:
    """Why a REPL tactic answer is a rejection, or None when the tactic is accepted."""
    if "message" in answer:
        return str(answer["message"]).removeprefix("Lean error:").strip()
    errors = _errors(answer.get("messages"))
    if errors:
        return errors[0]
    if answer.get("sorries"):
        return "The tactic leaves a sorry."
    if "proofState" not in answer:
        return f"Unexpected REPL answer: {json.dumps(answer)[:200]}"
    status = answer.get("proofStatus")
    if not answer.get("goals") and status and not str(status).startswith("Completed"):
        return f"No goals remain, but the proof does not check: {status}"
    return None


# ---- Kimina ----------------------------------------------------------------------------------------------------------
class KiminaBackend(ProverBackend):
    """A Kimina Lean server at ``url`` (``POST /api/check``, ``GET /health``), optionally with an API key."""

    name = "lean4-kimina"
    language = "lean"

    def __init__(self, url: str, api_key: str | None = None, http_timeout_s: float = 120.0):
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.http_timeout_s = http_timeout_s

    def available(self) -> tuple[bool, str]:
        try:
            with urllib.request.urlopen(self._request("/health"), timeout=10) as resp:
                if resp.status == 200:
                    return True, f"Kimina server {self.url}"
                return False, f"{NOT_AVAILABLE}: {self.url}/health answered HTTP {resp.status}"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            return False, f"{NOT_AVAILABLE}: {self.url}/health is unreachable ({exc})"

    def check(self, code: str, timeout_s: float) -> dict:
        """One ``/api/check`` round trip; returns ``{"error": str}`` or the REPL response (``messages``,
        ``sorries``)."""
        snippet = {"id": uuid.uuid4().hex, "code": code}
        # old servers read "snippets" (answer {"results": [...]}), newer ones "snippet" (one result): send both
        payload = {"snippet": snippet, "snippets": [snippet], "timeout": max(1, int(round(timeout_s))),
                   "debug": False, "reuse": True}  # fmt: skip
        request = self._request("/api/check", json.dumps(payload).encode())
        try:
            with urllib.request.urlopen(request, timeout=max(timeout_s + 30, self.http_timeout_s)) as resp:
                body = json.loads(resp.read().decode("utf-8"))
        except (TimeoutError, urllib.error.URLError, OSError, ValueError) as exc:
            if isinstance(exc, TimeoutError) or isinstance(getattr(exc, "reason", None), TimeoutError):
                return {"error": f"the HTTP request timed out after {timeout_s:g} s"}
            raise ProverUnavailable(f"Kimina server {self.url}: {exc}") from None
        return kimina_result(body)

    def _request(self, path: str, data: bytes | None = None) -> urllib.request.Request:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return urllib.request.Request(self.url + path, data=data, headers=headers, method="POST" if data else "GET")

    def open(self, header: str, statement: str, recycle: ProofState | None = None) -> KiminaProofState:
        if recycle is not None:
            recycle.close()
        return KiminaProofState(self, header, statement)

    def check_tactic(self, tactic: str) -> Checked:
        return check_lean_tactic(tactic)


def kimina_result(body: Any) -> dict:
    """The single result of an ``/api/check`` answer in any server version, as ``{"error"}`` or a REPL response."""
    if isinstance(body, dict) and "results" in body:
        body = body["results"][0] if body["results"] else {}
    elif isinstance(body, list):
        body = body[0] if body else {}
    if not isinstance(body, dict):
        return {"error": f"unexpected answer {str(body)[:200]}"}
    if body.get("error"):
        return {"error": str(body["error"])}
    response = body.get("response")
    if not isinstance(response, dict):
        return {"error": "the server sent no response"}
    if "message" in response:
        return {"error": str(response["message"])}
    return response


class KiminaProofState(ProofState):
    """A proof re-checked in full on every tactic (the server keeps no proof state between requests)."""

    def __init__(self, backend: KiminaBackend, header: str, statement: str):
        self.backend = backend
        self.header, self.statement = header, statement
        self.accepted: list[str] = []
        self._complete = False
        # the goal of the bare statement: check it with a sorry
        answer = backend.check(self._code(["sorry"]), backend.http_timeout_s)
        if "error" in answer or _errors(answer.get("messages")):
            raise ProblemLoadError(f"statement: {answer.get('error') or _errors(answer.get('messages'))[0]}")
        sorries = answer.get("sorries") or [{}]
        self._goals = str(sorries[0].get("goal", "")).strip()

    def _code(self, tactics: list[str]) -> str:
        return f"{self.header.strip()}\n\n{proof_skeleton(self.statement)}\n{indent_tactics(tactics)}\n"

    def _execute(self, pieces: tuple[str, ...], timeout_s: float) -> StepResult:
        answer = self.backend.check(self._code([*self.accepted, pieces[0]]), timeout_s)
        if "error" in answer:
            status = "timeout" if "timed out" in answer["error"].lower() else "rejected"
            return StepResult(status, self._goals, (answer["error"],))
        errors = _errors(answer.get("messages"))
        blocking = [e for e in errors if "unsolved goals" not in e.lower()]
        if blocking or answer.get("sorries"):
            return StepResult("rejected", self._goals, tuple(blocking) or ("The tactic leaves a sorry.",))
        unsolved = [e for e in errors if "unsolved goals" in e.lower()]
        self._goals = unsolved[0].split("\n", 1)[1].strip() if unsolved and "\n" in unsolved[0] else ""
        self._complete = not errors
        self.accepted.append(pieces[0])
        return StepResult("accepted", self._goals, (), complete=self._complete)

    def close(self) -> None:
        """Nothing to release: the server owns its REPLs."""
