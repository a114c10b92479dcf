"""Advantage estimators (algorithms.md §4): small pure functions over torch tensors."""

from __future__ import annotations

import attrs
import torch

from ragen import AdvantageInput, AdvantageOutput, option


@attrs.frozen(kw_only=True)
class GRPOConfig:
    """Options of the group-normalised outcome estimators."""

    norm_adv_by_std: bool = option(True, "Divide by the group's unbiased std (GRPO); False gives Dr. GRPO.")
    epsilon: float = option(1e-6, "Added to the std before dividing (algorithms.md §4.3).")


def group_advantages(scores: torch.Tensor, group_ids: torch.Tensor, norm_by_std: bool, eps: float) -> torch.Tensor:
    """Per-trajectory (S - mean_g) [/ (std_g + eps)], std unbiased; a group of one has mean 0, std 1."""
    scores = scores.to(torch.float64)
    adv = torch.empty_like(scores)
    for g in torch.unique(group_ids):
        idx = group_ids == g
        s = scores[idx]
        if s.numel() == 1:
            mu, sigma = torch.zeros((), dtype=s.dtype), torch.ones((), dtype=s.dtype)
        else:
            mu, sigma = s.mean(), s.std(unbiased=True)
        adv[idx] = (s - mu) / (sigma + eps) if norm_by_std else s - mu
    return adv


def make_grpo(config: GRPOConfig):
    """Group-normalised trajectory advantage, broadcast to every sampled token (no critic)."""

    def estimate(batch: AdvantageInput) -> AdvantageOutput:
        adv = group_advantages(batch.scores, batch.group_ids, config.norm_adv_by_std, config.epsilon)
        mask = batch.mask.to(torch.float32)
        return AdvantageOutput(advantages=adv.to(torch.float32)[:, None] * mask)

    return estimate


@attrs.frozen(kw_only=True)
class GAEConfig:
    """Options of token-level GAE."""

    gamma: float = option(1.0, "Discount per sampled token (RAGEN 1.0).")
    lam: float = option(1.0, "GAE lambda (RAGEN 1.0).")
    whiten: bool = option(True, "Whiten advantages over all sampled tokens of the batch (unbiased variance).")


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) over mask-1 entries, var unbiased; mask-0 entries become 0."""
    m = mask.bool()
    vals = x[m]
    if vals.numel() < 2:
        return (x - vals.mean()) * mask if vals.numel() else x * 0
    mean, var = vals.mean(), vals.var(unbiased=True)
    return (x - mean) * torch.rsqrt(var + eps) * mask


def gae(token_rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float):
    """Token-level GAE over mask-1 positions only (mask-0 positions are skipped, not discounted)."""
    n, length = token_rewards.shape
    adv = torch.zeros_like(token_rewards, dtype=torch.float64)
    for i in range(n):
        pos = torch.nonzero(mask[i], as_tuple=False).flatten().tolist()
        next_v, next_a = 0.0, 0.0
        for j in reversed(pos):
            delta = float(token_rewards[i, j]) + gamma * next_v - float(values[i, j])
            next_a = delta + gamma * lam * next_a
            adv[i, j] = next_a
            next_v = float(values[i, j])
    returns = (adv + values.to(torch.float64)) * mask
    return adv.to(torch.float32), returns.to(torch.float32)


def make_gae(config: GAEConfig):
    """Token-level GAE with a critic (PPO's estimator)."""

    def estimate(batch: AdvantageInput) -> AdvantageOutput:
        if batch.values is None:
            raise ValueError("gae needs critic values; use an algorithm with use_critic=True")
        mask = batch.mask.to(torch.float32)
        adv, returns = gae(batch.token_rewards.to(torch.float64), batch.values.to(torch.float64), mask, config.gamma, config.lam)
        if config.whiten:
            adv = masked_whiten(adv, mask)
        return AdvantageOutput(advantages=adv, returns=returns)

    return estimate
