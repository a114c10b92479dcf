"""Ctrl-C that loses nothing: the first SIGINT only asks the running loop to stop at its next safe point (after the
current training step or SFT update, where it checkpoints); a second SIGINT stops at once (KeyboardInterrupt)."""

from __future__ import annotations

import signal
import sys
import threading


class GracefulInterrupt:
    """Within ``with GracefulInterrupt(what) as stop:``, ``stop.requested`` turns True at the first SIGINT.

    Outside the main thread (signal handlers cannot be set there) it does nothing and Ctrl-C behaves as usual.
    """

    def __init__(self, what: str = "the current step"):
        self.what, self.requested, self._previous = what, False, None

    def __enter__(self) -> GracefulInterrupt:
        global _active
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            _active = self
        return self

    def __exit__(self, *exc) -> None:
        global _active
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous, _active = None, None

    def __call__(self) -> bool:
        return self.requested

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        # a plain line, not a log event, written around any progress bar (tqdm.write)
        from tqdm import tqdm

        tqdm.write(f"interrupt: finishing {self.what}, then saving (Ctrl-C again stops at once, losing it)",
                   file=sys.stderr)


_active: GracefulInterrupt | None = None


def requested() -> bool:
    """A first Ctrl-C arrived inside an active ``GracefulInterrupt`` (loops poll this at their safe points)."""
    return _active is not None and _active.requested
