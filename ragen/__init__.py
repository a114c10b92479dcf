"""ragen: multi-turn RL (StarPO) for LLM agents, as a plugin system.

The public API plugins and users import. Importing ragen loads no plugin: entry points are read the first
time a registry is asked for (``make_env``, ``list_envs``...).
"""

from ragen.models import openmp as _openmp

_openmp.apply()  # before anything loads torch: OpenMP's wait policy is read once, then (ragen/models/openmp.py)

from ragen.contract.algorithm import (
    AdvantageInput,
    AdvantageOutput,
    AlgorithmPreset,
    FilterInput,
    FilterResult,
    ShapeInput,
    ShapeOutput,
)
from ragen.contract.env import Env, EnvConfig, Expert, TextSpace, option
from ragen.contract.hookspecs import hookimpl
from ragen.contract.parsing import Parsed, parse_response
from ragen.contract.trajectory import Trajectory, TurnRecord
from ragen.contract.variants import register_variants
from ragen.errors import ConfigError, EnvError, PluginError, RagenError, RegistrationError, UnknownNameError
from ragen.plugins.components import env_config_fields, list_components, list_envs, make_component, make_env
from ragen.plugins.loader import broken_plugins, loaded_plugins
from ragen.serve.net import TOKEN_ENV

__version__ = "0.1.0"

__all__ = [
    "AdvantageInput",
    "AdvantageOutput",
    "AlgorithmPreset",
    "FilterInput",
    "FilterResult",
    "ShapeInput",
    "ShapeOutput",
    "ConfigError",
    "Env",
    "EnvConfig",
    "EnvError",
    "Expert",
    "Parsed",
    "PluginError",
    "RagenError",
    "RegistrationError",
    "TOKEN_ENV",
    "TextSpace",
    "Trajectory",
    "TurnRecord",
    "UnknownNameError",
    "broken_plugins",
    "env_config_fields",
    "hookimpl",
    "list_components",
    "list_envs",
    "loaded_plugins",
    "make_component",
    "make_env",
    "option",
    "parse_response",
    "register_variants",
]
