"""How big an answer is, read from its text alone: refuse what no symbolic check should be asked
(a huge power such as 9^{9^{9^{9}}} cost seconds per step to check).

math-verify and sympy spend seconds to minutes on short answers such as ``9^{9^{9}}``, ``\\binom{10^9}{5*10^8}``,
``(x+1)^{9999}`` or ``9999!!`` (which both read as ``(9999!)!``): they compute the number, expand the power, or cancel
a quotient of huge polynomials. :func:`size_reason` reads the text with a small, total recursive-descent parser (LaTeX
and plain notation; unknown commands and symbols are atoms, it never raises on odd input) and bounds, for every
sub-expression, what a solver could build from it:

* ``digits``: log10 of the largest number in it (numerator and denominator of a rational; the coefficients of a
  polynomial), which factorials (``lgamma``), binomials, powers, products and sums raise as they would;
* ``terms`` and ``degree``: the monomials and total degree of its full expansion, where symbols, irrational constants
  (``\\pi``, ``\\sqrt{2}``) and function values (``\\sin x``) count as variables;
* whether it is *plain* (one monomial of symbols and constants, such as ``3x^2\\pi``): its powers stay one monomial
  whatever the exponent, while a power of anything else (a sum, a function value, a factorial) expands.

An answer is refused as soon as any bound passes a limit below. Each limit keeps every check at or under about a
quarter of a second on a loaded 2-core machine (math-verify, measured: ``(x+1)^{100}`` 0.3 s, ``(x+1)^{1000}`` 7 s,
``\\sin(x)^{100}`` 1.5 s, ``\\frac{x^{1000}-1}{x-1}`` 6 s, ``\\sqrt{9999!}`` 0.5 s) and is far beyond any answer a
math word problem or competition asks for. Pure string work, linear in the answer (whose length is capped before it
gets here), so it is safe in any thread.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

import attrs

#: constant exponents beyond this (in absolute value) are absurd: no answer needs ``x^{10001}``
MAX_EXPONENT = 10_000
#: more nested ``^`` levels than this (``a^{b^{c^{d}}}``) are absurd
MAX_TOWER = 3
#: a number of more digits than this (a value, a numerator or denominator, a coefficient) is absurd
MAX_DIGITS = 10_000
#: ``n!`` and ``\binom{n}{k}`` with min(k, n-k) beyond this are absurd (a solver multiplies that many numbers)
MAX_FACTORIAL = 10_000
#: more monomials than this once expanded are absurd (``(x+y+z+1)^{6}``, 84 of them: 0.4 s)
MAX_TERMS = 64
#: a power beyond this of anything but one monomial (a sum, ``n!``) is absurd: solvers expand it
MAX_EXPANDED_EXPONENT = 32
#: ... and beyond this when it holds function values (``(\sin x + \cos x)^{32}``: 0.7 s, trigonometric rewriting)
MAX_FUNCTION_EXPONENT = 16
#: ... and beyond this when a function's argument is itself compound (``\sin(x+1)^{8}``: 0.6 s, ``^{32}``: minutes)
MAX_COMPOUND_EXPONENT = 4
#: a root (a non-integer power) of a number of more digits than this is absurd: solvers try to factor it
#: (``\sqrt{10^{1000}+1}``: 0.13 s, ``\sqrt{10^{3000}+1}``: minutes)
MAX_ROOT_DIGITS = 500
#: a sum of monomials (a polynomial, not one monomial) of a higher total degree is absurd: cancelling or factoring it
#: is what stalls solvers (``\frac{x^{1000}-1}{x-1}``)
MAX_DEGREE = 128
#: brackets, fractions and powers nested deeper than this are absurd (and would exhaust the parser's stack)
MAX_NESTING = 40

LN10 = math.log(10)
LOG10_2 = math.log10(2)


class Absurd(Exception):
    """The answer is too big for a symbolic check; the message says why."""


@attrs.frozen
class Size:
    """Upper bounds of one sub-expression (see the module doc)."""

    terms: float = 1.0
    degree: float = 0.0
    digits: float = 0.0
    value: float | None = None  #: its (float) value when it is a constant; inf when beyond a float
    exact: bool = False  #: a rational constant: its powers and factorials are numbers
    plain: bool = True  #: one monomial of symbols and constants: its powers stay one monomial
    height: int = 0  #: nested ``^`` levels
    funcs: int = 0  #: 0: no function value in it; 1: functions of plain arguments (``\sin 2x``); 2: of compound ones

    def check(self) -> Size:
        if self.digits > MAX_DIGITS:
            raise Absurd(f"a number with more than {MAX_DIGITS} digits")
        if self.terms > MAX_TERMS:
            raise Absurd(f"more than {MAX_TERMS} terms once expanded")
        if self.terms > 1 and self.degree > MAX_DEGREE:
            raise Absurd(f"a polynomial of degree beyond {MAX_DEGREE}")
        if self.height > MAX_TOWER:
            raise Absurd(f"more than {MAX_TOWER} nested powers")
        return self


SYMBOL = Size(degree=1.0)
OPAQUE = Size(degree=1.0, plain=False)  #: a symbolic power, ``x!``...: a variable that does not stay plain


def number(text: str) -> Size:
    """A decimal literal: exact, its digits those of its reduced numerator and denominator."""
    q = Fraction(text)
    digits = _log10(q.numerator) + _log10(q.denominator)
    return Size(digits=digits, value=_float(q), exact=True).check()


def constant(value: float) -> Size:
    """An irrational constant (pi, e, sqrt 2): a variable for expansions, with a known value."""
    return Size(degree=1.0, digits=max(_log10(abs(value)), 0.0), value=value)


# ---- arithmetic on bounds -----------------------------------------------------------------------------------------
def add(a: Size, b: Size) -> Size:
    value = _sum(a.value, b.value)
    if a.exact and b.exact:
        return Size(digits=max(a.digits, b.digits) + LOG10_2, value=value, exact=True,
                    height=max(a.height, b.height)).check()
    return Size(terms=a.terms + b.terms, degree=max(a.degree, b.degree), digits=max(a.digits, b.digits) + LOG10_2,
                value=value, plain=False, height=max(a.height, b.height), funcs=max(a.funcs, b.funcs)).check()


def mul(a: Size, b: Size, divide: bool = False) -> Size:
    value = _quotient(a.value, b.value) if divide else _product(a.value, b.value)
    terms = a.terms * b.terms
    digits = a.digits + b.digits + (0.0 if divide else _log10(min(a.terms, b.terms)))
    return Size(terms=terms, degree=a.degree + b.degree, digits=digits, value=value, exact=a.exact and b.exact,
                plain=a.plain and b.plain and terms == 1, height=max(a.height, b.height),
                funcs=max(a.funcs, b.funcs)).check()


def power(base: Size, exponent: Size) -> Size:
    height = max(base.height, exponent.height + 1)
    if height > MAX_TOWER:
        raise Absurd(f"more than {MAX_TOWER} nested powers")
    e = exponent.value
    if e is None or not exponent.exact:  # a symbolic (or irrational) exponent: nothing expands
        return attrs.evolve(OPAQUE, height=height).check()
    if not math.isfinite(e) or abs(e) > MAX_EXPONENT:
        raise Absurd(f"an exponent beyond {MAX_EXPONENT}")
    n = abs(e)
    value = _pow(base.value, e)
    if base.exact:
        integer = float(n).is_integer()
        if not integer and base.digits > MAX_ROOT_DIGITS:
            raise Absurd(f"a root of a number with more than {MAX_ROOT_DIGITS} digits")
        return Size(digits=n * base.digits, value=value, exact=integer, plain=True, degree=0.0 if integer else 1.0,
                    height=height).check()
    if base.plain:  # one monomial: (3x^2)^{9999} = 3^{9999} x^{19998}
        return Size(degree=base.degree * n, digits=base.digits * n, value=value, height=height).check()
    limit = (MAX_EXPANDED_EXPONENT, MAX_FUNCTION_EXPONENT, MAX_COMPOUND_EXPONENT)[base.funcs]
    if n > limit:  # (x+1)^{9999/2} is (x+1)^{4999} sqrt(x+1) to a solver
        what = ("a sum", "a function value", "a function of a compound argument")[base.funcs]
        raise Absurd(f"a power beyond {limit} of {what}")
    if not float(n).is_integer():  # a root of a sum: a new variable, nothing expands
        return attrs.evolve(OPAQUE, height=height, funcs=base.funcs).check()
    return Size(terms=_multisets(base.terms, n), degree=base.degree * n, digits=n * (base.digits + _log10(base.terms)),
                value=value, plain=False, height=height, funcs=base.funcs).check()


def factorial(a: Size) -> Size:
    v = a.value
    if not a.exact or v is None:
        return attrs.evolve(OPAQUE, height=a.height).check()
    if not math.isfinite(v) or v > MAX_FACTORIAL:
        raise Absurd(f"a factorial beyond {MAX_FACTORIAL}!")
    if v < 0 or not float(v).is_integer():
        return attrs.evolve(OPAQUE, height=a.height).check()
    digits = math.lgamma(v + 1) / LN10
    value = float(math.factorial(int(v))) if digits < 300 else math.inf
    return Size(digits=digits, value=value, exact=True, height=a.height).check()


def binomial(n: Size, k: Size) -> Size:
    height = max(n.height, k.height)
    if n.exact and k.exact and n.value is not None and k.value is not None:
        nv, kv = n.value, k.value
        if not (math.isfinite(nv) and math.isfinite(kv)):
            raise Absurd("a binomial of an infinite number")
        if not (float(nv).is_integer() and float(kv).is_integer() and 0 <= kv <= nv):
            return attrs.evolve(OPAQUE, height=height).check()
        if min(kv, nv - kv) > MAX_FACTORIAL:
            raise Absurd(f"a binomial coefficient beyond {MAX_FACTORIAL} factors")
        digits = (math.lgamma(nv + 1) - math.lgamma(kv + 1) - math.lgamma(nv - kv + 1)) / LN10
        value = float(math.comb(int(nv), int(kv))) if digits < 300 else math.inf
        return Size(digits=digits, value=value, exact=True, height=height).check()
    if k.exact and k.value is not None:  # binomial(x, k): a polynomial of degree k in x
        kv = k.value
        if not math.isfinite(kv) or kv > MAX_EXPANDED_EXPONENT:
            raise Absurd(f"a binomial of a symbol beyond {MAX_EXPANDED_EXPONENT} factors")
        if kv < 0 or not float(kv).is_integer():
            return attrs.evolve(OPAQUE, height=height).check()
        grown = power(attrs.evolve(n, plain=False), Size(digits=_log10(kv), value=kv, exact=True))
        return attrs.evolve(grown, digits=grown.digits + math.lgamma(kv + 1) / LN10, height=height).check()
    return attrs.evolve(OPAQUE, height=height).check()


def series(body: Size, count: float | None, product: bool, height: int) -> Size:
    """``\\sum`` / ``\\prod`` of ``count`` terms (None: symbolic bounds, nothing is expanded)."""
    if count is None:
        return attrs.evolve(OPAQUE, height=max(height, body.height)).check()
    if count > MAX_TERMS:
        raise Absurd(f"a {'product' if product else 'sum'} of more than {MAX_TERMS} terms")
    count = max(count, 0.0)
    height = max(height, body.height)
    if product:
        if body.exact:
            return Size(digits=count * body.digits, value=_pow(body.value, count), exact=True, height=height).check()
        return Size(terms=body.terms ** count if body.terms > 1 else 1.0, degree=body.degree * count,
                    digits=count * (body.digits + _log10(body.terms)), plain=body.plain, height=height).check()
    if body.exact:
        return Size(digits=body.digits + _log10(count), value=_product(body.value, count), exact=True,
                    height=height).check()
    return Size(terms=body.terms * count, degree=body.degree, digits=body.digits + _log10(count), plain=False,
                height=height).check()


# ---- float helpers: never raise, inf beyond a float ---------------------------------------------------------------
def _log10(x: float | int) -> float:
    if x <= 1:
        return 0.0
    if isinstance(x, int) and x.bit_length() > 1000:
        return x.bit_length() * LOG10_2
    return math.log10(x)


def _float(q: Fraction) -> float:
    try:
        return float(q)
    except OverflowError:
        return math.inf


def _sum(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    return math.inf if math.isinf(a) or math.isinf(b) else a + b


def _product(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    if a == 0 or b == 0:
        return 0.0
    if math.isinf(a) or math.isinf(b) or _log10(abs(a)) + _log10(abs(b)) > 300:
        return math.inf
    return a * b


def _quotient(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0 or math.isinf(b):
        return None
    return math.inf if math.isinf(a) else _product(a, 1.0 / b)


def _pow(base: float | None, e: float) -> float | None:
    if base is None:
        return None
    if base == 0:
        return 0.0 if e > 0 else None
    if math.isinf(base):
        return math.inf if e > 0 else 0.0
    if abs(e) * math.log10(abs(base)) > 300:
        return math.inf
    try:
        result = abs(base) ** e
    except (OverflowError, ZeroDivisionError):
        return math.inf
    return -result if base < 0 and float(e).is_integer() and int(e) % 2 else result


def _multisets(terms: float, n: float) -> float:
    """Monomials of a sum of ``terms`` monomials raised to ``n``: C(terms + n - 1, n), inf when huge."""
    if terms <= 1:
        return 1.0
    log = math.lgamma(terms + n) - math.lgamma(n + 1) - math.lgamma(terms)
    return math.inf if log > 700 else math.exp(log)


# ---- the reader ---------------------------------------------------------------------------------------------------
_REPLACE = [
    ("**", "^"), ("\u2212", "-"), ("\u00d7", "*"), ("\u00b7", "*"), ("\u00f7", "/"), ("\u03c0", "\\pi "),
    ("\u221a", "\\sqrt "), ("\u221e", "\\infty "), ("\u2264", "\\le "), ("\u2265", "\\ge "), ("\u2260", "\\ne "),
    ("\u00b0", ""), ("$", " "),
]
_TOKEN = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+|[A-Za-z]+|\\[A-Za-z]+|\\.|.)", re.S)
_SKIP = {"\\left", "\\right", "\\big", "\\Big", "\\bigg", "\\Bigg", "\\displaystyle", "\\textstyle", "\\limits",
         "\\!", "\\,", "\\;", "\\:", "\\ ", "\\quad", "\\qquad", "\\mathrm", "\\mathbf", "\\mathit", "\\boldsymbol",
         "\\bf", "\\rm", "'", "\\prime", "\\circ", "\\degree", "\\boxed", "\\fbox", "\\dots", "\\ldots", "\\cdots"}
_OPEN = {"(": ")", "[": "]", "{": "}", "\\{": "\\}", "\\lfloor": "\\rfloor", "\\lceil": "\\rceil",
         "\\langle": "\\rangle", "\\lvert": "\\rvert", "\\lVert": "\\rVert"}
_CLOSE = set(_OPEN.values())
_SEPARATORS = {",", ";", ":", "=", "<", ">", "&", "\\\\", "\\le", "\\leq", "\\ge", "\\geq", "\\ne", "\\neq", "\\lt",
               "\\gt", "\\approx", "\\equiv", "\\sim", "\\in", "\\to", "\\rightarrow", "\\Rightarrow", "\\implies",
               "\\cup", "\\cap", "\\setminus", "\\mid", "\\text", "\\textrm", "\\mbox", "\\textbf", "\\textit",
               "\\choose", "\\pmod", "\\bmod", "\\mod", "\\vee", "\\wedge", "\\land", "\\lor", "\\subset",
               "\\subseteq", "\\cdots"}
_ADD = {"+", "-", "\\pm", "\\mp"}
_MUL = {"*", "\\cdot", "\\times", "\\ast"}
_DIV = {"/", "\\div"}
_FRACS = {"\\frac", "\\dfrac", "\\tfrac", "\\cfrac"}
_BINOMS = {"\\binom", "\\dbinom", "\\tbinom"}
_SERIES = {"\\sum": False, "\\prod": True}
_FUNCTIONS = {"sin", "cos", "tan", "cot", "sec", "csc", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "log",
              "ln", "lg", "exp", "sqrt", "gcd", "lcm", "max", "min", "det", "abs", "floor", "ceil", "arg", "deg"}
_CONSTANTS = {"\\pi": math.pi, "pi": math.pi, "e": math.e, "\\e": math.e}


class _Reader:
    """Recursive descent over tokens; every method returns a checked :class:`Size` (or raises :class:`Absurd`)."""

    def __init__(self, text: str):
        for a, b in _REPLACE:
            text = text.replace(a, b)
        raw = [m.group(1) for m in _TOKEN.finditer(text)]
        self.tokens = [t for t in raw if t.strip() and t not in _SKIP]
        self.i = 0
        self.depth = 0
        self.bound: dict[str, Size] = {}  #: summation indices -> their largest value
        self.bars = 0  #: open |...| pairs

    # -- tokens
    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> str | None:
        tok = self.peek()
        self.i += 1
        return tok

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise Absurd(f"nested more than {MAX_NESTING} deep")

    # -- grammar
    def read(self) -> Size:
        size = self.sequence(stop=None)
        while self.peek() is not None:  # a stray closer: skip it and read on
            self.take()
            size = _widest(size, self.sequence(stop=None))
        return size

    def sequence(self, stop: str | None) -> Size:
        """Expressions separated by commas, relations, ``\\choose``...: the widest of them (each one checked)."""
        size = None
        while True:
            left = self.expression()
            tok = self.peek()
            if tok == "\\choose":
                self.take()
                left = binomial(left, self.expression())
                tok = self.peek()
            size = left if size is None else _widest(size, left)
            if tok is None or tok == stop or (tok in _CLOSE and stop is not None) or (tok == "|" and self.bars):
                return size
            if tok in _SEPARATORS:
                self.take()
                if tok in ("\\text", "\\textrm", "\\mbox", "\\textbf", "\\textit") and self.peek() == "{":
                    self.skip_group()
                continue
            if not self.starts_factor(tok):
                self.take()  # a token that fits nowhere (a stray symbol): skip it

    def expression(self) -> Size:
        size = None
        while True:
            tok = self.peek()
            if tok in _ADD:
                self.take()
                term = self.term()
                if tok == "-" and term.value is not None:
                    term = attrs.evolve(term, value=-term.value)
                size = term if size is None else add(size, term)
            elif size is None:
                size = self.term()
            else:
                return size

    def term(self) -> Size:
        size = self.unary()
        while True:
            tok = self.peek()
            if tok in _MUL:
                self.take()
                size = mul(size, self.unary())
            elif tok in _DIV:
                self.take()
                size = mul(size, self.unary(), divide=True)
            elif tok is not None and self.starts_factor(tok):
                size = mul(size, self.unary())
            else:
                return size

    def starts_factor(self, tok: str) -> bool:
        if tok == "|":
            return not self.bars
        if tok in _CLOSE or tok in _SEPARATORS or tok in _ADD or tok in _MUL or tok in _DIV:
            return False
        return tok not in ("^", "_", "!", "%", "\\%")

    def unary(self) -> Size:
        while self.peek() in _ADD:
            self.take()
        return self.postfix(self.primary())

    def postfix(self, size: Size) -> Size:
        while True:
            tok = self.peek()
            if tok == "^":
                self.take()
                size = power(size, self.exponent())
            elif tok == "!":
                self.take()
                size = factorial(size)
            elif tok in ("%", "\\%"):
                self.take()
                size = mul(size, number("100"), divide=True)
            elif tok == "_":
                self.take()
                self.exponent()  # a subscript: read (and bounded) but it names, it does not compute
            else:
                return size

    def exponent(self) -> Size:
        """What follows ``^`` or ``_``: a group, or one signed factor with its own powers (``9^9^9`` = 9^(9^9))."""
        negative = False
        while self.peek() in _ADD:
            negative ^= self.take() == "-"
        size = self.postfix(self.primary())
        return attrs.evolve(size, value=-size.value) if negative and size.value is not None else size

    def group(self) -> Size:
        """A bracketed group (the opener is next), or one factor when there is no bracket."""
        tok = self.peek()
        if tok not in _OPEN:
            return self.unary() if tok is not None else Size()
        self.take()
        size = self.sequence(stop=_OPEN[tok])
        if self.peek() in _CLOSE:
            self.take()
        return size

    def skip_group(self) -> None:
        """Skip a ``{...}`` of text (``\\text{ cm}``), braces balanced."""
        depth = 0
        while (tok := self.take()) is not None:
            depth += tok == "{"
            depth -= tok == "}"
            if depth <= 0:
                return

    def primary(self) -> Size:
        tok = self.peek()
        if tok is None or tok in _CLOSE or tok in _SEPARATORS:
            return Size()
        self.enter()
        try:
            return self._primary(tok)
        finally:
            self.depth -= 1

    def _primary(self, tok: str) -> Size:
        if tok in _OPEN:
            return self.group()
        if tok == "|":
            self.take()
            self.bars += 1
            size = self.sequence(stop="|")
            self.bars -= 1
            if self.peek() == "|":
                self.take()
            return size
        self.take()
        if tok[0].isdigit() or tok[0] == ".":
            return number(tok.rstrip(".") or "0")
        if tok in _FRACS:
            return mul(self.group(), self.group(), divide=True)
        if tok in _BINOMS:
            return binomial(self.group(), self.group())
        if tok == "\\sqrt":
            root = number("2")
            if self.peek() == "[":
                root = self.group()
            inner = self.group()
            if root.value is None or not root.exact or root.value == 0:
                return attrs.evolve(OPAQUE, height=inner.height).check()
            return power(inner, Size(value=1.0 / root.value, exact=True))
        if tok in _SERIES:
            return self.series(_SERIES[tok])
        if tok == "\\operatorname":
            if self.peek() == "{":
                self.skip_group()
            return self.function()
        if tok in _CONSTANTS:
            return constant(_CONSTANTS[tok])
        if tok[0] == "\\":
            name = tok[1:]
            if name in _FUNCTIONS or name in ("int", "iint", "oint", "lim", "limsup", "liminf", "Re", "Im"):
                return self.function()
            return SYMBOL  # \alpha, \infty, \emptyset, an unknown command: a symbol
        if tok.isalpha():
            return self.letters(tok)
        return Size()  # a stray character

    def letters(self, run: str) -> Size:
        """``sin`` (a function), ``pi``, or a product of one-letter symbols (``xy``); summation indices are bound."""
        if run in _FUNCTIONS:
            return self.function()
        if run in _CONSTANTS and run not in self.bound:
            return constant(_CONSTANTS[run])
        size = None
        for ch in run:
            atom = self.bound.get(ch) or (constant(math.e) if ch == "e" else SYMBOL)
            size = atom if size is None else mul(size, atom)
        return size

    def function(self) -> Size:
        """``\\sin^2 x``, ``\\log_2(x)``, ``\\int_0^1 f``: sub/superscripts and the argument are read (and bounded);
        the value is a new variable, raised to the written power."""
        exponent = None
        while self.peek() in ("^", "_"):
            tok = self.take()
            read = self.exponent()
            if tok == "^":
                exponent = read
        arg = self.group()
        size = attrs.evolve(OPAQUE, funcs=1 if arg.plain and not arg.funcs else 2)
        return power(size, exponent) if exponent is not None else size

    def series(self, product: bool) -> Size:
        """``\\sum_{k=a}^{b} body``: the body is read with ``k`` bound to the larger of |a|, |b|."""
        index, low, high, height = None, None, None, 0
        while self.peek() in ("^", "_"):
            tok = self.take()
            if tok == "_" and self.peek() == "{" and self.i + 2 < len(self.tokens) and self.tokens[self.i + 2] == "=":
                self.take()
                index = self.take() if self.peek().isalpha() else None
                self.take()  # "="
                low = self.sequence(stop="}")
                if self.peek() == "}":
                    self.take()
            else:
                read = self.exponent()
                if tok == "^":
                    high = read
                else:
                    low = read
            height = max(height, (low.height if low else 0), (high.height if high else 0))
        count, largest = None, None
        if low is not None and high is not None and low.exact and high.exact and None not in (low.value, high.value):
            if not (math.isfinite(low.value) and math.isfinite(high.value)):
                raise Absurd("a sum or product of infinitely many terms")
            count = high.value - low.value + 1
            largest = max(abs(low.value), abs(high.value))
        saved = dict(self.bound)
        if index and len(index) == 1 and largest is not None:
            self.bound[index] = Size(digits=_log10(largest), value=largest, exact=True)
        try:
            body = self.term()
        finally:
            self.bound = saved
        return series(body, count, product, height)


def _widest(a: Size, b: Size) -> Size:
    """Two independent parts of an answer (a tuple, both sides of an equation): the larger bounds of each."""
    return Size(terms=max(a.terms, b.terms), degree=max(a.degree, b.degree), digits=max(a.digits, b.digits),
                plain=False, height=max(a.height, b.height), funcs=max(a.funcs, b.funcs))


def size_reason(text: str) -> str | None:
    """Why ``text`` is too big to give a symbolic checker (see the module doc), or None."""
    try:
        _Reader(text).read()
    except Absurd as exc:
        return str(exc)
    except RecursionError:  # pragma: no cover - MAX_NESTING stops well before the stack ends
        return f"nested more than {MAX_NESTING} deep"
    return None
