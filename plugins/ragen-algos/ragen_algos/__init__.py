"""ragen-algos: advantage estimators, rollout filters and algorithm presets, registered through ragen's hooks."""

from ragen import hookimpl

from ragen_algos import estimators, filters, presets


@hookimpl
def register_advantage_estimators(register):
    register("grpo", estimators.make_grpo, config=estimators.GRPOConfig)
    register("dr-grpo", estimators.make_grpo, config=estimators.GRPOConfig, defaults={"norm_adv_by_std": False},
             description="GRPO without the std division (Dr. GRPO)")
    register("gae", estimators.make_gae, config=estimators.GAEConfig)


@hookimpl
def register_rollout_filters(register):
    register("none", filters.make_none, config=filters.NoFilterConfig)


@hookimpl
def register_algorithms(register):
    for name, preset in presets.PRESETS.items():
        register(name, preset, description=preset.description)
