"""Rollout filters (algorithms.md §7): keep or drop WHOLE groups, scored on RAW rewards grouped by recorded group id.

``v2`` is RAGEN-V2's SNR-aware filter (score = in-group reward std by default; strategies top_p linear/softmax,
top_k, top_k_abs, min_p); ``top-p``, ``top-k``, ``top-k-abs``, ``min-p`` and the named presets (``v2-main``,
``v2-recommended``, ``top-k-0.25``) are the same filter with other defaults. ``zero-variance`` is DAPO's drop of
groups whose outcome is identical for every member. An empty selection is legal: the trainer skips the update.
"""

from __future__ import annotations

import attrs
import numpy as np

from ragen import FilterInput, FilterResult, option

METRICS = (
    "reward_std",
    "reward_variance",
    "reward_var",
    "reward_mean",
    "reward_sum",
    "entropy",
    "entropy_std",
    "length",
)
STRATEGIES = ("top_p", "top_k", "top_k_abs", "min_p")
ZERO = 1e-10


def _one_of(choices):
    def check(inst, attribute, value):
        if value not in choices:
            raise ValueError(f"{attribute.name}: expected one of {', '.join(choices)}, got {value!r}")

    return check


# ---- group statistics ------------------------------------------------------------------------------------------------
def by_group(values, group_ids) -> dict[int, list[float]]:
    """Values per group id, groups in ascending id order (the tie-break order)."""
    out: dict[int, list[float]] = {}
    for v, g in zip(values, group_ids, strict=True):
        out.setdefault(int(g), []).append(float(v))
    return dict(sorted(out.items()))


def std(v: list[float]) -> float:
    """Unbiased std; 0 for one member."""
    return float(np.std(v, ddof=1)) if len(v) > 1 else 0.0


def reward_stats(inp: FilterInput) -> dict[int, dict[str, float]]:
    return {g: {"std": std(v), "mean": float(np.mean(v)), "sum": float(np.sum(v)), "max": float(np.max(v))}
            for g, v in by_group(inp.raw_rewards, inp.group_ids).items()}


def group_scores(inp: FilterInput, metric: str) -> dict[int, float]:
    """The selection score of every group (§7.1)."""
    if metric in ("reward_std", "reward_variance"):  # RAGEN's "reward_variance" is the std
        return {g: std(v) for g, v in by_group(inp.raw_rewards, inp.group_ids).items()}
    if metric == "reward_var":
        return {g: std(v) ** 2 for g, v in by_group(inp.raw_rewards, inp.group_ids).items()}
    if metric == "reward_mean":
        return {g: float(np.mean(v)) for g, v in by_group(inp.raw_rewards, inp.group_ids).items()}
    if metric == "reward_sum":
        return {g: float(np.sum(v)) for g, v in by_group(inp.raw_rewards, inp.group_ids).items()}
    if metric in ("entropy", "entropy_std"):
        if inp.entropies is None:
            raise ValueError(f"metric {metric!r} needs per-trajectory entropies (FilterInput.entropies)")
        groups = by_group(inp.entropies, inp.group_ids)
        return {g: float(np.mean(v)) if metric == "entropy" else std(v) for g, v in groups.items()}
    if metric == "length":
        return {g: float(np.mean(v)) for g, v in by_group(inp.lengths, inp.group_ids).items()}
    raise ValueError(f"metric: expected one of {', '.join(METRICS)}, got {metric!r}")


