"""Safe checking of Countdown answers (environments.md §5): an AST whitelist and exact rational arithmetic.

Nothing in an answer is ever executed. Two layers: (1) a character whitelist (ASCII digits, whitespace, ``+ - * /``,
parentheses and ``× ÷ −``), so letters, quotes, dots, brackets... never reach the parser (and it cannot warn about
escape sequences or odd literals); (2) the text is only *parsed* (``ast.parse``, which builds a syntax tree and runs
no code) and every node is checked against a whitelist (an ``Expression`` holding ``BinOp`` nodes with ``+ - * /``
over non-negative decimal ``int`` literals). The tree is evaluated here with ``fractions.Fraction`` so ``/`` is
exact. Names, calls, attribute access, subscripts, unary operators, floats, ``**`` and anything else are *malformed*.

Reward (RAGEN): 1.0 when the multiset of literals equals ``nums`` and the value equals the target; 0.1 when the
multiset matches but the value does not (division by zero and out-of-range values included); 0 otherwise.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Sequence
from fractions import Fraction

import attrs

MAX_ANSWER_CHARS = 200  #: longer answers are malformed (spec §5)
MAX_BITS = 1024  #: a numerator or denominator above this many bits aborts evaluation (guard on huge intermediates)
#: the Unicode operator signs models write, mapped to Python's
UNICODE_OPS = str.maketrans({"×": "*", "÷": "/", "−": "-"})
_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_DIGITS = re.compile(r"[0-9]+")
ALLOWED_CHARS = frozenset("0123456789+-*/() \t\r\n×÷−")
_WORD = re.compile(r"[^\W\d]\w*")  # an identifier-like word, for the message

CORRECT, WRONG_VALUE, WRONG_NUMBERS, MALFORMED = "correct", "wrong_value", "wrong_numbers", "malformed"
REWARDS = {CORRECT: 1.0, WRONG_VALUE: 0.1, WRONG_NUMBERS: 0.0, MALFORMED: 0.0}


class MalformedAnswer(ValueError):
    """The answer is not an arithmetic expression of the allowed form; the message says why."""


class EvaluationError(ArithmeticError):
    """A well-formed expression without a value: division by zero or an intermediate beyond ``MAX_BITS``."""


@attrs.frozen
class Verdict:
    """The outcome of checking one answer."""

    status: str  #: correct | wrong_value | wrong_numbers | malformed
    message: str  #: one sentence for the feedback observation
    numbers: tuple[int, ...] | None = None  #: the literals of a well-formed answer, in reading order
    value: Fraction | None = None  #: its exact value (None if malformed, not evaluated, or no value)

    @property
    def reward(self) -> float:
        return REWARDS[self.status]

    @property
    def parses(self) -> bool:
        return self.status != MALFORMED


# ---- parsing ---------------------------------------------------------------------------------------------------------
def parse(text: str, max_chars: int = MAX_ANSWER_CHARS) -> ast.expr:
    """The whitelisted syntax tree of ``text``; raises ``MalformedAnswer`` naming the first offending construct."""
    if not isinstance(text, str):
        raise MalformedAnswer(f"expected text, got {type(text).__name__}")
    text = text.strip()
    if not text:
        raise MalformedAnswer("the answer is empty")
    if len(text) > max_chars:
        raise MalformedAnswer(f"the answer has {len(text)} characters; at most {max_chars} are allowed")
    bad = next((ch for ch in text if ch not in ALLOWED_CHARS), None)
    if bad is not None:
        raise MalformedAnswer(_char_message(text, bad))
    source = text.translate(UNICODE_OPS)
    try:
        tree = ast.parse(source, mode="eval")  # parsing only: builds a tree, executes nothing
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise MalformedAnswer(
            f"not an arithmetic expression ({type(exc).__name__}: {getattr(exc, 'msg', exc)})"
        ) from None
    check_tree(tree.body, source)
    return tree.body


def _char_message(text: str, ch: str) -> str:
    if ch == "_" or ch.isalpha():
        word = _WORD.search(text[text.index(ch):])
        name = word.group() if word else ch
        return f"names such as {name!r} are not allowed (no variables, functions or words)"
    if ch == ".":
        return "'.' is not allowed (no decimals, no attribute access)"
    if ch == "=":
        return "'=' is not allowed; write only the expression, e.g. 2 + 5 - 3"
    return f"the character {ch!r} is not allowed; use numbers, + - * / and parentheses only"


def check_tree(node: ast.AST, source: str) -> None:
    """Walk the tree iteratively (no recursion limit to hit) and reject every node outside the whitelist."""
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.BinOp):
            if type(node.op) not in _OPS:
                raise MalformedAnswer(f"the operator {_describe(node.op)} is not allowed; use + - * / only")
            stack += (node.right, node.left)
        elif isinstance(node, ast.Constant):
            value = node.value
            if type(value) is not int:  # bool is an int subclass: `type(...) is int` keeps True/False out
                raise MalformedAnswer(f"{value!r} is not allowed; only whole numbers are")
            literal = ast.get_source_segment(source, node) or ""
            if not _DIGITS.fullmatch(literal):  # 0x2C, 1_0 and the like parse as ints but are not plain numbers
                raise MalformedAnswer(f"{literal!r} is not a plain decimal number")
        else:
            raise MalformedAnswer(f"{_describe(node)} is not allowed; use numbers, + - * / and parentheses only")


def _describe(node: ast.AST) -> str:
    names = {
        ast.Name: "the name {id!r}",
        ast.Attribute: "attribute access",
        ast.Call: "a function call",
        ast.Subscript: "indexing",
        ast.UnaryOp: "a sign in front of a number (unary operator)",
        ast.Pow: "'**' (power)",
        ast.FloorDiv: "'//' (floor division)",
        ast.Mod: "'%' (modulo)",
        ast.Compare: "a comparison",
        ast.BoolOp: "'and'/'or'",
        ast.Lambda: "a lambda",
    }
    template = names.get(type(node), f"the construct {type(node).__name__!r}")
    return template.format(id=getattr(node, "id", ""))


def literals(tree: ast.expr) -> tuple[int, ...]:
    """The integer literals of a parsed answer in reading order (left to right)."""
    return tuple(n.value for n in sorted(
        (n for n in ast.walk(tree) if isinstance(n, ast.Constant)), key=lambda n: (n.lineno, n.col_offset)))


# ---- evaluation ------------------------------------------------------------------------------------------------------
def evaluate(tree: ast.expr, max_bits: int = MAX_BITS) -> Fraction:
    """Exact value of a parsed (whitelisted) tree; ``EvaluationError`` on division by zero or huge intermediates."""
    if isinstance(tree, ast.Constant):
        return _bounded(Fraction(tree.value), max_bits)
    if not isinstance(tree, ast.BinOp) or type(tree.op) not in _OPS:  # only whitelisted trees get here
        raise MalformedAnswer(f"{_describe(tree)} cannot be evaluated")
    a, b = evaluate(tree.left, max_bits), evaluate(tree.right, max_bits)
    # every operand is within max_bits (checked below), so no single operation can build more than a 2*max_bits-bit
    # number before it is refused: the guard bounds the work, not just the result
    op = _OPS[type(tree.op)]
    if op == "+":
        return _bounded(a + b, max_bits)
    if op == "-":
        return _bounded(a - b, max_bits)
    if op == "*":
        return _bounded(a * b, max_bits)
    if b == 0:
        raise EvaluationError("division by zero")
    return _bounded(a / b, max_bits)


def _bounded(x: Fraction, max_bits: int) -> Fraction:
    if x.numerator.bit_length() > max_bits or x.denominator.bit_length() > max_bits:
        raise EvaluationError(f"an intermediate value exceeds {max_bits} bits")
    return x


def fmt(x: Fraction | int) -> str:
    """``59`` or ``59/2``."""
    x = Fraction(x)
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


# ---- scoring ---------------------------------------------------------------------------------------------------------
def check_answer(answer: str, nums: Sequence[int], target: int) -> Verdict:
    """Score ``answer`` for the instance (``nums``, ``target``) without executing anything."""
    try:
        tree = parse(answer)
    except MalformedAnswer as exc:
        return Verdict(MALFORMED, f"Your answer is not a valid expression: {exc}.")
    used = literals(tree)
    if Counter(used) != Counter(nums):
        return Verdict(WRONG_NUMBERS, _numbers_message(used, nums), used)
    try:
        value = evaluate(tree)
    except EvaluationError as exc:
        return Verdict(WRONG_VALUE, f"Your expression has no value ({exc}); the target is {target}.", used)
    if value == target:
        return Verdict(CORRECT, f"Correct: it equals the target {target}.", used, value)
    return Verdict(WRONG_VALUE, f"Your expression equals {fmt(value)}, not the target {target}.", used, value)


def _numbers_message(used: Sequence[int], nums: Sequence[int]) -> str:
    extra, missing = Counter(used) - Counter(nums), Counter(nums) - Counter(used)
    parts = []
    if missing:
        parts.append("it does not use " + ", ".join(map(str, sorted(missing.elements()))))
    if extra:
        parts.append("it uses " + ", ".join(map(str, sorted(extra.elements()))) + " more often than given")
    return f"Each of the numbers {list(nums)} must be used exactly once, but " + " and ".join(parts) + "."
