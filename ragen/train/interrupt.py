"""Ctrl-C that loses nothing: the first SIGINT only asks the running loop to stop at its next safe point (after the
current training step or SFT update, where it checkpoints); a second SIGINT before that point stops at once
(KeyboardInterrupt: click's "Aborted.", exit 1). Once the stop has saved its work (``saved()``), and after the block
while the process prints its resume line and exits, further SIGINTs are ignored: nothing is left to lose, and a
default handler would kill the process mid-message (the exit -2 of a machine fast enough to finish the step first)."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class GracefulInterrupt:
    """Within ``with GracefulInterrupt(what) as stop:``, ``stop.requested`` turns True at the first SIGINT.

    Outside the main thread (signal handlers cannot be set there) it does nothing and Ctrl-C behaves as usual.
    """

    def __init__(self, what: str = "the current step"):
        self.what, self.requested, self.saved, self._previous = what, False, False, None
        self.during: str | None = None  # what was running at the first Ctrl-C (``phase``)

    def __enter__(self) -> GracefulInterrupt:
        global _active
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            _active = self
        return self

    def __exit__(self, *exc) -> None:
        global _active
        if self._previous is not None:
            # after a graceful stop the process is on its way out: ignore Ctrl-C rather than restore a handler that may
            # be the default one (death by signal, no resume line)
            signal.signal(signal.SIGINT, signal.SIG_IGN if self.requested else self._previous)
            self._previous, _active = None, None

    def __call__(self) -> bool:
        return self.requested

    def _handle(self, signum, frame) -> None:
        from tqdm import tqdm

        if self.saved:
            tqdm.write("interrupt: already stopping; the work is saved", file=sys.stderr)
            return
        if self.requested:
            raise KeyboardInterrupt
        self.requested, self.during = True, self.what
        # a plain line, not a log event, written around any progress bar (tqdm.write)
        tqdm.write(f"interrupt: finishing {self.what}, then saving (Ctrl-C again stops at once, losing it)",
                   file=sys.stderr)


_active: GracefulInterrupt | None = None


@contextmanager
def phase(what: str) -> Iterator[None]:
    """Within the block, a first Ctrl-C says it is finishing ``what`` (e.g. "the greedy paired pass (after RL)")
    rather than the default of the active ``GracefulInterrupt``; nothing without one."""
    active = _active
    if active is None:
        yield
        return
    previous, active.what = active.what, what
    try:
        yield
    finally:
        active.what = previous


def during() -> str | None:
    """What was running when the first Ctrl-C arrived (None: no Ctrl-C, or no active ``GracefulInterrupt``)."""
    return _active.during if _active is not None else None


def requested() -> bool:
    """A first Ctrl-C arrived inside an active ``GracefulInterrupt`` (loops poll this at their safe points)."""
    return _active is not None and _active.requested


def saved() -> None:
    """The loop has saved its work after a requested stop: from now on a Ctrl-C is acknowledged, not obeyed."""
    if _active is not None and _active.requested:
        _active.saved = True
