"""Is a predicted answer equal to the gold one? Numeric, then symbolic, then string equality (spec §7).

(1) numeric: both sides read entirely as an integer, decimal, ``a/b`` or ``\\frac{a}{b}`` (after stripping
``\\boxed{}``, ``$``, ``%``, a trailing period and thousands separators) -> exact rational comparison (relative 1e-6
with a rounded decimal); this decides. (2) symbolic, otherwise: math-verify or sympy in a worker process with a
timeout (``symbolic.py``); a timeout counts as wrong. (3) fallback: equal normalised strings.

The cheap string test runs before the symbolic one: it can only add "equal" verdicts that (3) would add anyway, and
it spares a worker round trip for the expert's verbatim answers.
"""

from __future__ import annotations

import time
import weakref

import attrs

from ragen_metamathqa.answers import (
    has_digit,
    normalize_string,
    numbers_equal,
    parse_number,
)
from ragen_metamathqa.size import size_reason
from ragen_metamathqa.symbolic import SymbolicPool, acquire_pool, release_pool

#: answers longer than this never go to the symbolic checker (they are compared as strings only)
SYMBOLIC_MAX_CHARS = 300


@attrs.frozen
class Grade:
    correct: bool
    method: str  #: numeric | symbolic | string | none
    timed_out: bool = False


class AnswerGrader:
    """Grades answers against gold strings; owns one reference to the shared symbolic worker pool.

    The cost of a symbolic check is bounded by a general rule, not by a list of forms: a check first gets
    ``quick_s`` (default a tenth of ``timeout_s``) to read both answers and compare them by value, and only an answer
    numerically equal to the gold gets ``timeout_s`` for the full check (``symbolic.staged_check``). And all the
    symbolic checks of one episode (``start_episode``) together get ``budget_s`` (default twice ``timeout_s``): a
    client serving itself crafted answers from many attempts cannot hold the shared workers beyond it, so the other
    clients' checks keep their turn."""

    def __init__(self, symbolic: bool = True, backend: str = "auto", timeout_s: float = 5.0, workers: int = 2,
                 quick_s: float | None = None, budget_s: float | None = None):
        self.timeout_s = float(timeout_s)
        self.quick_s = min(float(quick_s) if quick_s is not None else self.timeout_s / 10, self.timeout_s)
        self.budget_s = float(budget_s) if budget_s is not None else 2 * self.timeout_s
        self.spent_s = 0.0  #: symbolic seconds of the current episode
        self._pool: SymbolicPool | None = acquire_pool(backend, workers) if symbolic else None
        # an env dropped without close() still gives its reference back when it is collected
        self._release = weakref.finalize(self, release_pool, self._pool) if self._pool is not None else None

    @property
    def backend(self) -> str | None:
        return self._pool.backend if self._pool is not None else None

    def grade(self, gold: str, pred: str) -> Grade:
        gold, pred = str(gold).strip(), str(pred).strip()
        g, p = parse_number(gold), parse_number(pred)
        if g is not None and p is not None:
            return Grade(numbers_equal(g, p), "numeric")
        if normalize_string(gold) == normalize_string(pred):
            return Grade(True, "string")
        if not self._worth_symbolic(gold, pred, g):
            return Grade(False, "none")
        if absurd_reason(pred) or absurd_reason(gold):  # wrong without asking a solver that might never finish
            return Grade(False, "rejected")
        left = self.budget_s - self.spent_s
        if left <= 0:  # this episode used its symbolic time: wrong, as if the check had run out of time
            return Grade(False, "symbolic", timed_out=True)
        timeout = min(self.timeout_s, left)
        start, warm = time.monotonic(), self._pool.warm
        try:
            equal = self._pool.equal(gold, pred, timeout, quick=min(self.quick_s, timeout))
        finally:
            if warm:  # a cold pool's start-up (importing sympy) is the process's cost, not this episode's
                self.spent_s += time.monotonic() - start
        if equal is None:
            return Grade(False, "symbolic", timed_out=True)
        return Grade(equal, "symbolic")

    def start_episode(self) -> None:
        """A new episode: its symbolic checks get a fresh ``budget_s``."""
        self.spent_s = 0.0

    def _worth_symbolic(self, gold: str, pred: str, gold_number) -> bool:
        if self._pool is None or not pred or len(pred) > SYMBOLIC_MAX_CHARS or len(gold) > SYMBOLIC_MAX_CHARS:
            return False
        # a rational gold cannot equal text without a single digit ("hello", "x"): no need for a worker
        return not (gold_number is not None and not has_digit(pred))

    def close(self) -> None:
        if self._release is not None:
            self._release()  # runs release_pool once, however often close() is called
        self._pool = None


# ---- absurd expressions: refused before any solver sees them --------------------------------------------------------
def absurd_reason(text: str) -> str | None:
    """Why ``text`` is too big to give a solver (a huge number, exponent, factorial, binomial, expansion or tower), or
    None: the bounds of ``size.size_reason``. Pure string work bounded by the answer's length (answers over
    ``SYMBOLIC_MAX_CHARS`` never get here)."""
    return size_reason(text)
