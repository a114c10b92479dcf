"""Reward shapers (algorithms.md §2-§3): turn the kept trajectories' scores into training scores.

Shapers run after filtering (filters always see raw rewards) and before placement and advantages. Turn-level scores
are not a shaper but a placement: ``algo.options.reward_placement=turn``; the ``potential`` shaper changes them too
(it returns a ``ragen.ShapeOutput``).
"""

from __future__ import annotations

import attrs
import numpy as np

from ragen import ConfigError, ShapeInput, ShapeOutput, option

METHODS = ("identity", "mean", "mean_std", "asym_clip")
GROUPINGS = ("group", "variant", "batch")


def _one_of(choices):
    def check(inst, attribute, value):
        if value not in choices:
            raise ValueError(f"{attribute.name}: expected one of {', '.join(choices)}, got {value!r}")

    return check


@attrs.frozen(kw_only=True)
class RewardNormConfig:
    """Reward normalisation of the trajectory score R_i (§3; RAGEN `reward_normalization`)."""

    method: str = option("mean_std", "identity, mean (R - mu), mean_std ((R - mu)/(sigma + 1e-6), sigma unbiased) or "
                         "asym_clip (mean_std clamped to [-1, 3]).", validator=_one_of(METHODS))
    grouping: str = option("group", "Units: group (same seed; RAGEN 'state'), variant (env name; 'inductive') "
                                    "or batch.", validator=_one_of(GROUPINGS))


def units(inp: ShapeInput, grouping: str) -> list:
    if grouping == "group":
        return list(inp.group_ids)
    if grouping == "variant":
        if len(inp.env_names) != len(inp.scores):
            raise ValueError("grouping 'variant' needs ShapeInput.env_names")
        return list(inp.env_names)
    return [0] * len(inp.scores)


def normalise(scores: list[float], keys: list, method: str) -> list[float]:
    """Normalise within each unit; units of one member become 0; skipped when every unit has one member."""
    if method == "identity" or len(set(keys)) == len(keys):
        return list(scores)
    out = [0.0] * len(scores)
    for key in dict.fromkeys(keys):
        idx = [i for i, k in enumerate(keys) if k == key]
        vals = np.array([scores[i] for i in idx], dtype=np.float64)
        mu = vals.mean()
        sigma = vals.std(ddof=1) if len(vals) > 1 else 0.0
        norm = vals - mu if method == "mean" else (vals - mu) / (sigma + 1e-6)
        if method == "asym_clip":
            norm = np.clip(norm, -1.0, 3.0)
        for i, v in zip(idx, norm, strict=True):
            out[i] = float(v)
    return out


def make_reward_norm(config: RewardNormConfig):
    """Normalise trajectory scores per group, env variant or batch (identity, mean, mean_std, asym_clip)."""

    def shape(inp: ShapeInput) -> list[float]:
        return normalise(list(inp.scores), units(inp, config.grouping), config.method)

    return shape


@attrs.frozen(kw_only=True)
class FormatPenaltyConfig:
    """Re-weight the format penalty for training (the raw score keeps the rollout's `trainer.format_penalty`)."""

    coef: float = option(-0.1, "Penalty per turn with a format violation in the training score (RAGEN -0.1).")


def make_format_penalty(config: FormatPenaltyConfig):
    """Replace each trajectory's format penalty by coef x (turns with a format violation)."""

    def shape(inp: ShapeInput) -> list[float]:
        if len(inp.trajectories) != len(inp.scores):
            raise ValueError("format-penalty needs ShapeInput.trajectories")
        return [s - t.penalty + config.coef * sum(not turn.format_ok for turn in t.turns)
                for s, t in zip(inp.scores, inp.trajectories, strict=True)]

    return shape


def _between(lo: float, hi: float):
    def check(inst, attribute, value):
        if not lo <= value <= hi:
            raise ValueError(f"{attribute.name}: must be in [{lo}, {hi}], got {value}")

    return check


@attrs.frozen(kw_only=True)
class PotentialConfig:
    """Potential-based turn credit (Ng, Harada & Russell 1999) from ``Env.potential()``: credit for
    progress within an episode that cannot change which policy is optimal."""

    gamma: float = option(1.0, "Discount between turns in gamma * Phi(s') - Phi(s): the estimator's discount between "
                               "turns, 1.0 for every estimator but bi-level-gae, whose high_level_gamma it must equal "
                               "(checked before a run builds). With 1.0 the terms telescope exactly: a loop earns "
                               "nothing.", validator=_between(0.0, 1.0))
    coef: float = option(1.0, "Scale of Phi relative to the env reward (Phi is minus moves left for Sokoban and "
                              "FrozenLake; c * Phi is a potential too).", validator=_between(0.0, 1e6))


