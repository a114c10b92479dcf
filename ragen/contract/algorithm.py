"""Algorithm presets: the named bundles ``--algo`` selects."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ragen.config.fields import AT_LEAST_1, NON_NEGATIVE, POSITIVE, Range, option

PLACEMENTS = ("trajectory", "turn")
KL_TYPES = ("k1", "k2", "k3", "abs")
RATIO_LEVELS = ("token", "sequence")
FILTER_SCALINGS = ("none", "linear", "sqrt")
SUCCESS_GATES = ("auto", "always", "never")


@attrs.frozen(kw_only=True)
class AlgorithmPreset:
    """A named bundle of training components and loss settings (spec algorithms.md 6.4)."""

    estimator: str = option(doc="Registered advantage estimator name (gae, grpo, ...).")
    use_critic: bool = option(False, "Train a value head (needed by GAE estimators).")
    filter: str = option("none", "Registered rollout filter name; 'none' keeps every group.")
    filter_options: dict = option(factory=dict, doc="Options of the rollout filter.")
    pre_filter: str = option("", "A second registered filter applied first (e.g. zero-variance before top-p); '' = "
                                 "none.")
    pre_filter_options: dict = option(factory=dict, doc="Options of the pre-filter.")
    estimator_options: dict = option(factory=dict, doc="Options of the advantage estimator.")
    shapers: tuple[str, ...] = option((), "Registered reward shapers applied in order to the kept trajectories' "
                                          "scores.", converter=tuple)
    shaper_options: dict = option(factory=dict, doc="Options per shaper name, e.g. {reward-norm: {method: mean_std}}.")
    reward_placement: str = option("trajectory", "'trajectory': the score on the last sampled token (RAGEN default); "
                                   "'turn': each turn's reward + penalty on that turn's last sampled token.",
                                   choices=PLACEMENTS)
    clip_ratio_low: float = option(0.2, "PPO clip epsilon below 1 (RAGEN 0.2).",
                                   range=Range(0, 1, lo_open=True, hi_open=True))
    clip_ratio_high: float = option(0.28, "PPO clip epsilon above 1, clip-higher (RAGEN 0.28).", range=POSITIVE)
    clip_ratio_c: float = option(3.0, "Dual-clip constant for negative advantages (RAGEN 3.0).",
                                 range=Range(1, lo_open=True))
    log_ratio_clamp: float = option(20.0, "Clamp of log(pi/pi_old) before exp, so one token cannot overflow the ratio.",
                                    range=POSITIVE)
    ratio_level: str = option("token", "'token' (PPO) or 'sequence' (GSPO: the length-normalised sequence ratio).",
                              choices=RATIO_LEVELS)
    loss_agg_mode: str = option("token-mean", "Loss aggregation: token-mean, seq-mean-token-mean, "
                                              "seq-mean-token-sum(-norm).")
    entropy_coef: float = option(0.001, "Entropy bonus coefficient (RAGEN 0.001).", range=NON_NEGATIVE)
    kl_coef: float = option(0.0, "KL-to-reference coefficient in the loss (RAGEN: no KL).", range=NON_NEGATIVE)
    kl_type: str = option("k1", "KL estimator in the loss: k1, k2, k3, abs.", choices=KL_TYPES)
    kl_reward_coef: float = option(0.0, "beta of the KL penalty subtracted from the token rewards (0 = off).",
                                   range=NON_NEGATIVE)
    kl_reward_type: str = option("k1", "KL estimator in the reward: k1, k2, k3, abs.", choices=KL_TYPES)
    kl_target: float | None = option(None, "Adaptive KL-in-reward: target KL; None keeps beta fixed.", range=POSITIVE)
    kl_horizon: int = option(10000, "Adaptive KL-in-reward horizon in trajectories (verl's default).", range=AT_LEAST_1)
    log_ref_kl: bool = option(False, "Load the reference model and log actor/ref_kl even with no KL term.")
    success_gate: str = option(
        "auto", "Leave out of the update (before the filters) every group in which no member succeeded: 'auto' does it "
                "for envs that declare a step_cost (Sokoban) when the preset compares members of a group (no critic, "
                "or a filter), so the per-action cost cannot push towards fewer actions on its own; 'always' for every "
                "env (one that never reports success then trains nothing); 'never' (RAGEN). docs/algorithms.md.",
        choices=SUCCESS_GATES)
    filter_loss_scaling: str = option("none", "Scale advantages by the kept-group ratio: none, linear or sqrt (§4.3).",
                                      choices=FILTER_SCALINGS)
    description: str = option("", "One line for listings.")
    source: str = option("", "Where the recipe comes from (paper or script).")

    @property
    def needs_reference(self) -> bool:
        """A reference policy is loaded only when a KL term is active or logged (RAGEN always computes it)."""
        return self.kl_coef > 0 or self.kl_reward_coef > 0 or self.log_ref_kl


def one_process_sum(values: Sequence[float]) -> list[float]:
    """``AdvantageInput.all_reduce_sum`` of a one-process run: the sums over all processes are the values."""
    return list(values)


@attrs.frozen
class AdvantageInput:
    """What an advantage estimator receives: torch tensors for the kept batch of N trajectories padded to L token
    positions (row i is one trajectory; position j is token j of its ``input_ids``), on the trainer's device."""

    token_rewards: Any = option(doc="float32 tensor [N, L]: the placed rewards (algorithms.md §2): each trajectory's "
                                    "(shaped) score on its last sampled token, or with reward_placement='turn' each "
                                    "turn's reward + penalty on that turn's last sampled token; minus the KL penalty "
                                    "when kl_reward_coef > 0; 0 elsewhere.")
    mask: Any = option(doc="float32 tensor [N, L]: the loss mask, 1.0 exactly on the tokens the model sampled, 0.0 on "
                           "prompts, env replies and padding.")
    scores: Any = option(doc="float32 tensor [N]: the trajectory scores S_i after the shapers (raw score = env rewards "
                             "+ format penalties when the preset has no shaper).")
    group_ids: Any = option(doc="int64 tensor [N]: the env group of each row, from the rollout record (never inferred "
                                "from row order); rows of one group share a seed.")
    values: Any = option(None, "float32 tensor [N, L]: the critic's value at each position, aligned with "
                               "token_rewards; None without a critic (use_critic=false).")
    turn_ids: Any = option(None, "int64 tensor [N, L]: the turn index (0-based) of each sampled token, -1 elsewhere.")
    turn_scores: Any = option(None, "float32 tensor [N, T]: reward + format penalty of each turn, 0 past a "
                                    "trajectory's last turn (T = the most turns in the batch).")
    kl_rewards: Any = option(None, "float32 tensor [N, L]: the KL-in-reward part of token_rewards (0 without KL in "
                                   "the reward), for turn-level estimators that place rewards themselves.")
    world_size: int = option(1, "int: the data-parallel processes the batch is split over; each estimates on its own "
                                "rows (N is this process's share, whole groups). 1 in a one-process run.",
                             range=AT_LEAST_1)
    all_reduce_sum: Callable[[Sequence[float]], list[float]] = option(
        one_process_sum, "(list[float]) -> list[float]: element-wise sums over all processes, for a statistic of the "
                         "whole batch (whitening: the sum and count, then the squared deviations); every process "
                         "calls it the same number of times. The trainer passes the distributed one; with one process "
                         "it returns its input.")
    metrics: dict = option(factory=dict, doc="dict[str, float]: write your own numbers here (e.g. a clip rate); the "
                                             "trainer logs them with the step as 'estimator/<name>/<key>' in "
                                             "metrics.jsonl (finite numbers only; a component's breach is one line).")


