"""ragen-bandit: the two-armed bandit (RAGEN Bandit / BanditTest), registered through ragen's env hook."""

from ragen import hookimpl, register_variants
from ragen_bandit.env import TEST_PAIRS, TRAIN_PAIRS, BanditConfig, BanditEnv, HighRiskExpert, draw_arms

__all__ = [
    "BanditConfig",
    "BanditEnv",
    "HighRiskExpert",
    "TEST_PAIRS",
    "TRAIN_PAIRS",
    "VARIANTS",
    "draw_arms",
    "register_envs",
]

# RAGEN: one turn, one action, a 500-token generation cap
_BUDGET = {
    "max_turns": 1,
    "max_actions_per_turn": 1,
    "max_actions_per_episode": 1,
    "max_tokens": 100,
    "response_length": 500,
}

#: variant name -> (config defaults, one-line description)
VARIANTS = {
    "bandit": (
        {**_BUDGET, "pair_set": "train"},
        "Two-armed bandit, RAGEN's 12 training arm-name pairs (low 0.1, high 1.0 w.p. 0.25)",
    ),
    "bandit-test": (
        {**_BUDGET, "pair_set": "test"},
        "Two-armed bandit, RAGEN's 8 held-out arm-name pairs (BanditTest)",
    ),
}


@hookimpl
def register_envs(register):
    register_variants(register, BanditEnv, VARIANTS)
