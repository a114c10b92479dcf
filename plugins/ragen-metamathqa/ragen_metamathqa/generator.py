"""The offline question source: seeded arithmetic word problems with exactly computed answers (spec §7).

Nine template families (change after a purchase, items after giving and receiving, rate × time, equal sharing,
percentage discount, wages minus spending, age offsets, rectangles, saving up), each in 1–4 arithmetic steps, with
names, items and quantities drawn from one ``random.Random`` per problem. Every operation goes through ``Work``, which
computes with ``Fraction`` (exact), requires whole non-negative intermediate results, and records a worked line
(``4 * 3 = 12``) and an expression over the numbers of the question (``(20 - (4 * 3))``), so tests can re-derive the
answer independently. Answers are integers in [0, 10**6].
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from fractions import Fraction

import attrs

MAX_ANSWER = 10**6
STEPS = (1, 2, 3, 4)
#: numbers an expression may use without the question stating them (percent, doubling, halving)
IMPLICIT_CONSTANTS = frozenset({2, 100})


@attrs.frozen
class Problem:
    family: str
    steps: int
    question: str
    answer: int
    lines: tuple[str, ...]  #: the worked solution, one operation a line
    expression: str  #: the answer as arithmetic over the question's numbers

    def rationale(self) -> str:
        return " ".join(f"{line}." for line in self.lines) + f" The answer is {self.answer}."


# ---- exact arithmetic that records its work -----------------------------------------------------------------------
@attrs.frozen
class Q:
    value: Fraction
    expr: str

    def __str__(self) -> str:
        return str(self.value)


class Work:
    def __init__(self) -> None:
        self.lines: list[str] = []

    @staticmethod
    def n(value: int) -> Q:
        return Q(Fraction(value), str(value))

    def add(self, a: Q, b: Q) -> Q:
        return self._op(a, "+", b, a.value + b.value)

    def sub(self, a: Q, b: Q) -> Q:
        return self._op(a, "-", b, a.value - b.value)

    def mul(self, a: Q, b: Q) -> Q:
        return self._op(a, "*", b, a.value * b.value)

    def div(self, a: Q, b: Q) -> Q:
        return self._op(a, "/", b, a.value / b.value)

    def pct(self, a: Q, percent: int) -> Q:
        """``percent``% of ``a`` (one step)."""
        value = a.value * percent / 100
        self._check(value)
        self.lines.append(f"{percent}% of {a} = {value}")
        return Q(value, f"({a.expr} * {percent} / 100)")

    def _op(self, a: Q, sym: str, b: Q, value: Fraction) -> Q:
        self._check(value)
        self.lines.append(f"{a} {sym} {b} = {value}")
        return Q(value, f"({a.expr} {sym} {b.expr})")

    @staticmethod
    def _check(value: Fraction) -> None:
        if value.denominator != 1 or value < 0 or value > MAX_ANSWER:
            raise _Redraw  # templates pick numbers that avoid this; a rare miss just redraws


class _Redraw(Exception):
    pass


# ---- people and things ---------------------------------------------------------------------------------------------
_SHE = ("she", "her", "her", "herself")
_HE = ("he", "him", "his", "himself")
NAMES = (
    ("Mia", _SHE), ("Liam", _HE), ("Ava", _SHE), ("Noah", _HE), ("Emma", _SHE), ("Lucas", _HE), ("Sofia", _SHE),
    ("Ethan", _HE), ("Zoe", _SHE), ("Omar", _HE), ("Priya", _SHE), ("Mateo", _HE), ("Hana", _SHE), ("Kofi", _HE),
    ("Elena", _SHE), ("Ravi", _HE), ("Chloe", _SHE), ("Diego", _HE), ("Amara", _SHE), ("Jin", _HE), ("Grace", _SHE),
    ("Samuel", _HE), ("Leila", _SHE), ("Tomas", _HE), ("Nadia", _SHE), ("Yusuf", _HE), ("Ines", _SHE), ("Arjun", _HE),
    ("Freya", _SHE), ("Malik", _HE), ("Rosa", _SHE), ("Kenji", _HE),
)


@attrs.frozen
class Person:
    name: str
    sub: str  # she
    obj: str  # her
    pos: str  # her
    refl: str  # herself

    @property
    def Sub(self) -> str:  # noqa: N802 - sentence-initial pronoun
        return self.sub.capitalize()


def people(rng: random.Random, k: int) -> list[Person]:
    return [Person(name, *pron) for name, pron in rng.sample(NAMES, k)]


#: (singular, plural, lowest price, highest price) in dollars
ITEMS = (
    ("notebook", "notebooks", 2, 6), ("pen", "pens", 1, 4), ("sandwich", "sandwiches", 4, 9), ("book", "books", 8, 25),
    ("T-shirt", "T-shirts", 8, 20), ("concert ticket", "concert tickets", 15, 40), ("candle", "candles", 3, 12),
    ("puzzle", "puzzles", 6, 18), ("potted plant", "potted plants", 4, 15), ("mug", "mugs", 5, 14),
    ("toy car", "toy cars", 2, 9), ("bag of rice", "bags of rice", 6, 20), ("lamp", "lamps", 12, 35),
    ("scarf", "scarves", 7, 22),
)
THINGS = ("marbles", "stickers", "baseball cards", "seashells", "stamps", "pencils", "apples", "coins", "beads",
          "comic books", "cookies", "crayons")
BILLS = (5, 10, 20, 50, 100, 200)


def _bill_above(rng: random.Random, cost: int) -> int:
    options = [b for b in BILLS if b > cost][:2]
    return rng.choice(options) if options else (cost // 100 + 1 + rng.randint(0, 2)) * 100


def _item(rng: random.Random, exclude: tuple = ()) -> tuple[str, str, int]:
    sing, plural, lo, hi = rng.choice([it for it in ITEMS if it[0] not in exclude])
    return sing, plural, rng.randint(lo, hi)


def _a(noun: str) -> str:
    return ("an " if noun[0].lower() in "aeiou" else "a ") + noun


# ---- the families --------------------------------------------------------------------------------------------------
def change(rng: random.Random, steps: int, w: Work) -> tuple[str, Q]:
    """Change after a purchase."""
    (p,) = people(rng, 1)
    s1, pl1, pr1 = _item(rng)
    s2, pl2, pr2 = _item(rng, exclude=(s1,))
    q1, q2 = rng.randint(2, 9), rng.randint(2, 6)
    if steps == 1:
        cost, what = w.n(pr1), f"{_a(s1)} for ${pr1}"
    elif steps == 2:
        cost, what = w.mul(w.n(q1), w.n(pr1)), f"{q1} {pl1} at ${pr1} each"
    elif steps == 3:
        cost = w.add(w.mul(w.n(q1), w.n(pr1)), w.n(pr2))
        what = f"{q1} {pl1} at ${pr1} each and {_a(s2)} for ${pr2}"
    else:
        cost = w.add(w.mul(w.n(q1), w.n(pr1)), w.mul(w.n(q2), w.n(pr2)))
        what = f"{q1} {pl1} at ${pr1} each and {q2} {pl2} at ${pr2} each"
    bill = _bill_above(rng, int(cost.value))
    answer = w.sub(w.n(bill), cost)
    question = rng.choice((
        f"{p.name} buys {what} and pays with a ${bill} bill. How much change does {p.sub} get, in dollars?",
        f"At the store, {p.name} picks up {what}. {p.Sub} hands the cashier a ${bill} bill. How many dollars of "
        f"change should {p.sub} receive?",
    ))
    return question, answer


def give_receive(rng: random.Random, steps: int, w: Work) -> tuple[str, Q]:
    """Items after giving, receiving, losing, finding and buying packs."""
    p, f1, f2 = people(rng, 3)
    things = rng.choice(THINGS)
    start = rng.randint(20, 120)
    count, sentences, left = w.n(start), [], steps
    while left:
        kinds = ["give", "get", "lose", "find"] + (["packs"] if left >= 2 else [])
        kind = rng.choice(kinds)
        if kind in ("give", "lose") and count.value < 2:
            kind = "get"
        if kind == "packs":
            packs, each = rng.randint(2, 6), rng.randint(3, 12)
            count = w.add(count, w.mul(w.n(packs), w.n(each)))
            sentences.append(f"{p.Sub} buys {packs} packs with {each} {things} in each.")
            left -= 2
            continue
        if kind in ("give", "lose"):
            k = rng.randint(1, min(40, int(count.value) - 1))
            count = w.sub(count, w.n(k))
            friend = rng.choice((f1, f2)).name
            sentences.append(f"{p.Sub} gives {k} to {friend}." if kind == "give" else f"{p.Sub} loses {k} of them.")
        else:
            k = rng.randint(1, 40)
            count = w.add(count, w.n(k))
            friend = rng.choice((f1, f2)).name
            sentences.append(f"{friend} gives {p.obj} {k} more." if kind == "get" else f"{p.Sub} finds {k} more.")
        left -= 1
    body = " ".join(sentences)
    question = rng.choice((
        f"{p.name} has {start} {things}. {body} How many {things} does {p.name} have now?",
        f"{p.name} starts the week with {start} {things}. {body} How many {things} does {p.sub} have at the end of "
        f"the week?",
    ))
    return question, count


_TRAVEL = (("car", "miles", 30, 70), ("train", "kilometers", 60, 150), ("cyclist", "miles", 8, 20),
           ("bus", "kilometers", 40, 90), ("boat", "miles", 10, 35))
_MAKERS = (("machine", "bottles", 20, 200), ("printer", "pages", 30, 300), ("bakery oven", "loaves", 10, 60),
           ("robot arm", "parts", 15, 120))


def rate_time(rng: random.Random, steps: int, w: Work) -> tuple[str, Q]:
    """Rate × time: distances travelled or goods produced."""
    (p,) = people(rng, 1)
    travel = rng.random() < 0.5
    what, unit, lo, hi = rng.choice(_TRAVEL if travel else _MAKERS)
    r1, r2 = rng.randint(lo, hi), rng.randint(lo, hi)
    t1, t2, days = rng.randint(2, 8), rng.randint(1, 6), rng.randint(2, 7)
    verb = "travels" if travel else "makes"
    rate = (lambda r: f"at {r} {unit} per hour") if travel else (lambda r: f"{r} {unit} per hour")
    if steps == 1:
        return f"A {what} {verb} {rate(r1)}. How many {unit} does it {verb[:-1]} in {t1} hours?", w.mul(
            w.n(r1), w.n(t1)
        )
    if steps == 2:
        total = w.mul(w.mul(w.n(r1), w.n(t1)), w.n(days))
        return (f"A {what} {verb} {rate(r1)} for {t1} hours every day. How many {unit} does it {verb[:-1]} in "
                f"{days} days?"), total
    legs = w.add(w.mul(w.n(r1), w.n(t1)), w.mul(w.n(r2), w.n(t2)))
    story = (f"A {what} {verb} {rate(r1)} for {t1} hours, then {rate(r2)} for {t2} hours." if travel else
             f"One {what} makes {r1} {unit} per hour for {t1} hours, and a second {what} makes {r2} {unit} per hour "
             f"for {t2} hours.")
    if steps == 3:
        return f"{story} How many {unit} is that in total?", legs
    target = int(legs.value) + rng.randint(10, 300)
    goal = (f"{p.name} needs to cover {target} {unit}." if travel else f"{p.name} has an order for {target} {unit}.")
    ask = f"How many {unit} are left to go?" if travel else f"How many more {unit} are still needed?"
    return f"{goal} {story} {ask}", w.sub(w.n(target), legs)


def sharing(rng: random.Random, steps: int, w: Work) -> tuple[str, Q]:
    """Equal sharing (exact division by construction)."""
    p, f = people(rng, 2)
    things = rng.choice(THINGS)
    n, each = rng.randint(2, 9), rng.randint(2, 15)
    share = n * each
    group = rng.choice(("friends", "classmates", "cousins", "teammates"))
    if steps == 1:
        return (f"{p.name} has {share} {things} and shares them equally among {n} {group}. How many {things} does "
                f"each of them get?"), w.div(w.n(share), w.n(n))
    keep = 0 if steps == 2 else rng.randint(1, 12)
    extra = rng.randint(1, min(20, share + keep - 4)) if steps == 4 else 0
    total = share + keep  # boxes * per_box + extra must equal this
    box_total = total - extra
    per_box = rng.choice([d for d in range(2, 13) if box_total % d == 0 and box_total // d >= 2] or [1])
    boxes = box_total // per_box
    pile = w.mul(w.n(boxes), w.n(per_box))
    text = f"{p.name} buys {boxes} boxes of {things} with {per_box} in each box."
    if steps == 4:
        pile = w.add(pile, w.n(extra))
        text += f" {f.name} gives {p.obj} {extra} more."
    if steps >= 3:
        pile = w.sub(pile, w.n(keep))
        text += f" {p.Sub} keeps {keep} for {p.refl}"
        text += " and shares the rest equally among"
    else:
        text += f" {p.Sub} shares them equally among"
    return f"{text} {n} {group}. How many {things} does each of them get?", w.div(pile, w.n(n))


_DISCOUNTS = (5, 10, 15, 20, 25, 30, 40, 50, 60, 75)


def discount(rng: random.Random, steps: int, w: Work) -> tuple[str, Q]:
    """Percentage discount (prices chosen so every result is whole)."""
    (p,) = people(rng, 1)
    sing, plural, _ = _item(rng)
    d = rng.choice(_DISCOUNTS)
    unit = 100 // _gcd(d, 100)
    price = unit * rng.randint(max(1, 10 // unit), max(2, 300 // unit))
    saved = w.pct(w.n(price), d)
    intro = f"{_cap(_a(sing))} normally costs ${price}, and the store has a {d}% off sale."
    if steps == 1:
        return f"{intro} How many dollars does {p.name} save by buying one on sale?", saved
    sale = w.sub(w.n(price), saved)
    if steps == 2:
        return f"{intro} What is the sale price of {_a(sing)}, in dollars?", sale
    q = rng.randint(2, 6)
    paid = w.mul(w.n(q), sale)
    if steps == 3:
        return f"{intro} {p.name} buys {q} {plural} on sale. How much does {p.sub} pay in total, in dollars?", paid
    bill = _bill_above(rng, int(paid.value))
    return (f"{intro} {p.name} buys {q} {plural} on sale and pays with ${bill}. How much change does {p.sub} get, "
            f"in dollars?"), w.sub(w.n(bill), paid)


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


_SPENDING = ("groceries", "rent", "a new jacket", "bus passes", "a birthday present", "books", "a phone bill")


def wage(rng: random.Random, steps: int, w: Work) -> tuple[str, Q]:
    """Wage × hours × days, minus spending."""
    (p,) = people(rng, 1)
    rate, hours, days = rng.randint(8, 40), rng.randint(2, 9), rng.randint(2, 6)
    job = rng.choice(("tutor", "babysitter", "cashier", "dog walker", "lifeguard", "barista", "gardener"))
    if steps == 1:
        return (f"{p.name} works as a {job} and earns ${rate} per hour. How much does {p.sub} earn for {hours} hours "
                f"of work, in dollars?"), w.mul(w.n(rate), w.n(hours))
    earned = w.mul(w.mul(w.n(rate), w.n(hours)), w.n(days))
    intro = f"{p.name} earns ${rate} per hour as a {job} and works {hours} hours a day for {days} days."
    if steps == 2:
        return f"{intro} How much does {p.sub} earn in total, in dollars?", earned
    total = int(earned.value)
    spend1, spend2 = rng.sample(_SPENDING, 2)
    a = rng.randint(1, max(1, total // 2))
    left = w.sub(earned, w.n(a))
    if steps == 3:
        return f"{intro} {p.Sub} spends ${a} on {spend1}. How much of the money is left, in dollars?", left
    b = rng.randint(1, max(1, (total - a) // 2))
    return (f"{intro} {p.Sub} spends ${a} on {spend1} and ${b} on {spend2}. How much of the money is left, "
            f"in dollars?"), w.sub(left, w.n(b))


def ages(rng: random.Random, steps: int, w: Work) -> tuple[str, Q]:
    """A chain of age offsets: older, younger, times as old, half as old, in n years."""
    ppl = people(rng, steps + 1)
    start = rng.randint(6, 30)
    age, sentences = w.n(start), [f"{ppl[0].name} is {start} years old."]
    for i in range(1, steps + 1):
        prev, cur = ppl[i - 1].name, ppl[i].name
        kind = rng.choice([k for k, ok in (("older", age.value <= 70), ("younger", age.value > 3),
                                           ("half", age.value % 2 == 0 and age.value >= 8),
                                           ("times", age.value <= 30)) if ok])
        if kind == "older":
            k = rng.randint(1, 30)
            age, text = w.add(age, w.n(k)), f"{cur} is {_years(k)} older than {prev}."
        elif kind == "younger":
            k = rng.randint(1, int(age.value) - 2)
            age, text = w.sub(age, w.n(k)), f"{cur} is {_years(k)} younger than {prev}."
        elif kind == "half":
            age, text = w.div(age, w.n(2)), f"{cur} is half as old as {prev}."
        else:
            m = rng.randint(2, 3)
            said = "twice" if m == 2 else f"{m} times"
            age, text = w.mul(age, w.n(m)), f"{cur} is {said} as old as {prev}."
        sentences.append(text)
    return " ".join(sentences) + f" How old is {ppl[-1].name}?", age


def _years(k: int) -> str:
    return f"{k} year" if k == 1 else f"{k} years"


_PLACES = ("garden", "backyard", "playground", "parking lot", "field", "courtyard")


def rectangle(rng: random.Random, steps: int, w: Work) -> tuple[str, Q]:
    """Rectangle perimeter and area, with fencing or seeding costs."""
    place = rng.choice(_PLACES)
    unit, unit1 = rng.choice((("meters", "meter"), ("feet", "foot"), ("yards", "yard")))
    length, width = sorted((rng.randint(5, 60), rng.randint(3, 40)), reverse=True)
    intro = f"A rectangular {place} is {length} {unit} long and {width} {unit} wide."
    if steps == 1:
        return f"{intro} What is its area in square {unit}?", w.mul(w.n(length), w.n(width))
    if steps == 2:
        return (f"{intro} How many {unit} of fence are needed to go all the way around it?",
                w.mul(w.n(2), w.add(w.n(length), w.n(width))))
    cost = rng.randint(2, 15)
    if steps == 3:
        perimeter = w.mul(w.n(2), w.add(w.n(length), w.n(width)))
        return (f"{intro} Fencing costs ${cost} per {unit1}. How many dollars does it cost to fence it all the way "
                f"around?"), w.mul(perimeter, w.n(cost))
    side = rng.randint(1, min(length, width) - 1)
    grass = w.sub(w.mul(w.n(length), w.n(width)), w.mul(w.n(side), w.n(side)))
    return (
        f"{intro} A square pond with sides of {side} {unit} sits inside it, and the rest is covered with grass "
        f"seed that costs ${cost} per square {unit1}. How many dollars does the seed cost?"
    ), w.mul(grass, w.n(cost))


def savings(rng: random.Random, steps: int, w: Work) -> tuple[str, Q]:
    """Weeks of saving needed to afford something (exact division by construction)."""
    (p,) = people(rng, 1)
    sing, plural, price = _item(rng)
    weekly, weeks = rng.randint(3, 25), rng.randint(2, 12)
    need = weekly * weeks
    allowance = weekly + rng.randint(2, 15)
    spent = allowance - weekly
    if steps == 1:
        return (f"{p.name} wants to buy {_a(sing)} that costs ${need}. {p.Sub} saves ${weekly} every week. How many "
                f"weeks does it take to save enough?"), w.div(w.n(need), w.n(weekly))
    if steps == 4:
        q = rng.randint(2, 6)
        price = -(-need // q) + rng.randint(1, 10)  # q * price > need: the saver already has something
        cost = w.mul(w.n(q), w.n(price))
        goal = f"{p.name} wants to buy {q} {plural} that cost ${price} each."
    else:
        price = need + rng.randint(1, 80)
        cost = w.n(price)
        goal = f"{p.name} wants to buy {_a(sing)} that costs ${price}."
    have = int(cost.value) - need
    missing = w.sub(cost, w.n(have))
    if steps == 2:
        return (f"{goal} {p.Sub} already has ${have} and saves ${weekly} every week. How many weeks does it take "
                f"to save enough?"), w.div(missing, w.n(weekly))
    per_week = w.sub(w.n(allowance), w.n(spent))
    return (f"{goal} {p.Sub} already has ${have}. Every week {p.sub} gets ${allowance} of allowance and spends "
            f"${spent} of it. How many weeks does it take to save enough?"), w.div(missing, per_week)


FAMILIES: dict[str, Callable[[random.Random, int, Work], tuple[str, Q]]] = {
    "change": change,
    "give_receive": give_receive,
    "rate_time": rate_time,
    "sharing": sharing,
    "discount": discount,
    "wage": wage,
    "ages": ages,
    "rectangle": rectangle,
    "savings": savings,
}


# ---- problems for a seed and split ---------------------------------------------------------------------------------
def _rng(*parts: object) -> random.Random:
    """A private RNG from a SHA-256 of the parts (never Python's salted ``hash()``)."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def split_of(question: str) -> str:
    """The split a question belongs to, by a hash of its text: 5% val, 5% test, 90% train (disjoint by design)."""
    bucket = int.from_bytes(hashlib.sha256(question.encode()).digest()[:4], "big") % 100
    return "val" if bucket < 5 else "test" if bucket < 10 else "train"


def draw(rng: random.Random, family: str, steps: int) -> Problem:
    """One problem of ``family`` with ``steps`` operations from ``rng`` (redrawing the rare out-of-range numbers)."""
    for _ in range(100):
        w = Work()
        try:
            question, answer = FAMILIES[family](rng, steps, w)
        except _Redraw:
            continue
        assert len(w.lines) == steps, (family, steps, w.lines)
        return Problem(family, steps, question, int(answer.value), tuple(w.lines), answer.expr)
    raise RuntimeError(f"{family}/{steps}: no problem in 100 draws")  # pragma: no cover - templates avoid it


def generate(seed: int, split: str = "train", steps: int | None = None, families: tuple[str, ...] = ()) -> Problem:
    """The problem of ``(seed, split)``: the first draw whose question hashes into ``split`` (disjoint splits)."""
    pool = tuple(families) or tuple(FAMILIES)
    for attempt in range(10_000):
        rng = _rng("metamathqa", seed, attempt)
        family = rng.choice(pool)
        problem = draw(rng, family, steps if steps is not None else rng.choice(STEPS))
        if split_of(problem.question) == split:
            return problem
    raise RuntimeError(f"no {split} problem for seed {seed}")  # pragma: no cover - p(miss) ~ 0.95**10000
