"""numpy's random draws replayed in Python (environments.md §2): ``Draws(seed)`` gives the numbers of
``numpy.random.default_rng(seed)`` at a tenth of the cost of numpy's calls, so the generator's levels stay a pure
function of the seed while its draws cost little. The stream is PCG64's raw words; its seeding (SeedSequence) is
computed here too: numpy's took a fifth of a level's generation time."""

from __future__ import annotations

import threading

import numpy as np

MASK128 = (1 << 128) - 1
PCG64_MULT = 0x2360ED051FC65DA44385DF649FCCF645  #: PCG64's 128-bit LCG multiplier (state = state * mult + inc)
#: 64 steps at once: state_64 = state * mult**64 + inc * (mult**63 + ... + mult + 1)
PCG64_MULT_64 = pow(PCG64_MULT, 64, 1 << 128)
PCG64_SUM_64 = sum(pow(PCG64_MULT, k, 1 << 128) for k in range(64)) & MASK128
_THREAD = threading.local()


def _thread_bits() -> np.random.PCG64:
    """This thread's PCG64, whose state each ``Draws.refill`` sets (one object per thread: a set and the read after
    it must not interleave with another thread's)."""
    _THREAD.bits = np.random.PCG64(0)
    return _THREAD.bits


def _seed_source() -> str:
    """Source of ``_pcg64_seed(seed)``: ``np.random.PCG64(seed)``'s (state, inc) for 0 <= seed < 2**64, i.e.
    SeedSequence's hash of the seed's two 32-bit words into a pool of 4, its 8 output words, and PCG64's seeding
    (numpy/random/bit_generator.pyx, src/pcg64). The hash constants do not depend on the seed, so the code is written
    out with them as literals: numpy's own seeding costs ~13 us a level (a fifth of it), this a third less."""
    m32 = 0xFFFFFFFF
    h = 0x43B0D7E5  # SeedSequence's INIT_A, then times MULT_A per hash
    lines = ["def _pcg64_seed(seed):", f"    e0, e1 = seed & {m32}, seed >> 32"]

    def hashmix(word: str) -> str:
        nonlocal h
        x, h = h, h * 0x931E8875 & m32
        return f"    v = ({word} ^ {x}) * {h} & {m32}; v ^= v >> 16"

    for i, word in enumerate(("e0", "e1", "0", "0")):  # a seed < 2**32 has one word; a missing word hashes as 0
        lines += [hashmix(word), f"    p{i} = v"]
    for src in range(4):
        for dst in range(4):
            if src != dst:
                lines += [hashmix(f"p{src}"), f"    v = (0xCA01F9DD * p{dst} - 0x4973F715 * v) & {m32}",
                          f"    p{dst} = v ^ v >> 16"]
    h = 0x8B51F9DD  # generate_state's INIT_B, times MULT_B per word
    for i in range(8):
        x, h = h, h * 0x58F38DED & m32
        lines.append(f"    v = (p{i % 4} ^ {x}) * {h} & {m32}; w{i} = v ^ v >> 16")
    lines += [  # 4 uint64 (little-endian pairs): seed high, seed low, inc high, inc low; srandom steps twice
        f"    inc = ((w4 | w5 << 32) << 65 | (w6 | w7 << 32) << 1 | 1) & {MASK128}",
        f"    return ((inc + ((w0 | w1 << 32) << 64 | w2 | w3 << 32)) * {PCG64_MULT} + inc) & {MASK128}, inc",
    ]
    return "\n".join(lines)


_namespace: dict = {}
exec(_seed_source(), _namespace)  # noqa: S102 - code built above from constants only
_pcg64_seed = _namespace["_pcg64_seed"]


class Draws:
    """The draws of ``numpy.random.default_rng(seed)`` replayed from its PCG64 raw 64-bit stream: ``random()`` is
    ``Generator.random()``, ``below(n)`` is ``Generator.integers(n)`` (Lemire's method on 32-bit halves, the low half
    of a word first, the high half kept for the next 32-bit draw) and ``sample(n, k)`` is ``Generator.choice(n, k,
    replace=False)`` (Floyd's algorithm, then a shuffle). numpy's calls cost microseconds each; these cost a tenth."""

    __slots__ = ("_state", "_inc", "words", "index", "half")

    def __init__(self, seed: int) -> None:
        if 0 <= seed < 1 << 64:
            self._state, self._inc = _pcg64_seed(seed)
        else:  # numpy's seeding for other ints (more than two 32-bit words of entropy, or its error for < 0)
            state = np.random.PCG64(seed).state["state"]
            self._state, self._inc = state["state"], state["inc"]
        #: the replay position, read and written by loops that write the draws out (``generator.topology``):
        #: the current batch of raw words, how many of them are used, and the kept high half of a word (or None)
        self.words: list[int] = []
        self.index = 64  # a level uses about 50 words
        self.half: int | None = None

    def refill(self) -> list[int]:
        """The next batch of raw words (the caller resets its index to 0), from this thread's PCG64 set to our state;
        the state then jumps 64 steps ahead."""
        bits = _THREAD.__dict__.get("bits") or _thread_bits()
        bits.state = {"bit_generator": "PCG64", "state": {"state": self._state, "inc": self._inc},
                      "has_uint32": 0, "uinteger": 0}
        self.words = bits.random_raw(64).tolist()
        self._state = (self._state * PCG64_MULT_64 + self._inc * PCG64_SUM_64) & MASK128
        return self.words

    def _next64(self) -> int:
        i = self.index
        if i == 64:
            i = 0
            self.refill()
        self.index = i + 1
        return self.words[i]

    def _next32(self) -> int:
        half = self.half
        if half is not None:
            self.half = None
            return half
        word = self._next64()
        self.half = word >> 32
        return word & 0xFFFFFFFF

    def random(self) -> float:
        i = self.index  # _next64 inlined: a level makes ~60 draws, the call would be a third of their time
        if i == 64:
            i = 0
            self.refill()
        self.index = i + 1
        return (self.words[i] >> 11) * (1.0 / 9007199254740992.0)

    def below(self, n: int) -> int:
        if n == 1:
            return 0  # numpy draws nothing for a single value
        half = self.half  # _next32 inlined (the generator's most frequent draw)
        if half is None:
            i = self.index
            if i == 64:
                i = 0
                self.refill()
            self.index = i + 1
            word = self.words[i]
            self.half, m = word >> 32, (word & 0xFFFFFFFF) * n
        else:
            self.half, m = None, half * n
        if m & 0xFFFFFFFF < n:  # Lemire's rejection, rare for small n
            threshold = (0x100000000 - n) % n
            while m & 0xFFFFFFFF < threshold:
                m = self._next32() * n
        return m >> 32

    def sample(self, n: int, k: int) -> list[int]:
        out: list[int] = []
        for j in range(n - k, n):
            val = self.below(j + 1)
            out.append(j if val in out else val)
        for i in range(k - 1, 0, -1):
            j = self.below(i + 1)
            out[i], out[j] = out[j], out[i]
        return out
