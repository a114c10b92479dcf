"""The Coq backend: one persistent ``coqtop -emacs -quiet`` per proof, driven over pipes one sentence per write.

``-emacs`` makes coqtop end every answer with ``<prompt>NAME < N |NAME| D < </prompt>`` (N = state number). Since the
model can make coqtop print such text itself, each sentence is followed by a ``Check`` of a random name, and the
sentence's reply is what precedes the last prompt before that name shows up (``CoqSession.send``). A sentence is
accepted when coqtop printed no ``Error`` and N advanced; on an error coqtop keeps the state. An action may carry
focusing bullets/braces (``- split.``): each is a sentence of its own, and when a later one fails the action is undone
with ``BackTo N`` (an internal command the model may not send), so a rejected action always leaves the proof state
unchanged. When ``Show.`` says ``No more goals.`` the backend sends ``Qed.``; if Qed fails (e.g. a bad fixpoint) the
action is undone and rejected.

Safety: the tactic policy (``tactics.check_coq_action``) rejects commands before they reach coqtop; coqtop runs in a
fresh empty working directory, in its own process group, under an address-space limit; a sentence that runs past its
timeout (or kills coqtop) gets the process group killed, a new coqtop started and the accepted sentences replayed.
"""

from __future__ import annotations

import os
import re
import secrets
import select
import shutil
import subprocess
import tempfile
import threading
import time
import weakref
from functools import lru_cache

import attrs

from ragen_lean.backend import (
    ProblemLoadError,
    ProofState,
    ProverBackend,
    ProverUnavailable,
    SessionLost,
    SessionProofState,
    SessionTimeout,
    Status,
    StepResult,
    kill_process_group,
)  # fmt: skip
from ragen_lean.tactics import Checked, check_coq_action, coq_sentences, is_focus_marker

#: loaded before every header: the decision procedures (lia, lra, nia, nra, psatz) a model cannot Require itself
DEFAULT_PRELUDE = "Require Import Lia Lra Psatz."
INSTALL_HINT = "install the Debian packages coq and libcoq-coquelicot (apt-get install coq libcoq-coquelicot)"
_PROMPT = re.compile(rb"<prompt>(\S+) < (\d+) \|([^|]*)\| (\d+) < </prompt>")
_TAGGED = re.compile(r"</?(infomsg|warning|prompt)>")
_WARNING_BLOCK = re.compile(r"<warning>.*?</warning>", re.S)
_ERROR = re.compile(r"^(Error|Anomaly)\b.*", re.M | re.S)
_GOAL_ID = re.compile(r" \(ID \d+\)")
_FOCUSED = re.compile(r"focused", re.I)
_MAX_BUFFER = 2 * 1024 * 1024  #: coqtop output kept per reply (head and tail) so a flood cannot exhaust memory


class _Timeout(SessionTimeout):
    pass


class _Died(SessionLost):
    pass


class _Desync(_Died):
    """coqtop's replies can no longer be matched to our sentences: restart."""


@attrs.frozen
class Reply:
    """coqtop's answer to one sentence."""

    output: str  #: text before the prompt (tags kept)
    state: int  #: the state number N of the prompt
    proof: str  #: the prompt's name: the open proof's name, or ``Coq`` outside a proof

    @property
    def error(self) -> str | None:
        """The error text, or None when the sentence succeeded."""
        text = _WARNING_BLOCK.sub("", self.output)
        match = _ERROR.search(text)
        if match is None:
            return None
        text = _TAGGED.sub("", match.group(0)).strip()
        return re.sub(r"^Error:\s*", "", text)


