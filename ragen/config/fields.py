"""How a config field is declared: ``option`` gives every field its doc and, for numbers and closed sets of
strings, the values it allows (``Range``, ``choices``), checked once, by the field itself, when the object is built.

Like pydantic's ``Field(ge=..., le=...)``: the doc, the default and the range sit on the field, so a reader sees
them together, docs/config.md prints them, and nothing re-checks the value elsewhere.
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from ragen.errors import ConfigError


@attrs.frozen
class Range:
    """The values a numeric field allows: an interval (``lo``/``hi``, open or closed, None = unbounded) plus
    special values outside it (``also``, e.g. 0 = off, -1 = all). ``text`` replaces the generated wording and
    ``why`` is appended to the error (both optional)."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    also: tuple = ()
    text: str = ""
    why: str = ""

    def __contains__(self, value: float) -> bool:
        if value in self.also:
            return True
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            return False
        return self.hi is None or (value < self.hi if self.hi_open else value <= self.hi)

    def __str__(self) -> str:
        if self.text:
            return self.text
        if self.lo is not None and self.hi is not None:
            text = f"in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}{')' if self.hi_open else ']'}"
        elif self.lo is not None:
            text = f"{'>' if self.lo_open else '>='} {self.lo:g}"
        else:
            text = f"{'<' if self.hi_open else '<='} {self.hi:g}"
        return " or ".join([*(f"{v:g}" for v in self.also), text])


POSITIVE = Range(0, lo_open=True)
NON_NEGATIVE = Range(0)
AT_LEAST_1 = Range(1)
FRACTION = Range(0, 1, lo_open=True)  # (0, 1]
PROBABILITY = Range(0, 1)  # [0, 1]
SEED = Range(0, 2**32 - 1)  # numpy's seed range

Choices = tuple[str, ...] | re.Pattern


def option(default: Any = attrs.NOTHING, doc: str = "", *, factory: Any = None, range: Range | None = None,
           choices: Choices | None = None, validator: Any = None, **kwargs: Any) -> Any:
    """An attrs field with a doc string (``metadata["doc"]``) and, optionally, the values it allows: ``range`` for
    a number (None always passes: it means "the default"), ``choices`` for a string (a tuple, or a pattern that
    must match whole) or for each item of a tuple of strings (distinct). A value outside raises a one-line
    ``ConfigError`` naming the field, the value and what is allowed; ``structure`` prefixes the section path.
    Every config field in ragen is declared this way."""
    if not doc:
        raise TypeError("every config field needs a doc string")
    metadata = {"doc": doc, "range": range, "choices": choices}
    checks = [v for v in (_range_check(range), _choices_check(choices), validator) if v is not None]
    if checks:
        kwargs["validator"] = checks if len(checks) > 1 else checks[0]
    if factory is not None:
        return attrs.field(factory=factory, metadata=metadata, **kwargs)
    return attrs.field(default=default, metadata=metadata, **kwargs)


def _range_check(allowed: Range | None):
    if allowed is None:
        return None

    def check(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is not None and isinstance(value, (int, float)) and value not in allowed:
            why = f" ({allowed.why})" if allowed.why else ""
            raise ConfigError(f"{attribute.name}: must be {allowed}, got {value!r}{why}")

    return check


def shown(allowed: Choices) -> str:
    """How a closed set of values reads in a message and in docs/config.md."""
    return allowed.pattern if isinstance(allowed, re.Pattern) else ", ".join(map(repr, allowed))


def allows(allowed: Choices, value: Any) -> bool:
    if isinstance(allowed, re.Pattern):
        return isinstance(value, str) and bool(allowed.fullmatch(value))
    return value in allowed


def _choices_check(allowed: Choices | None):
    if allowed is None:
        return None

    def check(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
        if isinstance(value, tuple):  # a tuple of names: each from the set, none twice
            if any(not allows(allowed, v) for v in value) or len(set(value)) != len(value):
                raise ConfigError(f"{attribute.name}: expected distinct names from {shown(allowed)}, got {list(value)}")
        elif not allows(allowed, value):
            raise ConfigError(f"{attribute.name}: expected one of {shown(allowed)}, got {value!r}")

    return check
