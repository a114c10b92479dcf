"""The run configuration: field declarations (``fields``), the ``RunConfig`` tree (``schema``), structuring with
one-line errors (``structure``) and loading files and overrides (``load``).

The names below are the package's face; modules import them from here or from their own module. ``schema`` and
``load`` (and yaml under it) are imported at the first use of one of their names: the env and algorithm contracts
import ``fields``, which runs this file, and commands that only list plugins read no run config.
"""

import importlib

from ragen.config.fields import Range, option

# eager: the function ``structure`` must replace its module's name here, as a later import of the module would not
from ragen.config.structure import converter, structure

#: name -> the module of this package that defines it, imported on first access
_LAZY = {
    **dict.fromkeys(("apply_overrides", "config_markdown", "describe", "load_config", "read_file", "to_dict"), "load"),
    **dict.fromkeys(("SCHEMES", "AlgoSection", "CollapseSection", "EarlyStopSection", "EnvEntry", "EnvSection",
                     "LoggingSection", "ModelConfig", "RolloutSection", "RunConfig", "TrainerSection",
                     "WarmstartSection"), "schema"),
}

__all__ = [
    "SCHEMES", "AlgoSection", "CollapseSection", "EarlyStopSection", "EnvEntry", "EnvSection", "LoggingSection",
    "ModelConfig", "Range", "RolloutSection", "RunConfig", "TrainerSection", "WarmstartSection", "apply_overrides",
    "config_markdown", "converter", "describe", "load_config", "option", "read_file", "structure", "to_dict",
]


def __getattr__(name: str):
    if name in ("load", "schema"):  # the submodules themselves, as ``ragen.config.schema`` after an eager import
        return importlib.import_module(f"{__name__}.{name}")
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, "load", "schema"})