@lru_cache(maxsize=8)
def coq_version(coqtop: str) -> str | None:
    """``The Coq Proof Assistant, version 8.16.1`` -> ``8.16.1``; None when coqtop does not run."""
    try:
        out = subprocess.run([coqtop, "-v"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"version (\S+)", out)
    return match.group(1) if match else None


def clean_goals(output: str) -> str:
    """coqtop's goal display without tags, ``(ID n)`` counters (they change on every step) and trailing blanks."""
    text = _GOAL_ID.sub("", _TAGGED.sub("", output))
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


class CoqSession:
    """A live coqtop process: ``send`` one sentence, get its ``Reply``; ``kill`` ends the whole process group."""

    def __init__(self, coqtop: str, memory_limit_mb: int, start_timeout_s: float = 60.0):
        self.workdir = tempfile.mkdtemp(prefix="ragen-coq-")
        limit = f"ulimit -v {int(memory_limit_mb) * 1024}; " if memory_limit_mb > 0 else ""
        # a shell sets the limit (preexec_fn is unsafe with threads), then execs coqtop in its own process group
        self.proc = subprocess.Popen(
            ["/bin/sh", "-c", limit + 'exec "$0" -emacs -quiet', coqtop],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            cwd=self.workdir, start_new_session=True, bufsize=0,
        )  # fmt: skip
        self._fd = self.proc.stdout.fileno()
        self._pending = b""
        # an env that is never closed must not leave coqtop behind when it is garbage collected
        self._finalizer = weakref.finalize(self, _kill_group, self.proc, self.workdir)
        self.last = self._read(start_timeout_s)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, sentence: str, timeout_s: float) -> Reply:
        """Write one sentence (newlines flattened: one line) and return coqtop's reply to it.

        The model controls text coqtop prints (``idtac``/``fail`` strings, echoed input in errors), so it could print
        a fake prompt. Each sentence is therefore followed by ``Check ragen_sync_<random>.``, which fails with an
        error naming that nonce: the sentence's real prompt is the last prompt before the nonce appears, and the
        reply ends at the prompt after it. Without a prompt before the nonce coqtop read both lines as one sentence:
        the session is out of step (``_Desync``)."""
        nonce = f"ragen_sync_{secrets.token_hex(8)}"
        data = " ".join(sentence.split()) + f"\nCheck {nonce}.\n"
        try:
            self.proc.stdin.write(data.encode())
        except (BrokenPipeError, OSError) as exc:
            raise _Died(f"coqtop is not running ({exc})") from None
        self.last = self._read(timeout_s, nonce.encode())
        return self.last

    def _read(self, timeout_s: float, nonce: bytes | None = None) -> Reply:
        buf, deadline = self._pending, time.monotonic() + timeout_s
        while True:
            reply = self._parse(buf, nonce)
            if reply is not None:
                return reply
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Timeout()
            ready, _, _ = select.select([self._fd], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(self._fd, 65536)
            if not chunk:
                code = self.proc.wait()
                raise _Died(f"coqtop exited with status {code}: {buf[-300:].decode('utf-8', 'replace').strip()}")
            buf += chunk
            if len(buf) > _MAX_BUFFER:
                buf = buf[:65536] + b"\n[... output truncated ...]\n" + buf[-65536:]

    def _parse(self, buf: bytes, nonce: bytes | None) -> Reply | None:
        """The reply in ``buf`` once complete (``_pending`` keeps what follows), else None."""
        if nonce is None:  # the banner: nothing of the model's has been sent yet
            match = _PROMPT.search(buf)
            if match is None:
                return None
            self._pending = buf[match.end() :]
            return Reply(buf[: match.start()].decode("utf-8", "replace"), int(match.group(2)), match.group(1).decode())
        at = buf.find(nonce)
        end = _PROMPT.search(buf, at) if at >= 0 else None
        if end is None:
            return None
        self._pending = buf[end.end() :]
        prompts = list(_PROMPT.finditer(buf, 0, at))
        if not prompts:
            raise _Desync("coqtop read the sentence and the sync command as one")
        real = prompts[-1]
        return Reply(buf[: real.start()].decode("utf-8", "replace"), int(real.group(2)), real.group(1).decode())

    def kill(self) -> None:
        self._finalizer()


def _kill_group(proc: subprocess.Popen, workdir: str) -> None:
    """End coqtop's process group and remove its working directory."""
    kill_process_group(proc)
    shutil.rmtree(workdir, ignore_errors=True)


class CoqBackend(ProverBackend):
    """Coq through ``coqtop`` (Debian ``coq`` 8.16 + ``libcoq-coquelicot``)."""

    name = "coq"
    language = "coq"

    def __init__(
        self, coqtop: str = "coqtop", memory_limit_mb: int = 4096, load_timeout_s: float = 120.0,
        prelude: str = DEFAULT_PRELUDE,
    ):  # fmt: skip
        self.coqtop = shutil.which(coqtop) or coqtop
        self.memory_limit_mb = memory_limit_mb
        self.load_timeout_s = load_timeout_s
        self.prelude = prelude

    def available(self) -> tuple[bool, str]:
        if shutil.which(self.coqtop) is None:
            return False, f"coqtop not found ({self.coqtop!r}): {INSTALL_HINT}, or set coqtop=/path/to/coqtop"
        version = coq_version(self.coqtop)
        if version is None:
            return False, f"{self.coqtop} -v failed: {INSTALL_HINT}"
        return True, f"Coq {version}"

    def version(self) -> str | None:
        return coq_version(self.coqtop)

    def open(self, header: str, statement: str, recycle: ProofState | None = None) -> CoqProofState:
        """A proof of ``statement`` after ``prelude`` and ``header``; ``recycle`` (a finished proof state of this
        backend) lends its coqtop when it loaded the same header: ``BackTo`` the state after the header is exact and
        saves starting coqtop and loading the libraries again. Otherwise ``recycle`` is closed."""
        ok, reason = self.available()
        if not ok:
            if recycle is not None:
                recycle.close()
            raise ProverUnavailable(reason)
        return CoqProofState(self, header, statement, recycle if isinstance(recycle, CoqProofState) else None)

    def check_tactic(self, tactic: str) -> Checked:
        return check_coq_action(tactic)


class CoqProofState(SessionProofState):
    """One theorem in one coqtop: load the header and statement, ``Proof.``, then one action per ``run``."""

    def __init__(self, backend: CoqBackend, header: str, statement: str, recycle: CoqProofState | None = None):
        self.backend = backend
        self.header, self.statement = header, statement
        self.accepted: list[str] = []
        self._pieces: list[tuple[str, ...]] = []  #: the sentences of each accepted action, for replays
        self._goals = ""
        self._complete = False
        self._lock = threading.Lock()
        self.session: CoqSession | None = None
        self._header_state: int | None = None  #: coqtop's state number right after prelude and header
        self.restarts = 0
        self.reused = False  #: True when this proof runs in the coqtop of a previous one
        if recycle is not None and self._adopt(recycle):
            return
        self._start(self.backend.load_timeout_s)

    # ---- the interface (``run``, ``goals`` and ``complete`` are inherited) --------------------------------------
    @property
    def pid(self) -> int | None:
        return self.session.pid if self.session else None

    def close(self) -> None:
        if self.session is not None:
            self.session.kill()
            self.session = None

    # ---- internals ------------------------------------------------------------------------------------------------
    def _send(self, pieces: tuple[str, ...], timeout_s: float) -> StepResult:
        session = self.session
        before = session.last.state
        for piece in pieces:
            prev = session.last.state
            reply = session.send(piece, timeout_s)
            error = reply.error or (None if reply.state > prev else "The prover did not advance.")
            if error:
                if session.last.state != before:  # an earlier bullet of this action went through: undo it
                    self._back_to(before, timeout_s)
                return StepResult("rejected", self._goals, (error,))
        goals = self._show(timeout_s)
        if goals.startswith("No more goals."):
            reply = session.send("Qed.", timeout_s)
            if reply.error and _FOCUSED.search(reply.error):  # an open '{': the model closes it with '}' next
                goals += "\nClose the open focus with '}' to finish the proof."
            elif reply.error:
                self._back_to(before, timeout_s)
                return StepResult("rejected", self._goals, ("No goals remain, but Qed failed: " + reply.error,))
            else:
                self._complete, goals = True, ""
        self._goals = goals
        self.accepted.append(" ".join(pieces))
        self._pieces.append(pieces)
        return StepResult("accepted", goals, (), complete=self._complete)

    def _show(self, timeout_s: float) -> str:
        reply = self.session.send("Show.", timeout_s)
        if reply.error:
            return ""
        return clean_goals(reply.output)

    def _back_to(self, state: int, timeout_s: float) -> None:
        reply = self.session.send(f"BackTo {state}.", timeout_s)
        if reply.error:
            raise _Died(f"could not undo the action: {reply.error}")
        self.session.send("Show.", timeout_s)  # coqtop prints the restored goals on the next command: absorb them

    def _lost(self, exc: SessionLost, timeout_s: float) -> tuple[Status, str]:
        if isinstance(exc, _Desync):  # the model's text, not the prover, is at fault
            return "rejected", "Malformed tactic: the prover did not read it as one sentence; it was restarted."
        return super()._lost(exc, timeout_s)

    def _adopt(self, old: CoqProofState) -> bool:
        """Take over ``old``'s coqtop when it loaded the same header; True when this proof is open in it."""
        session, state = old.session, old._header_state
        same = (old.backend.prelude, old.header) == (self.backend.prelude, self.header)
        old.session = None  # the session now belongs to this proof (or is killed below)
        if session is None or state is None or not same or not session.alive:
            if session is not None:
                session.kill()
            return False
        self.session, self._header_state = session, state
        timeout = self.backend.load_timeout_s
        try:
            if session.send(f"BackTo {state}.", timeout).error:
                raise _Died("BackTo failed")
            self._open_statement(timeout)
            self._goals = self._show(timeout)
        except (_Timeout, _Died, ProblemLoadError):
            self.close()
            return False  # a fresh coqtop decides (and reports) whether the statement loads
        self.reused = True
        return True

    def _start(self, timeout_s: float) -> None:
        """Start coqtop, load prelude, header and statement, ``Proof.``, replay accepted actions, read the goals."""
        try:
            self.session = CoqSession(self.backend.coqtop, self.backend.memory_limit_mb, timeout_s)
        except (_Timeout, _Died, OSError) as exc:
            raise ProverUnavailable(f"coqtop did not start: {exc}") from None
        try:
            self._send_all(self.backend.prelude, "prelude", timeout_s)
            self._send_all(self.header, "header", timeout_s)
            self._header_state = self.session.last.state
            self._open_statement(timeout_s)
            for pieces in self._pieces:
                for piece in pieces:
                    reply = self.session.send(piece, timeout_s)
                    if reply.error:
                        raise ProblemLoadError(f"replaying {piece!r} failed: {reply.error}")
            self._goals = self._show(timeout_s)
        except (_Timeout, _Died) as exc:
            self.close()
            raise ProblemLoadError(f"coqtop failed while loading the theorem: {exc or 'timeout'}") from None
        except BaseException:
            self.close()
            raise

    def _send_all(self, text: str, what: str, timeout_s: float) -> None:
        """Send every sentence of ``text`` (the prelude or a header), one per write; an error is a load error."""
        try:
            sentences, rest = coq_sentences(text)
        except ValueError as exc:
            raise ProblemLoadError(f"cannot parse the {what}: {exc}") from None
        if rest:
            raise ProblemLoadError(f"unterminated sentence in the {what}: {rest[:80]!r}")
        for sentence in sentences:
            reply = self.session.send(sentence, timeout_s)
            if reply.error:
                raise ProblemLoadError(f"{what}: {' '.join(sentence.split())[:120]} -> {reply.error}")

    def _open_statement(self, timeout_s: float) -> None:
        try:
            statement, rest = coq_sentences(self.statement)
        except ValueError as exc:
            raise ProblemLoadError(f"cannot parse the statement: {exc}") from None
        if rest or len(statement) != 1 or is_focus_marker(statement[0]):
            raise ProblemLoadError("the statement must be exactly one sentence")
        for sentence in (statement[0], "Proof."):
            reply = self.session.send(sentence, timeout_s)
            if reply.error:
                raise ProblemLoadError(f"{' '.join(sentence.split())[:120]} -> {reply.error}")
        if self.session.last.proof == "Coq":
            raise ProblemLoadError("the statement did not open a proof")