@attrs.frozen
class AdvantageOutput:
    """What an advantage estimator returns."""

    advantages: Any = option(doc="float tensor [N, L]: per-token advantages, 0 where mask is 0 (the trainer scales "
                                 "them by filter_loss_scaling and uses them as given).")
    returns: Any = option(None, "float tensor [N, L]: value targets for the critic (critic estimators such as gae); "
                                "None otherwise.")


@attrs.frozen
class FilterInput:
    """What a rollout filter sees: one entry per trajectory of the groups still in play (a pre-filter's kept groups
    for the main filter), in the same order in every field. Plain Python sequences, not tensors."""

    raw_rewards: Sequence[float] = option(doc="list[float]: RAW scores, env rewards + format penalties; never "
                                              "normalised or shaped (shapers run after filtering).")
    group_ids: Sequence[int] = option(doc="list[int]: the env group of each trajectory; a filter keeps or drops whole "
                                          "groups by these ids.")
    successes: Sequence[bool] = option((), "list[bool]: whether each episode succeeded.")
    lengths: Sequence[int] = option((), "list[int]: sampled (trained) tokens of each trajectory, Σ loss_mask.")
    n_groups: int = option(0, "int: groups of the step's rollout, before the success gate and any pre-filter left some "
                                 "out (top_k's fraction counts them, algorithms.md §7.2); 0: count the groups in "
                                 "group_ids.", range=NON_NEGATIVE)
    entropies: Sequence[float] | None = option(None, "list[float] | None: the mean token entropy of each trajectory, "
                                                     "computed only when the filter callable has needs_entropy = True.")
    metrics: dict = option(factory=dict, doc="dict[str, float]: write your own numbers here (e.g. a clip rate); the "
                                             "trainer logs them with the step as 'filter/<name>/<key>' in "
                                             "metrics.jsonl (finite numbers only; a component's breach is one line).")


