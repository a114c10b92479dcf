"""ragen-frozenlake: the FrozenLake environment (RAGEN CoordFrozenLake), registered through ragen's env hook."""

from ragen import hookimpl, register_variants
from ragen_frozenlake.env import FrozenLakeConfig, FrozenLakeEnv

__all__ = ["FrozenLakeConfig", "FrozenLakeEnv", "VARIANTS", "register_envs"]

_COMMON = {
    "size": 4,
    "p": 0.9,
    "observation_format": "grid_coord",
    "max_turns": 5,
    "max_actions_per_turn": 2,
    "max_actions_per_episode": 10,
    "max_tokens": 120,
}

#: variant name -> (config defaults, one-line description)
VARIANTS = {
    "frozenlake": ({**_COMMON, "success_rate": 1.0}, "FrozenLake 4x4, p=0.9, deterministic ice (RAGEN V2 main table)"),
    "frozenlake-slippery": (
        {**_COMMON, "success_rate": 0.8},
        "FrozenLake 4x4, p=0.9, slippery ice: success_rate 0.8 (RAGEN envs.yaml)",
    ),
}


@hookimpl
def register_envs(register):
    register_variants(register, FrozenLakeEnv, VARIANTS)
