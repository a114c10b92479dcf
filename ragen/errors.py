"""The small error hierarchy of ragen.

Every error the core raises on purpose is a ``RagenError``; the CLI turns these into one-line messages with a
non-zero exit (a traceback only with ``--debug``). Anything else escaping is a bug.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class RagenError(Exception):
    """Base class of every error ragen raises on purpose."""


class ConfigError(RagenError, ValueError):
    """A configuration value or key is wrong; the message names the key path."""


class UnknownNameError(RagenError, KeyError):
    """A component name is not registered; the message carries a did-you-mean when one is close."""

    def __init__(self, kind: str, name: str, known: Iterable[str]):
        self.kind, self.name, self.known = kind, name, sorted(known)
        super().__init__(f"unknown {kind} {name!r}{did_you_mean(name, self.known)}")

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]


class RegistrationError(RagenError):
    """A plugin registered a component badly (duplicate name, bad config class, ...)."""


class DuplicateNameError(RegistrationError):
    """A component name another distribution registered first; only this one component is refused."""

    def __init__(self, kind: str, name: str, first: str, second: str):
        self.kind, self.name, self.first, self.second = kind, name, first, second
        super().__init__(f"{kind} {name!r} is registered by both {first!r} and {second!r}; {second!r}'s is refused")


class PluginError(RagenError):
    """A plugin failed to load or its hook implementations do not match the hook specs."""


class EnvError(RagenError):
    """An environment was used against its contract (stepping after the end, bad options...)."""


class RemoteEnvError(EnvError, RuntimeError):
    """A served env (``env.name=remote``, or an env in a worker process) was lost or refused a request; the episode
    is dropped and counted like any env failure."""


class EnvBusy(EnvError, RuntimeError):
    """The server behind an env is at its session cap while this process holds some of those sessions: a rollout
    playing several episodes at once starts this one when one of its own episodes ends (and frees a session) instead
    of dropping it."""


class Interrupted(RagenError):
    """The user pressed Ctrl-C once: the step (or SFT update) finished, a checkpoint was written; the message says how
    to resume. The CLI prints it without ``Error:`` and exits 130, as for any interrupted command."""


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """Return ``"; did you mean 'x'?"`` for the closest known name, or a list of known names, or ``""``."""
    known = sorted(known)
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    if known and len(known) <= 12:
        return f"; known: {', '.join(known)}"
    return ""
