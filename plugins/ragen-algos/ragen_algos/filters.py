"""Rollout filters: keep or drop whole groups on raw rewards (algorithms.md §7). The V2 filters come later."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ragen import FilterResult


@attrs.frozen(kw_only=True)
class NoFilterConfig:
    """The no-op filter takes no options."""


def make_none(config: NoFilterConfig):
    """Keep every group."""

    def apply(raw_rewards: Sequence[float], group_ids: Sequence[int]) -> FilterResult:
        groups = sorted(set(group_ids))
        return FilterResult(kept_groups=groups, metrics={"rollout/filter_kept_count": len(groups), "rollout/filter_kept_ratio": 1.0})

    return apply