POTENTIAL_START, POTENTIAL_END = "potential_start", "potential_end"  # ragen.contract.trajectory's TurnRecord.info keys


def potential_terms(traj, gamma: float) -> list[float]:
    """``gamma * Phi(s_end) - Phi(s_start)`` of each turn; 0 for a turn without recorded potentials (an env without
    ``potential()``, or a state it could not evaluate)."""
    out = []
    for turn in traj.turns:
        start, end = turn.info.get(POTENTIAL_START), turn.info.get(POTENTIAL_END)
        out.append(0.0 if start is None or end is None else gamma * end - start)
    return out


def _report(inp: ShapeInput, terms: list[float], turns: int) -> None:
    """The share of turns that had potentials (0: the env has none, the shaper did nothing) and their mean term."""
    metrics = getattr(inp, "metrics", None)
    if metrics is None or not turns:
        return
    metrics["turns_with_potential"] = len(terms) / turns
    if terms:
        metrics["term_mean"] = sum(terms) / len(terms)


#: the estimators that discount between turns, and the option holding that discount; every other estimator sums turns
#: undiscounted (a trajectory score, or per-token GAE whose discount between turns depends on the tokens in them)
TURN_DISCOUNTS = {"bi-level-gae": ("high_level_gamma", 0.95)}


def check_potential_discount(config: PotentialConfig, preset) -> None:
    """The shaper's ``gamma`` must be the estimator's discount between turns. With gamma < 1 and an estimator that sums
    turns undiscounted, each turn's term is (1 - gamma) |Phi| > 0 when nothing moves: an idle policy was paid (+1.0
    an episode against -0.5 raw on Sokoban) more the further it stood from the goal."""
    key, default = TURN_DISCOUNTS.get(preset.estimator, (None, 1.0))
    allowed = float((preset.estimator_options or {}).get(key, default)) if key else 1.0
    if abs(config.gamma - allowed) > 1e-12:
        where = f"its {key} ({allowed:g})" if key else "1.0: it sums turns undiscounted"
        raise ConfigError(
            f"algo.options.shaper_options.potential.gamma: {config.gamma:g} does not match the estimator "
            f"{preset.estimator!r}, whose discount between turns is {where}; set gamma to {allowed:g}, or use "
            "bi-level-gae with high_level_gamma equal to gamma"
        )


def make_potential(config: PotentialConfig):
    """Adds ``coef * (gamma * Phi(s') - Phi(s))`` to each turn's reward and the discounted sum of these terms,
    ``coef * (gamma^T Phi(s_T) - Phi(s_0))``, to the trajectory score: the optimal policy is unchanged (the terms
    telescope), but each turn is credited for the progress it made. For turn-level estimators (turn-gae,
    bi-level-gae with turn_rewards, reward_placement=turn); list it first, before reward-norm."""

    def shape(inp: ShapeInput) -> ShapeOutput:
        if len(inp.trajectories) != len(inp.scores):
            raise ValueError("potential needs ShapeInput.trajectories")
        base = inp.turn_scores
        if base is None:
            base = [[t.reward + t.penalty for t in traj.turns] for traj in inp.trajectories]
        scores, turn_scores, covered = [], [], []
        for score, row, traj in zip(inp.scores, base, inp.trajectories, strict=True):
            terms = [config.coef * f for f in potential_terms(traj, config.gamma)]
            if len(row) != len(terms):
                raise ValueError(f"turn_scores has {len(row)} turns for a trajectory of {len(terms)}")
            turn_scores.append([float(r) + f for r, f in zip(row, terms)])
            scores.append(float(score) + sum(config.gamma ** t * f for t, f in enumerate(terms)))
            covered += [f for f, turn in zip(terms, traj.turns) if POTENTIAL_START in turn.info]
        _report(inp, covered, sum(len(t.turns) for t in inp.trajectories))
        return ShapeOutput(scores=scores, turn_scores=turn_scores)

    shape.check_preset = lambda preset: check_potential_discount(config, preset)
    return shape