# ---- the V2 filter ---------------------------------------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class V2FilterConfig:
    """RAGEN-V2 rollout filter settings (algorithms.md §7; the code default keeps everything)."""

    strategy: str = option(
        "top_p", "top_p, top_k (fraction of groups), top_k_abs (count) or min_p.", validator=_one_of(STRATEGIES)
    )
    value: float = option(
        1.0, "p of top_p, fraction of top_k, count of top_k_abs, ratio of min_p (1.0 top_p = keep all)."
    )
    metric: str = option(
        "reward_std",
        "Group score: reward_std (default; alias reward_variance), reward_var, reward_mean, "
        "reward_sum, entropy, entropy_std, length.",
        validator=_one_of(METRICS),
    )
    type: str = option(
        "largest", "'largest' keeps high scores, 'smallest' low ones.", validator=_one_of(("largest", "smallest"))
    )
    mode: str = option(
        "linear",
        "top_p mode: 'linear' (cumulative share of the score sum) or 'softmax' (RAGEN V2 table).",
        validator=_one_of(("linear", "softmax")),
    )
    include_zero: bool = option(
        True, "Keep zero-score groups among the candidates (False drops them before selecting)."
    )
    selection_eps: float = option(0.01, "Subtracted from the linear top_p threshold (RAGEN 0.01).")
    softmax_temperature: float = option(
        1.0, "Temperature of the softmax mode (1.0 = RAGEN); softmax depends on the reward scale."
    )
    min_groups: int = option(
        0,
        "top_k: keep at least this many groups (of the candidates) whatever the fraction: with 4 "
        "groups per step, 25% is one level per update, too few to learn from (StarPO-S: 4; 0 = "
        "RAGEN's plain fraction).",
        validator=attrs.validators.ge(0),
    )

    @property
    def needs_entropy(self) -> bool:
        return self.metric in ("entropy", "entropy_std")


def _ordered(scores: dict[int, float], largest: bool) -> list[tuple[int, float]]:
    """Candidates sorted by score (descending for largest), ties broken by lower group id (stable sort)."""
    return sorted(scores.items(), key=lambda kv: -kv[1] if largest else kv[1])


def select_top_p_linear(cands: list[tuple[int, float]], value: float, eps: float) -> list[int]:
    tau = value * sum(s for _, s in cands) - eps
    acc, kept = 0.0, []
    for g, s in cands:
        if acc >= tau or s <= 0:
            break
        kept.append(g)
        acc += s
    return kept if acc >= tau else []


def select_top_p_softmax(cands: list[tuple[int, float]], value: float, temperature: float, largest: bool) -> list[int]:
    s = np.array([sc for _, sc in cands], dtype=np.float64) / temperature
    s = s if largest else -s
    q = np.exp(s - s.max())
    q /= q.sum()
    order = sorted(range(len(cands)), key=lambda i: -q[i])  # stable: ties keep the candidate order
    csum = np.cumsum(q[order])
    hits = np.nonzero(csum >= value - 1e-12)[0]
    k = len(cands) if not len(hits) else min(len(cands), int(hits[0]) + 1)
    return [cands[i][0] for i in order[:k]]


def select(config: V2FilterConfig, scores: dict[int, float], n_groups: int = 0) -> list[int]:
    """The kept group ids (§7.2); top_k's fraction counts ``n_groups`` (the rollout's groups, before the success gate
    or a pre-filter left some out), by default the scored ones."""
    n_groups = n_groups or len(scores)
    cands = {g: s for g, s in scores.items() if config.include_zero or abs(s) > ZERO}
    largest = config.type == "largest"
    ordered = _ordered(cands, largest)
    if config.strategy == "top_p":
        if config.value >= 1:
            return [g for g, _ in ordered]
        if config.mode == "linear":
            return select_top_p_linear(ordered, config.value, config.selection_eps) if ordered else []
        return select_top_p_softmax(ordered, config.value, config.softmax_temperature, largest) if ordered else []
    if config.strategy == "top_k":
        return [g for g, _ in ordered[: max(1, int(config.value * n_groups), config.min_groups)]]
    if config.strategy == "top_k_abs":
        return [g for g, _ in ordered[: int(config.value)]]
    if not ordered:  # min_p
        return []
    vals = [s for _, s in ordered]
    if largest:
        return [g for g, s in ordered if s >= config.value * max(vals)]
    return [g for g, s in ordered if s <= min(vals) / config.value]


def member_values(inp: FilterInput, metric: str):
    """The per-trajectory values behind a metric: rewards, entropies or lengths."""
    if metric in ("entropy", "entropy_std"):
        return inp.entropies
    return inp.lengths if metric == "length" else inp.raw_rewards


