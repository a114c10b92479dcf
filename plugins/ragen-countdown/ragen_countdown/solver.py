"""Exhaustive exact Countdown solver (the expert): is the target reachable using every number once with + - * /?

Search: for every subset of the numbers (as a bit mask), the map value -> one expression tree reaching it, built
bottom-up from the two-way splits of the subset with all six orderings of + - * / (``a-b``, ``b-a``, ``a/b``,
``b/a``). For the full set no map is built: for each split and each value ``x`` of one side, the value the other side
needs (``t-x``, ``x-t``, ``t+x``, ``t/x``, ``x/t``, ``t*x``) is looked up in its map. Every expression tree over the
numbers is some split of its root, so this is exhaustive. Values are exact: ``int`` while integral, ``Fraction``
otherwise (ints keep the common case fast; ``Fraction(2) == 2`` and hashes alike, so the maps mix them safely).

Two passes: first integer intermediates >= 0 only (the classic game's rules, readable solutions), then all
rationals; the instance is solvable iff the second pass finds a tree. A +/- sum of the numbers (``additive``) is
preferred by ``solve`` when one exists.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from fractions import Fraction
from itertools import product

import attrs

Value = int | Fraction
MAX_NUMS = 5  #: the search grows steeply with the count; loaded rows with more numbers are dropped

_PREC = {"+": 1, "-": 1, "*": 2, "/": 2}


@attrs.frozen
class Leaf:
    index: int  #: position in ``nums``
    value: int


@attrs.frozen
class Node:
    op: str
    left: Leaf | Node
    right: Leaf | Node
    value: Value


Tree = Leaf | Node


# ---- arithmetic ---------------------------------------------------------------------------------------------------
def _norm(x: Value) -> Value:
    return x.numerator if type(x) is Fraction and x.denominator == 1 else x


def _div(a: Value, b: Value) -> Value:
    if type(a) is int and type(b) is int and a % b == 0:
        return a // b
    return _norm(Fraction(a) / b)


def _combos(a: Value, b: Value, natural: bool) -> Iterator[tuple[str, bool, Value]]:
    """``(op, swapped, value)`` for every way to combine ``a`` and ``b``; ``swapped`` means ``b op a``."""
    yield "+", False, a + b
    yield "*", False, _norm(a * b)
    if not natural or a >= b:
        yield "-", False, _norm(a - b)
    if not natural or b >= a:
        yield "-", True, _norm(b - a)
    if b != 0 and (not natural or a % b == 0):
        yield "/", False, _div(a, b)
    if a != 0 and (not natural or b % a == 0):
        yield "/", True, _div(b, a)


# ---- search -------------------------------------------------------------------------------------------------------
def _splits(mask: int) -> Iterator[tuple[int, int]]:
    """Unordered two-way splits ``(sub, rest)`` of ``mask``; ``sub`` holds the lowest bit, so each split comes once."""
    low = mask & -mask
    rest_bits = mask ^ low
    sub = rest_bits
    while True:  # enumerate the subsets s of rest_bits; sub = low | s, rest = the complement (must be non-empty)
        part = low | sub
        if part != mask:
            yield part, mask ^ part
        if sub == 0:
            break
        sub = (sub - 1) & rest_bits


class _Search:
    """Value maps of the subsets of one instance, built on demand and memoised."""

    def __init__(self, nums: Sequence[int], natural: bool):
        self.nums, self.natural = tuple(nums), natural
        self.maps: dict[int, dict[Value, Tree]] = {1 << i: {n: Leaf(i, n)} for i, n in enumerate(self.nums)}

    def reach(self, mask: int) -> dict[Value, Tree]:
        if mask in self.maps:
            return self.maps[mask]
        out: dict[Value, Tree] = {}
        for left, right in _splits(mask):
            lmap, rmap = self.reach(left), self.reach(right)
            for (a, ta), (b, tb) in product(lmap.items(), rmap.items()):
                for op, swapped, v in _combos(a, b, self.natural):
                    if v not in out and (not self.natural or v >= 0):
                        out[v] = Node(op, tb, ta, v) if swapped else Node(op, ta, tb, v)
        self.maps[mask] = out
        return out

    def find(self, target: Value) -> Tree | None:
        """A tree over all the numbers with value ``target``, or None."""
        full = (1 << len(self.nums)) - 1
        if full == 1:
            return self.maps[1][target] if target in self.maps[1] else None
        for left, right in _splits(full):
            lmap, rmap = self.reach(left), self.reach(right)
            if len(lmap) > len(rmap):  # iterate over the smaller side, look up in the larger one
                lmap, rmap = rmap, lmap
            for x, tx in lmap.items():
                for op, x_first, y in _needs(x, target):
                    ty = rmap.get(y)
                    if ty is not None:
                        return Node(op, tx, ty, target) if x_first else Node(op, ty, tx, target)
        return None


def _needs(x: Value, t: Value) -> Iterator[tuple[str, bool, Value]]:
    """``(op, x_first, y)``: the values ``y`` with ``x op y == t`` (x_first) or ``y op x == t``."""
    yield "+", True, _norm(t - x)
    yield "-", True, _norm(x - t)
    yield "-", False, _norm(t + x)
    if x != 0:
        yield "*", True, _div(t, x)
        yield "/", False, _norm(t * x)
    if t != 0 and x != 0:
        yield "/", True, _div(x, t)


# ---- public API ---------------------------------------------------------------------------------------------------
@attrs.frozen
class Solution:
    expression: str  #: minimal-parenthesis infix, e.g. ``44 + 35 - 19``
    tree: Tree | None  #: None for an additive solution (its expression is a flat sum)
    signs: tuple[int, ...] | None = None  #: +1/-1 per number for an additive solution


def find_tree(nums: Sequence[int], target: int) -> Tree | None:
    """Any expression tree over all ``nums`` equal to ``target``: natural-number intermediates first, then rationals."""
    if not nums or len(nums) > MAX_NUMS:
        raise ValueError(f"the solver takes 1 to {MAX_NUMS} numbers, got {len(nums)}")
    for natural in (True, False):
        tree = _Search(nums, natural).find(target)
        if tree is not None:
            return tree
    return None


def additive_signs(nums: Sequence[int], target: int) -> tuple[int, ...] | None:
    """Signs ``s_i = ±1`` with ``Σ s_i·n_i == target`` (RAGEN's additive instances), or None; first in +/- order."""
    for signs in product((1, -1), repeat=len(nums)):
        if sum(s * n for s, n in zip(signs, nums)) == target:
            return signs
    return None


def additive_expression(nums: Sequence[int], signs: Sequence[int]) -> str:
    """``Σ s_i·n_i`` written without a leading unary minus: the positive terms first (the target is >= 1)."""
    pos = [n for n, s in zip(nums, signs) if s > 0]
    neg = [n for n, s in zip(nums, signs) if s < 0]
    if not pos:
        raise ValueError("an additive expression needs a positive term")
    return " + ".join(map(str, pos)) + "".join(f" - {n}" for n in neg)


def solve(nums: Sequence[int], target: int) -> Solution | None:
    """A solution using every number once (a +/- sum when there is one), or None when there is none at all."""
    signs = additive_signs(nums, target) if target >= 1 else None
    if signs is not None:
        return Solution(additive_expression(nums, signs), None, signs)
    tree = find_tree(nums, target)
    return None if tree is None else Solution(render(tree), tree)


def solvable(nums: Sequence[int], target: int) -> bool:
    return find_tree(nums, target) is not None


def render(tree: Tree) -> str:
    """Infix text with only the parentheses exact arithmetic needs.

    ``a - (b + c)`` and ``a / (b * c)`` keep theirs; ``(a + b) + c`` is written ``a + b + c``."""
    if isinstance(tree, Leaf):
        return str(tree.value)
    p = _PREC[tree.op]
    left, right = render(tree.left), render(tree.right)
    if _prec(tree.left) < p:
        left = f"({left})"
    if _prec(tree.right) < p or (_prec(tree.right) == p and tree.op in "-/"):
        right = f"({right})"
    return f"{left} {tree.op} {right}"


def _prec(tree: Tree) -> int:
    return 3 if isinstance(tree, Leaf) else _PREC[tree.op]


def steps(tree: Tree) -> list[str]:
    """The tree's operations in evaluation order, e.g. ``['44 + 35 = 79', '79 - 19 = 60']``."""
    out: list[str] = []

    def walk(t: Tree) -> Value:
        if isinstance(t, Leaf):
            return t.value
        a, b = walk(t.left), walk(t.right)
        out.append(f"{_fmt(a)} {t.op} {_fmt(b)} = {_fmt(t.value)}")
        return t.value

    walk(tree)
    return out


def leaves(tree: Tree) -> list[int]:
    """Indices into ``nums`` of the tree's leaves, left to right."""
    return [tree.index] if isinstance(tree, Leaf) else leaves(tree.left) + leaves(tree.right)


def _fmt(x: Value) -> str:
    x = Fraction(x)
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"