@attrs.frozen
class ShapeInput:
    """What a reward shaper sees: the trajectories the filters kept, in the same order in every field."""

    scores: Sequence[float] = option(doc="list[float]: the current score of each trajectory: raw (env rewards + format "
                                         "penalties) for the first shaper, the previous shaper's output after that.")
    group_ids: Sequence[int] = option(doc="list[int]: the env group of each trajectory (for per-group normalisation).")
    env_names: Sequence[str] = option((), "list[str]: the env variant of each trajectory, e.g. 'sokoban'.")
    trajectories: Sequence[Any] = option((), "list[ragen.Trajectory]: the episodes themselves: turns "
                                             "(ragen.TurnRecord: texts, parsed answers, actions, rewards, penalties), "
                                             "token ids, success.")
    turn_scores: Sequence[Sequence[float]] | None = option(
        None, "list[list[float]] | None: the current reward of each turn of each trajectory, one entry per TurnRecord: "
              "reward + penalty for the first shaper, the last ShapeOutput's turn_scores after that; they become "
              "AdvantageInput.turn_scores and the turn-placed rewards. None: the caller did not pass them (a shaper "
              "that needs them starts from the turn records).")
    metrics: dict = option(factory=dict, doc="dict[str, float]: write your own numbers here (e.g. a clip rate); the "
                                             "trainer logs them with the step as 'shaper/<name>/<key>' in "
                                             "metrics.jsonl (finite numbers only; a component's breach is one line).")


@attrs.frozen
class ShapeOutput:
    """What a shaper returns when it changes turn rewards too (a plain ``list[float]`` changes only the scores and
    leaves the turn scores as they were)."""

    scores: Sequence[float] = option(doc="list[float]: one training score per trajectory, as a plain shaper returns.")
    turn_scores: Sequence[Sequence[float]] = option(doc="list[list[float]]: the new reward of each turn of each "
                                                        "trajectory (same shape as ShapeInput.turn_scores).")

    def __iter__(self):
        # a caller that reads a shaper's output as a list of scores would silently drop the turn credit
        raise TypeError("a ShapeOutput is not a list of scores: read .scores and .turn_scores (docs/plugin-hooks.md)")


@attrs.frozen
class FilterResult:
    """What a rollout filter returns."""

    kept_groups: list = option(doc="list[int]: the group ids (values of FilterInput.group_ids) to keep; order does not "
                                   "matter; [] keeps nothing (the trainer skips that update and counts it).")
    metrics: dict = option(factory=dict, doc="dict[str, float]: logged with the step in metrics.jsonl under 'rollout/' "
                                             "+ the name (a leading 'rollout/' is kept once; a pre-filter's under "
                                             "'rollout/pre_filter_').")
