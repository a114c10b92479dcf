"""Advantage estimators (algorithms.md §4): small pure functions over torch tensors.

Every estimator receives an ``AdvantageInput`` (N rows x L positions) and returns per-token advantages (0 on
mask-0 positions) and, for critic estimators, value targets. Group statistics always use the recorded group ids,
never the row order. Statistics are computed in float64.
"""

from __future__ import annotations

import attrs

from ragen import AdvantageInput, AdvantageOutput, option
from ragen_algos.lazy import torch  # imported at the first estimate: listing this plugin's names loads no torch


# ---- shared pieces -------------------------------------------------------------------------------------------------
def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8, *,
                  batch: AdvantageInput | None = None) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) over mask-1 entries, var unbiased; mask-0 entries become 0 (mean not restored).

    Under data parallelism (``batch.world_size > 1``) the statistics are those of the global batch (two sums over
    the processes, ``batch.all_reduce_sum``: sum and count, then the squared deviations), so every rank whitens
    exactly like a one-process run over all rows."""
    m = mask.bool()
    vals = x[m]
    if batch is not None and batch.world_size > 1:
        total, n = batch.all_reduce_sum([float(vals.double().sum()), float(vals.numel())])
        mean = total / max(n, 1.0)
        (sq,) = batch.all_reduce_sum([float(((vals.double() - mean) ** 2).sum())])
        var = sq / (n - 1) if n > 1 else 0.0
        return ((x - mean) * (1.0 / (var + eps) ** 0.5 if n > 1 else 1.0)) * mask
    if vals.numel() < 2:
        return (x - vals.mean()) * mask if vals.numel() else x * 0
    mean, var = vals.mean(), vals.var(unbiased=True)
    return (x - mean) * torch.rsqrt(var + eps) * mask


def group_stats(scores: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row (group mean, unbiased group std, group size); a group of one has mean 0 and std 1 (§4.3)."""
    mu, sigma, size = (torch.empty_like(scores) for _ in range(3))
    for g in torch.unique(group_ids):
        idx = group_ids == g
        s = scores[idx]
        size[idx] = float(s.numel())
        if s.numel() == 1:
            mu[idx], sigma[idx] = 0.0, 1.0
        else:
            mu[idx], sigma[idx] = s.mean(), s.std(unbiased=True)
    return mu, sigma, size