def filter_metrics(inp: FilterInput, metric: str, scores: dict[int, float], kept: list[int]) -> dict[str, float]:
    """The §7.4 metrics: per-group std/max/mean of the metric's member values and of the raw rewards, averaged over
    all groups (``in_group_*``) and over the kept ones (``chosen_in_group_*``)."""
    members = by_group(member_values(inp, metric), inp.group_ids)
    rewards = reward_stats(inp)
    out: dict[str, float] = {}
    for prefix, groups in (("in_group", list(members)), ("chosen_in_group", [g for g in members if g in set(kept)])):
        for stat, fn in (("std", std), ("max", max), ("mean", np.mean)):
            out[f"rollout/{prefix}_{stat}"] = float(np.mean([fn(members[g]) for g in groups])) if groups else 0.0
        for stat in ("std", "max", "mean", "sum"):
            out[f"rollout/{prefix}_reward_{stat}"] = (
                float(np.mean([rewards[g][stat] for g in groups])) if groups else 0.0
            )
    out["rollout/filter_kept_count"] = float(len(kept))
    out["rollout/filter_kept_ratio"] = len(kept) / max(len(scores), 1)
    out["rollout/filter_zero_count"] = float(sum(abs(s) <= ZERO for s in scores.values()))
    return out


def make_v2(config: V2FilterConfig):
    """RAGEN-V2 SNR-aware filter: keep the whole groups with the largest (or smallest) score (§7)."""

    def apply(inp: FilterInput) -> FilterResult:
        scores = group_scores(inp, config.metric)
        kept = select(config, scores, inp.n_groups)
        return FilterResult(kept_groups=sorted(kept), metrics=filter_metrics(inp, config.metric, scores, kept))

    apply.needs_entropy = config.needs_entropy
    return apply


# ---- DAPO zero-variance drop -----------------------------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class ZeroVarianceConfig:
    """DAPO's dynamic-sampling filter (§7.5): drop groups whose outcome is the same for every member."""

    outcome: str = option(
        "success",
        "'success' (default) or 'reward' (raw score, equal within 1e-8). Never a shaped score.",
        validator=_one_of(("success", "reward")),
    )


def make_zero_variance(config: ZeroVarianceConfig):
    """DAPO zero-variance drop: keep only groups whose members' outcomes differ."""

    def apply(inp: FilterInput) -> FilterResult:
        if config.outcome == "success":
            if len(inp.successes) != len(inp.group_ids):
                raise ValueError("outcome 'success' needs FilterInput.successes")
            groups = by_group([float(s) for s in inp.successes], inp.group_ids)
        else:
            groups = by_group(inp.raw_rewards, inp.group_ids)
        kept = [g for g, v in groups.items() if max(v) - min(v) > 1e-8]
        metrics = {"rollout/dapo_dropped_groups": float(len(groups) - len(kept)),
                   "rollout/filter_kept_count": float(len(kept)),
                   "rollout/filter_kept_ratio": len(kept) / max(len(groups), 1)}
        return FilterResult(kept_groups=kept, metrics=metrics)

    return apply


# ---- no filter -------------------------------------------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class NoFilterConfig:
    """The no-op filter takes no options."""


def make_none(config: NoFilterConfig):
    """Keep every group (RAGEN's default: top_p 1.0, include_zero True)."""
    keep_all = make_v2(V2FilterConfig())

    def apply(inp: FilterInput) -> FilterResult:
        return keep_all(inp)

    return apply


#: name -> (defaults over V2FilterConfig, description). The last three are the spec's filter presets (§6.4).
V2_VARIANTS = {
    "v2": (
        {},
        "RAGEN-V2 rollout filter; options strategy, value, metric, type, mode, include_zero (keeps all by default)",
    ),
    "top-p": (
        {"strategy": "top_p", "value": 0.9},
        "Keep the top groups holding a share p of the summed score (linear)",
    ),
    "top-k": ({"strategy": "top_k", "value": 0.25}, "Keep the best fraction k of groups (StarPO-S: 0.25)"),
    "top-k-abs": ({"strategy": "top_k_abs", "value": 2}, "Keep the best k groups (an absolute count)"),
    "min-p": ({"strategy": "min_p", "value": 0.5}, "Keep groups scoring at least p x the best score"),
    "v2-main": (
        {"strategy": "top_p", "value": 0.9, "mode": "softmax", "include_zero": True},
        "V2 main table: top_p 0.9, softmax, include_zero",
    ),
    "v2-recommended": (
        {"strategy": "top_p", "value": 0.9, "mode": "linear", "include_zero": False, "selection_eps": 0.01},
        "RAGEN README: top_p 0.9, linear, drop zero-std groups",
    ),
    "top-k-0.25": (
        {"strategy": "top_k", "value": 0.25, "type": "largest"},
        "StarPO-S: top 25% of groups by reward std",
    ),
}

