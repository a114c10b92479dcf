"""ragen-algos: advantage estimators, reward shapers, rollout filters and algorithm presets, registered through
ragen's hooks (algorithms.md §2-§7)."""

from ragen import hookimpl, register_variants
from ragen_algos import estimators as est
from ragen_algos import filters, presets, shapers


@hookimpl
def register_advantage_estimators(register):
    register("grpo", est.make_grpo, config=est.GRPOConfig)
    register("dr-grpo", est.make_grpo, config=est.GRPOConfig, defaults={"norm_adv_by_std": False},
             description="Dr. GRPO: S_i - group mean, no std division")
    register("rloo", est.make_rloo, config=est.NoOptions)
    register("reinforce++", est.make_reinforce_pp, config=est.ReinforceConfig)
    register("reinforce++-baseline", est.make_reinforce_pp_baseline, config=est.NoOptions)
    register("gae", est.make_gae, config=est.GAEConfig, needs_critic=True)
    register("turn-gae", est.make_turn_gae, config=est.GAEConfig, needs_critic=True)
    register("bi-level-gae", est.make_bi_level_gae, config=est.BiLevelGAEConfig, needs_critic=True)


@hookimpl
def register_reward_shapers(register):
    register("reward-norm", shapers.make_reward_norm, config=shapers.RewardNormConfig)
    register("format-penalty", shapers.make_format_penalty, config=shapers.FormatPenaltyConfig)
    register("potential", shapers.make_potential, config=shapers.PotentialConfig)


@hookimpl
def register_rollout_filters(register):
    register("none", filters.make_none, config=filters.NoFilterConfig)
    register_variants(register, filters.make_v2, filters.V2_VARIANTS, config=filters.V2FilterConfig)
    register("zero-variance", filters.make_zero_variance, config=filters.ZeroVarianceConfig)


@hookimpl
def register_algorithms(register):
    for name, preset in presets.PRESETS.items():
        register(name, preset, description=preset.description)