def broadcast(per_row: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A per-trajectory value on every sampled token of its row."""
    return per_row.to(torch.float32)[:, None] * mask.to(torch.float32)


def turn_spans(mask_row: torch.Tensor, turn_ids_row: torch.Tensor | None) -> list[list[int]]:
    """The sampled positions of each turn, in order. Turns come from ``turn_ids`` when given, else from the
    contiguous runs of mask-1 positions (each turn's sampled ids are contiguous; env text separates turns)."""
    pos = torch.nonzero(mask_row, as_tuple=False).flatten().tolist()
    spans: list[list[int]] = []
    prev_key = None
    for j in pos:
        key = int(turn_ids_row[j]) if turn_ids_row is not None else None
        if not spans or (key != prev_key if turn_ids_row is not None else j != spans[-1][-1] + 1):
            spans.append([])
        spans[-1].append(j)
        prev_key = key
    return spans


def gae_positions(rewards: list[float], values: list[float], gamma: float, lam: float) -> list[float]:
    """GAE over one ordered list of positions, bootstrapping 0 after the last one."""
    adv = [0.0] * len(rewards)
    next_v = next_a = 0.0
    for k in range(len(rewards) - 1, -1, -1):
        delta = rewards[k] + gamma * next_v - values[k]
        next_a = delta + gamma * lam * next_a
        adv[k] = next_a
        next_v = values[k]
    return adv


def _need_values(batch: AdvantageInput, name: str) -> None:
    if batch.values is None:
        raise ValueError(f"{name} needs critic values; use an algorithm with use_critic=True")


# ---- outcome estimators (no critic) -----------------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class GRPOConfig:
    """Options of the group-normalised outcome estimators."""

    norm_adv_by_std: bool = option(True, "Divide by the group's unbiased std (GRPO); False gives Dr. GRPO.")
    epsilon: float = option(1e-6, "Added to the std before dividing (algorithms.md §4.3).")
    singleton: str = option("zero", "Advantage of a group left with one member (failed envs, data-parallel leftovers): "
                                    "'zero' (no baseline, no signal) or 'score' (the spec's and verl's mean 0, std 1: "
                                    "A = S, the raw score).", validator=attrs.validators.in_(("zero", "score")))


def group_advantages(scores: torch.Tensor, group_ids: torch.Tensor, norm_by_std: bool, eps: float,
                     singleton_zero: bool = False) -> torch.Tensor:
    """Per-trajectory (S - mean_g) [/ (std_g + eps)], std unbiased; a group of one has mean 0, std 1 (A = S), or A = 0
    with ``singleton_zero``."""
    scores = scores.to(torch.float64)
    mu, sigma, n = group_stats(scores, group_ids)
    adv = (scores - mu) / (sigma + eps) if norm_by_std else scores - mu
    return torch.where(n > 1, adv, torch.zeros_like(adv)) if singleton_zero else adv


def make_grpo(config: GRPOConfig):
    """GRPO: group-normalised trajectory advantage on every sampled token (Dr. GRPO without the std). A group of one
    member has no baseline: its raw score (+10.9 seen on sokoban) would be its advantage, so by default it gets 0."""

    def estimate(batch: AdvantageInput) -> AdvantageOutput:
        adv = group_advantages(batch.scores, batch.group_ids, config.norm_adv_by_std, config.epsilon,
                               singleton_zero=config.singleton == "zero")
        return AdvantageOutput(advantages=broadcast(adv, batch.mask))

    return estimate


@attrs.frozen(kw_only=True)
class NoOptions:
    """This estimator takes no options."""


def make_rloo(config: NoOptions):
    """RLOO: S_i minus the mean of the other members' scores, n/(n-1)·(S_i - mean); a group of one keeps S_i."""

    def estimate(batch: AdvantageInput) -> AdvantageOutput:
        s = batch.scores.to(torch.float64)
        mu, _, n = group_stats(s, batch.group_ids)
        adv = torch.where(n > 1, n / (n - 1).clamp(min=1) * (s - mu), s)
        return AdvantageOutput(advantages=broadcast(adv, batch.mask))

    return estimate


@attrs.frozen(kw_only=True)
class ReinforceConfig:
    """Options of REINFORCE++."""

    gamma: float = option(1.0, "Discount per sampled token of the return (REINFORCE++: 1.0).")


def make_reinforce_pp(config: ReinforceConfig):
    """REINFORCE++: per-token discounted return of the placed rewards (KL terms included), whitened over the batch."""

    def estimate(batch: AdvantageInput) -> AdvantageOutput:
        mask = batch.mask.to(torch.float64)
        rewards = batch.token_rewards.to(torch.float64)
        ret = torch.zeros_like(rewards)
        for i in range(rewards.shape[0]):
            pos = torch.nonzero(mask[i], as_tuple=False).flatten().tolist()
            acc = 0.0
            for j in reversed(pos):
                acc = float(rewards[i, j]) + config.gamma * acc
                ret[i, j] = acc
        return AdvantageOutput(advantages=masked_whiten(ret, mask, batch=batch).to(torch.float32))

    return estimate


def make_reinforce_pp_baseline(config: NoOptions):
    """REINFORCE++ with a group baseline: S_i - mean_g broadcast to the tokens, then whitened over the batch."""

    def estimate(batch: AdvantageInput) -> AdvantageOutput:
        adv = group_advantages(batch.scores, batch.group_ids, norm_by_std=False, eps=0.0)
        mask = batch.mask.to(torch.float64)
        return AdvantageOutput(advantages=masked_whiten(adv[:, None] * mask, mask, batch=batch).to(torch.float32))

    return estimate


# ---- critic estimators ----------------------------------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class GAEConfig:
    """Options of token-level GAE."""

    gamma: float = option(1.0, "Discount per sampled token (RAGEN 1.0).")
    lam: float = option(1.0, "GAE lambda (RAGEN 1.0).")
    whiten: bool = option(True, "Whiten advantages over all sampled tokens of the batch (unbiased variance).")


def gae(token_rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float):
    """Token-level GAE over mask-1 positions only (mask-0 positions are skipped, not discounted).

    The recursion is a Python loop, so it runs on CPU copies (one transfer, not a device sync per token) and the
    results go back to the inputs' device."""
    device = token_rewards.device
    r, v, m = (t.detach().to("cpu", torch.float64) for t in (token_rewards, values, mask))
    adv = torch.zeros_like(r)
    for i in range(r.shape[0]):
        pos = torch.nonzero(m[i], as_tuple=False).flatten().tolist()
        row = gae_positions(r[i, pos].tolist(), v[i, pos].tolist(), gamma, lam)
        adv[i, pos] = torch.tensor(row, dtype=torch.float64)
    returns = (adv + v) * m
    return adv.to(device, torch.float32), returns.to(device, torch.float32)


def _finish(adv: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, whiten: bool,
            batch: AdvantageInput) -> AdvantageOutput:
    adv = masked_whiten(adv, mask, batch=batch) if whiten else adv
    return AdvantageOutput(advantages=adv.to(torch.float32), returns=returns.to(torch.float32))


def make_gae(config: GAEConfig):
    """Token-level GAE with a critic (PPO's estimator) on the rewards as placed (trajectory or turn placement)."""

    def estimate(batch: AdvantageInput) -> AdvantageOutput:
        _need_values(batch, "gae")
        mask = batch.mask.to(torch.float32)
        adv, returns = gae(batch.token_rewards.to(torch.float64), batch.values.to(torch.float64), mask, config.gamma,
                           config.lam)
        return _finish(adv, returns, mask, config.whiten, batch)

    return estimate


def _turn_rewards(batch: AdvantageInput, i: int, n_turns: int, use_turn_scores: bool) -> list[float]:
    """r_t of row i: the turn scores (reward + penalty of each turn), or the trajectory score on the last turn only."""
    if use_turn_scores:
        if batch.turn_scores is None:
            raise ValueError("turn rewards need AdvantageInput.turn_scores (the trainer fills them)")
        return [float(batch.turn_scores[i, t]) for t in range(n_turns)]
    return [0.0] * (n_turns - 1) + [float(batch.scores[i])]


def _kl_part(batch: AdvantageInput, i: int, j: int) -> float:
    return float(batch.kl_rewards[i, j]) if batch.kl_rewards is not None else 0.0


def make_turn_gae(config: GAEConfig):
    """Token-level GAE with each turn's reward (env reward + format penalty) on the turn's last sampled token."""

    def estimate(batch: AdvantageInput) -> AdvantageOutput:
        _need_values(batch, "turn-gae")
        mask = batch.mask.to(torch.float64)
        rewards = torch.zeros_like(mask)
        for i in range(mask.shape[0]):
            spans = turn_spans(mask[i], None if batch.turn_ids is None else batch.turn_ids[i])
            r = _turn_rewards(batch, i, len(spans), use_turn_scores=True)
            for t, span in enumerate(spans):
                for j in span:
                    rewards[i, j] = _kl_part(batch, i, j)
                rewards[i, span[-1]] += r[t]
        adv, returns = gae(rewards, batch.values.to(torch.float64), mask, config.gamma, config.lam)
        return _finish(adv, returns, mask, config.whiten, batch)

    return estimate


@attrs.frozen(kw_only=True)
class BiLevelGAEConfig:
    """Options of turn-level (bi-level) GAE (algorithms.md §4.2)."""

    high_level_gamma: float = option(0.95, "gamma_H between turns (RAGEN high_level_gamma 0.95).")
    high_level_lam: float | None = option(None, "lambda_H between turns; None = lam (the spec's default).")
    gamma: float = option(1.0, "gamma_L per sampled token inside a turn (RAGEN gamma 1.0).")
    lam: float = option(1.0, "lambda_L inside a turn (RAGEN lam 1.0).")
    turn_rewards: bool = option(False, "True: r_t = each turn's reward + penalty; False: only the last turn holds the "
                                       "score.")
    whiten: bool = option(True, "Whiten advantages over all sampled tokens of the batch (unbiased variance).")


def bi_level_row(spans: list[list[int]], values: list[float], turn_r: list[float], kl: list[float],
                 cfg: BiLevelGAEConfig) -> list[float]:
    """Advantages at the sampled positions of one row (concatenated spans), before whitening."""
    gh, lh = cfg.high_level_gamma, cfg.lam if cfg.high_level_lam is None else cfg.high_level_lam
    n = len(spans)
    offsets = [sum(len(s) for s in spans[:t]) for t in range(n)]
    u = [values[offsets[t]] for t in range(n)] + [0.0]  # turn value: critic at the turn's first sampled token
    a_h, g_hat = [0.0] * (n + 1), [0.0] * (n + 1)
    for t in range(n - 1, -1, -1):
        a_h[t] = turn_r[t] + gh * u[t + 1] - u[t] + gh * lh * a_h[t + 1]
        g_hat[t] = a_h[t] + u[t]
    out: list[float] = []
    for t, span in enumerate(spans):
        y = turn_r[t] + gh * g_hat[t + 1]  # turn target; g_hat[n] = 0
        idx = range(offsets[t], offsets[t] + len(span))
        r = [kl[k] for k in idx]
        r[-1] += y
        out += gae_positions(r, [values[k] for k in idx], cfg.gamma, cfg.lam)
    return out


def make_bi_level_gae(config: BiLevelGAEConfig):
    """Turn-level GAE between turns (gamma_H) and token-level GAE inside each turn, bootstrapped by the turn target."""

    def estimate(batch: AdvantageInput) -> AdvantageOutput:
        _need_values(batch, "bi-level-gae")
        mask = batch.mask.to(torch.float64)
        values = batch.values.to(torch.float64)
        adv = torch.zeros_like(mask)
        for i in range(mask.shape[0]):
            spans = turn_spans(mask[i], None if batch.turn_ids is None else batch.turn_ids[i])
            if not spans:
                continue
            pos = [j for s in spans for j in s]
            a = bi_level_row(spans, [float(values[i, j]) for j in pos],
                             _turn_rewards(batch, i, len(spans), config.turn_rewards),
                             [_kl_part(batch, i, j) for j in pos], config)
            adv[i, pos] = torch.tensor(a, dtype=torch.float64, device=adv.device)
        returns = (adv + values) * mask
        return _finish(adv, returns, mask, config.whiten, batch)

    return estimate
