"""The prover-backend interface (spec 11): a backend opens a proof state for a theorem; the state runs tactics.

``ProverBackend.open(header, statement)`` returns a ``ProofState`` positioned right after ``Proof.`` (Coq) or at the
``sorry`` of ``statement := by sorry`` (Lean 4). ``ProofState.run(tactic, timeout_s)`` returns a ``StepResult``:

* ``accepted``: the prover ran the tactic without error and the proof state advanced; ``goals`` are the new goals;
* ``rejected``: an error (or the tactic policy) refused it; the proof state is unchanged;
* ``timeout``: the tactic ran past ``timeout_s`` (or killed the prover); the prover was restarted and the state
  before the tactic restored, so this is a rejection too.

``complete`` is True once the theorem is proved (Coq: ``Qed.`` accepted; Lean 4: no goals and no error).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from typing import Literal

import attrs

Status = Literal["accepted", "rejected", "timeout"]


class ProverUnavailable(RuntimeError):
    """The prover (binary, toolchain or server) is missing or does not start; the message says how to fix it."""


class ProblemLoadError(RuntimeError):
    """The theorem's header or statement does not load in this prover (e.g. a missing library)."""


class SessionLost(Exception):
    """A prover process stopped answering while it ran something: it died, or (``SessionTimeout``) took too long."""


class SessionTimeout(SessionLost):
    """The prover did not answer within the time limit."""


@attrs.frozen
class StepResult:
    """What one tactic did."""

    status: Status
    goals: str  #: the goals after the step (unchanged unless accepted); "" once no goals remain
    messages: tuple[str, ...] = ()  #: prover feedback (errors first), plain text
    complete: bool = False  #: the theorem is proved

    @property
    def accepted(self) -> bool:
        return self.status == "accepted"


class ProofState:
    """One open proof in a live prover session; ``close()`` releases the session (idempotent).

    ``run`` applies the prover language's tactic policy and refuses a finished proof; ``_execute`` does the rest.
    Subclasses hold ``backend``, ``accepted``, ``_goals`` and ``_complete``."""

    backend: ProverBackend
    #: tactics the prover accepted so far, in order (what a restart replays)
    accepted: list[str]
    _goals: str
    _complete: bool

    def run(self, tactic: str, timeout_s: float) -> StepResult:
        checked = self.backend.check_tactic(tactic)
        if not checked.ok:
            return StepResult("rejected", self._goals, (checked.error,))
        if self._complete:
            return StepResult("rejected", self._goals, ("The proof is already complete.",), complete=True)
        return self._execute(checked.pieces, timeout_s)

    def _execute(self, pieces: tuple[str, ...], timeout_s: float) -> StepResult:
        """Run one action that passed the policy (its sentences, or a single tactic)."""
        raise NotImplementedError

    def goals(self) -> str:
        """The current goals as the prover prints them ("" when none remain)."""
        return self._goals

    @property
    def complete(self) -> bool:
        return self._complete

    def close(self) -> None:
        raise NotImplementedError


class ProverBackend:
    """A prover: ``available()`` says whether it can run here (and why not); ``open`` starts a proof."""

    name: str = "prover"
    language: str = "coq"  #: ``coq`` or ``lean``: how answers are split and tactics checked

    def available(self) -> tuple[bool, str]:
        raise NotImplementedError

    def open(self, header: str, statement: str, recycle: ProofState | None = None) -> ProofState:
        """Start a proof of ``statement`` after ``header``. ``recycle`` is the caller's finished proof state: the
        backend may reuse its prover process (same header) and otherwise closes it. Raises ``ProblemLoadError`` when
        the theorem does not load and ``ProverUnavailable`` when the prover cannot run."""
        raise NotImplementedError

    def check_tactic(self, tactic: str):
        """The tactic policy of this prover's language (``tactics.Checked``)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release shared resources (HTTP sessions); proof states close themselves."""


class SessionProofState(ProofState):
    """A proof in a live prover process (coqtop, the Lean REPL) that is killed and restarted, with the proof replayed,
    when a tactic hangs or kills it. Subclasses also hold ``restarts`` and ``_lock``, and implement ``pid`` (None
    once closed), ``_send``, ``_start`` and ``close``."""

    restarts: int
    _lock: threading.Lock

    @property
    def pid(self) -> int | None:
        raise NotImplementedError

    def _send(self, pieces: tuple[str, ...], timeout_s: float) -> StepResult:
        """Run one action in the prover; raises ``SessionLost`` when it times out or dies."""
        raise NotImplementedError

    def _start(self, timeout_s: float) -> None:
        """Start a prover, load the header and statement and replay ``accepted``."""
        raise NotImplementedError

    def run(self, tactic: str, timeout_s: float) -> StepResult:
        with self._lock:  # one action at a time, even if a caller shares the state across threads
            return super().run(tactic, timeout_s)

    def _execute(self, pieces: tuple[str, ...], timeout_s: float) -> StepResult:
        if self.pid is None:
            raise ProverUnavailable(f"the {self.backend.name} session is closed")
        try:
            return self._send(pieces, timeout_s)
        except SessionLost as exc:
            return self._recover(exc, timeout_s)

    def _lost(self, exc: SessionLost, timeout_s: float) -> tuple[Status, str]:
        """The step's status and message when the prover was lost running it."""
        if isinstance(exc, SessionTimeout):
            return "timeout", f"Timeout: the tactic ran longer than {timeout_s:g} s; the prover was restarted."
        return "timeout", f"The prover died while running the tactic ({exc}); it was restarted."

    def _recover(self, exc: SessionLost, timeout_s: float) -> StepResult:
        """Kill the prover, start a new one and replay the accepted actions; report what happened."""
        status, message = self._lost(exc, timeout_s)
        self.restarts += 1
        self.close()
        try:
            self._start(max(timeout_s, self.backend.load_timeout_s))
        except (ProblemLoadError, ProverUnavailable) as again:
            raise ProverUnavailable(f"could not restore the proof after a restart: {again}") from None
        return StepResult(status, self._goals, (message,))


def kill_process_group(proc: subprocess.Popen) -> None:
    """SIGKILL a prover's process group (it was started with ``start_new_session``), reap it and close its pipes."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
        pass
    for pipe in (proc.stdin, proc.stdout):
        try:
            pipe.close()
        except OSError:
            pass
