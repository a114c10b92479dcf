"""The before/after comparison of a run, level by level: the same held-out levels played greedily before RL and after
it, one episode each, so the change is measured on the levels whose outcome changed.

With ``n`` levels played both times, ``c`` of them solved only after RL ("better") and ``b`` solved only before
("worse"), the paired change of the success rate is ``(c - b) / n``. Its standard error is McNemar's,
``sqrt(b + c) / n`` (the spread of the change if each discordant level were a coin flip between better and worse),
and ``z = change / se = (c - b) / sqrt(b + c)``. It is never smaller than the plug-in
``sqrt(b + c - (b - c)**2 / n) / n`` (the sample spread of the per-level differences), so it errs on the side of
"noise", and unlike that one it is not 0 when every discordant level moved the same way. With no discordant level
(``b + c == 0``) the change is exactly 0 and so are ``se`` and ``z``: no evidence of a change, no division by zero.

Why paired and greedy: two T 0.5 validations of the same model on the same 128 levels disagreed on 21-33 levels, so
an unpaired before/after difference has a 4-point standard error at 128 levels; greedy decoding removes the sampling
noise of each pass and the pairing removes the spread of level difficulty.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping

import attrs

#: |z| at or above this reads as a change beyond noise (two-sided p ~ 0.05)
Z_THRESHOLD = 2.0


@attrs.frozen
class Paired:
    """The paired comparison of two passes over the same levels."""

    levels: int  #: levels played in both passes
    success_before: float
    success_after: float
    better: int  #: c: solved after RL only
    worse: int  #: b: solved before RL only

    @property
    def change(self) -> float:
        return (self.better - self.worse) / self.levels if self.levels else 0.0

    @property
    def se(self) -> float:
        return math.sqrt(self.better + self.worse) / self.levels if self.levels else 0.0

    @property
    def z(self) -> float:
        """McNemar's z; 0.0 without discordant levels (the change is then exactly 0)."""
        discordant = self.better + self.worse
        return (self.better - self.worse) / math.sqrt(discordant) if discordant else 0.0


def compare(before: Mapping[Hashable, bool], after: Mapping[Hashable, bool]) -> Paired:
    """Pair two passes by level (env, seed); a level missing from either pass (its env failed) is left out of both."""
    common = [k for k in before if k in after]
    n = len(common)
    better = sum(bool(after[k]) and not before[k] for k in common)
    worse = sum(bool(before[k]) and not after[k] for k in common)
    rate = (lambda m: sum(bool(m[k]) for k in common) / n) if n else (lambda m: 0.0)
    return Paired(levels=n, success_before=rate(before), success_after=rate(after), better=better, worse=worse)


def verdict(z: float) -> str:
    """Plain words for the z of a paired change."""
    if z >= Z_THRESHOLD:
        return "better than noise"
    if z <= -Z_THRESHOLD:
        return "worse, beyond noise"
    return "no change distinguishable from noise"


def metrics(p: Paired) -> dict[str, float]:
    """The ``paired/*`` keys of metrics.jsonl (the summary reads them back)."""
    return {"paired/levels": float(p.levels), "paired/success_before": p.success_before,
            "paired/success_after": p.success_after, "paired/change": p.change, "paired/se": p.se, "paired/z": p.z,
            "paired/discordant_better": float(p.better), "paired/discordant_worse": float(p.worse)}


def level_successes(trajectories) -> dict[tuple[str, int], bool]:
    """Each level's outcome, keyed by (env, seed); one episode per level in a paired pass."""
    return {(t.env_name, int(t.seed)): bool(t.success) for t in trajectories}
