"""ragen: multi-turn RL (StarPO) for LLM agents, as a plugin system.

The public API plugins and users import. Importing ragen loads no plugin: entry points are read the first
time a registry is asked for (``make_env``, ``list_envs``...).
"""

from ragen.models import openmp as _openmp

_openmp.apply()  # before anything loads torch: OpenMP's wait policy is read once, then (ragen/models/openmp.py)

import importlib

from ragen.errors import ConfigError, EnvError, PluginError, RagenError, RegistrationError, UnknownNameError

#: public name -> the module that defines it, imported at the first use of the name: the env contract imports
#: gymnasium and numpy, which ``ragen --help`` (and many a script importing one name) never needs
_EXPORTS = {
    **dict.fromkeys(("AdvantageInput", "AdvantageOutput", "AlgorithmPreset", "FilterInput", "FilterResult",
                     "ShapeInput", "ShapeOutput"), "ragen.contract.algorithm"),
    **dict.fromkeys(("Env", "EnvConfig", "Expert", "TextSpace", "option"), "ragen.contract.env"),
    "hookimpl": "ragen.contract.hookspecs",
    **dict.fromkeys(("Parsed", "parse_response"), "ragen.contract.parsing"),
    **dict.fromkeys(("Trajectory", "TurnRecord"), "ragen.contract.trajectory"),
    "register_variants": "ragen.contract.variants",
    **dict.fromkeys(("env_config_fields", "list_components", "list_envs", "make_component", "make_env"),
                    "ragen.plugins.components"),
    **dict.fromkeys(("broken_plugins", "loaded_plugins"), "ragen.plugins.loader"),
    "TOKEN_ENV": "ragen.serve.net",
}

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


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        if not name.startswith("_"):  # a subpackage as an attribute (``ragen.plugins``), as an eager import left it
            try:
                return importlib.import_module(f"{__name__}.{name}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{__name__}.{name}":
                    raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
