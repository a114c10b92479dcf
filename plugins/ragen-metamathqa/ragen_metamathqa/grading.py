"""Is a predicted answer equal to the gold one? Numeric, then symbolic, then string equality (spec §7).

(1) numeric: both sides read entirely as an integer, decimal, ``a/b`` or ``\\frac{a}{b}`` (after stripping
``\\boxed{}``, ``$``, ``%``, a trailing period and thousands separators) -> exact rational comparison (relative 1e-6
with a rounded decimal); this decides. (2) symbolic, otherwise: math-verify or sympy in a worker process with a
timeout (``symbolic.py``); a timeout counts as wrong. (3) fallback: equal normalised strings.

The cheap string test runs before the symbolic one: it can only add "equal" verdicts that (3) would add anyway, and
it spares a worker round trip for the expert's verbatim answers.
"""

from __future__ import annotations

import ast
import math
import operator
import re
import weakref

import attrs

from ragen_metamathqa.answers import (
    has_digit,
    normalize_string,
    numbers_equal,
    parse_number,
)
from ragen_metamathqa.symbolic import SymbolicPool, _braced, acquire_pool, release_pool

#: answers longer than this never go to the symbolic checker (they are compared as strings only)
SYMBOLIC_MAX_CHARS = 300
#: exponents beyond this (in absolute value) make an answer absurd: no grade-school or competition answer needs
#: ``x^{10001}``, and ``9^{9^{9}}`` (a 369-million-digit integer) is what stalls a solver for minutes
MAX_EXPONENT = 10_000
#: more nested ``^`` levels than this (``a^{b^{c^{d^{e}}}}``, symbolic or not) are absurd too
MAX_TOWER = 3
#: a constant whose decimal expansion would exceed this many digits is absurd
MAX_DIGITS = 100_000
#: ``n!`` beyond this is absurd
MAX_FACTORIAL = 10_000


@attrs.frozen
class Grade:
    correct: bool
    method: str  #: numeric | symbolic | string | none
    timed_out: bool = False


class AnswerGrader:
    """Grades answers against gold strings; owns one reference to the shared symbolic worker pool."""

    def __init__(self, symbolic: bool = True, backend: str = "auto", timeout_s: float = 5.0, workers: int = 2):
        self.timeout_s = float(timeout_s)
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
        equal = self._pool.equal(gold, pred, self.timeout_s)
        if equal is None:
            return Grade(False, "symbolic", timed_out=True)
        return Grade(equal, "symbolic")

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
_EXP_TOKEN = re.compile(r"\s*(-?\d+(?:\.\d+)?|[A-Za-z]|\\[A-Za-z]+)")
_FACTORIAL = re.compile(r"(\d+)\s*!")


def absurd_reason(text: str) -> str | None:
    """Why ``text`` is too big to give a solver (a huge exponent, a high power tower, a huge factorial), or None.

    Pure string work bounded by the answer's length (answers over ``SYMBOLIC_MAX_CHARS`` never get here)."""
    s = text.replace("**", "^").replace("\\left", "").replace("\\right", "")
    if _tower_height(s) > MAX_TOWER:
        return f"more than {MAX_TOWER} nested powers"
    for base, exponent in _powers(s):
        value = _const_value(exponent)
        if value is not None and (math.isnan(value) or abs(value) > MAX_EXPONENT):
            return f"an exponent beyond {MAX_EXPONENT}"
        b = _const_value(base) if base else None
        if value is not None and b is not None and abs(b) > 1 and value * math.log10(abs(b)) > MAX_DIGITS:
            return f"a power with more than {MAX_DIGITS} digits"
    if any(int(n) > MAX_FACTORIAL for n in _FACTORIAL.findall(s)):
        return f"a factorial beyond {MAX_FACTORIAL}!"
    return None


def _exponent_at(s: str, i: int) -> tuple[str, int] | None:
    """The exponent written at ``s[i]`` (a braced or parenthesised group, a number, a letter or a command)."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i < len(s) and s[i] in "{(":
        group = _braced(s.replace("(", "{").replace(")", "}") if s[i] == "(" else s, i)
        return group
    m = _EXP_TOKEN.match(s, i)
    if m is None:
        return None
    rest = s[m.end():].lstrip(" ")
    if rest.startswith("^"):  # ``9^9^9``: solvers read it as 9^(9^9), so the exponent is ``9^9``
        inner = _exponent_at(s, len(s) - len(rest) + 1)
        if inner is not None:
            return f"{m.group(1)}^{{{inner[0]}}}", inner[1]
    return m.group(1), m.end()


def _powers(s: str) -> list[tuple[str, str]]:
    """(base token, exponent text) of every ``^`` in ``s``, nested ones included."""
    out = []
    for i, ch in enumerate(s):
        if ch != "^":
            continue
        exponent = _exponent_at(s, i + 1)
        if exponent is None:
            continue
        base = re.search(r"(\d+(?:\.\d+)?)\s*}?\s*$", s[:i])  # a literal base right before (``10^``, ``{9}^``)
        out.append((base.group(1) if base else "", exponent[0]))
    return out


def _tower_height(s: str, depth: int = 0) -> int:
    """How many ``^`` levels nest in ``s`` (``x^2`` is 1, ``x^{y^2}`` is 2)."""
    if depth > MAX_TOWER:
        return depth
    height = 0
    for i, ch in enumerate(s):
        if ch == "^":
            exponent = _exponent_at(s, i + 1)
            height = max(height, 1 + (_tower_height(exponent[0], depth + 1) if exponent else 0))
    return height


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def _const_value(text: str) -> float | None:
    """The value of a constant exponent (numbers, + - * /, powers, \\cdot), inf when it overflows; None when it is
    symbolic or unreadable."""
    expr = text.replace("\\cdot", "*").replace("\\times", "*").replace("{", "(").replace("}", ")").replace("^", "**")
    if not expr.strip() or re.search(r"[^0-9+\-*/(). ]", expr):
        return None
    try:
        return _eval(ast.parse(expr.strip(), mode="eval").body)
    except (SyntaxError, ValueError, TypeError, ZeroDivisionError, OverflowError, RecursionError):
        return None


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _eval(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_eval(node.left), _eval(node.right))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        base, exponent = _eval(node.left), _eval(node.right)
        if abs(base) > 1 and exponent * math.log10(abs(base)) > 300:
            return math.inf  # too big for a float: certainly beyond every limit above
        return float(base) ** exponent
    raise ValueError("not a constant")
