"""Algorithm presets: the named bundles ``--algo`` selects."""

from __future__ import annotations

from typing import Any

import attrs

from ragen.env import option


@attrs.frozen(kw_only=True)
class AlgorithmPreset:
    """A named bundle of training components and loss settings (spec algorithms.md 6.4)."""

    estimator: str = option(doc="Registered advantage estimator name (gae, grpo, ...).")
    use_critic: bool = option(False, "Train a value head (needed by GAE estimators).")
    filter: str = option("none", "Registered rollout filter name; 'none' keeps every group.")
    filter_options: dict = option(factory=dict, doc="Options of the rollout filter.")
    estimator_options: dict = option(factory=dict, doc="Options of the advantage estimator.")
    shapers: tuple[str, ...] = option((), "Registered reward shapers applied in order before filtering.", converter=tuple)
    clip_ratio_low: float = option(0.2, "PPO clip epsilon below 1 (RAGEN 0.2).")
    clip_ratio_high: float = option(0.28, "PPO clip epsilon above 1, clip-higher (RAGEN 0.28).")
    clip_ratio_c: float = option(3.0, "Dual-clip constant for negative advantages (RAGEN 3.0).")
    loss_agg_mode: str = option("token-mean", "Loss aggregation: token-mean, seq-mean-token-mean, seq-mean-token-sum(-norm).")
    entropy_coef: float = option(0.001, "Entropy bonus coefficient (RAGEN 0.001).")
    kl_coef: float = option(0.0, "KL-to-reference loss coefficient (RAGEN: no KL).")
    kl_type: str = option("k1", "KL estimator when kl_coef > 0: k1, k2, k3, abs.")
    description: str = option("", "One line for listings.")


@attrs.frozen
class AdvantageInput:
    """What an advantage estimator receives (torch tensors; N trajectories, L token positions).

    ``token_rewards`` holds the placed rewards (algorithms.md §2), ``mask`` the loss mask (1 on sampled tokens),
    ``scores`` the trajectory scores S_i, ``group_ids`` the env group of each row (from the rollout record,
    never inferred from order), ``values`` the critic's values aligned like log-probs (None without a critic).
    """

    token_rewards: Any
    mask: Any
    scores: Any
    group_ids: Any
    values: Any = None


@attrs.frozen
class AdvantageOutput:
    """Per-token advantages (0 on mask-0 positions) and, for critic estimators, value targets."""

    advantages: Any
    returns: Any = None


@attrs.frozen
class FilterResult:
    """Which groups a rollout filter keeps, with its metrics (``rollout/...`` names)."""

    kept_groups: list
    metrics: dict = attrs.field(factory=dict)
