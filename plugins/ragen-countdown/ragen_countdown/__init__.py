"""ragen-countdown: the Countdown environment and its variants (environments.md §5), registered with ragen."""

from ragen import hookimpl, register_variants
from ragen_countdown.data import SAMPLE
from ragen_countdown.env import CountdownConfig, CountdownEnv, CountdownExpert

__all__ = ["CountdownConfig", "CountdownEnv", "CountdownExpert", "VARIANTS", "register_envs"]

#: RAGEN's Countdown budget: one turn, one answer, "Max response length: 100"
BUDGET = {"max_turns": 1, "max_actions_per_turn": 1, "max_actions_per_episode": 1, "max_tokens": 100}

#: variant -> (config defaults, description)
VARIANTS: dict[str, tuple[dict, str]] = {
    "countdown": (
        dict(BUDGET),
        "3-4 numbers in [1, 99], target in [1, 100], own seeded generator, + - * / (RAGEN Countdown)",
    ),
    "countdown-additive": (
        {**BUDGET, "additive_only": True},
        "Generated instances some +/- sum of the numbers solves (RAGEN's additive instances)",
    ),
    "countdown-file": (
        {**BUDGET, "source": "file", "data_files": (str(SAMPLE),)},
        "Rows of Countdown files (JSONL/parquet, target + nums); default: the shipped 500-row sample",
    ),
}


@hookimpl
def register_envs(register):
    register_variants(register, CountdownEnv, VARIANTS)
