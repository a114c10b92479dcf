"""The run configuration: field declarations (``fields``), the ``RunConfig`` tree (``schema``), structuring with
one-line errors (``structure``) and loading files and overrides (``load``).

The names below are the package's face; modules import them from here or from their own module.
"""

from ragen.config.fields import Range, option
from ragen.config.load import apply_overrides, config_markdown, describe, load_config, read_file, to_dict
from ragen.config.schema import (
    SCHEMES,
    AlgoSection,
    CollapseSection,
    EarlyStopSection,
    EnvEntry,
    EnvSection,
    LoggingSection,
    ModelConfig,
    RolloutSection,
    RunConfig,
    TrainerSection,
    WarmstartSection,
)
from ragen.config.structure import converter, structure

__all__ = [
    "SCHEMES", "AlgoSection", "CollapseSection", "EarlyStopSection", "EnvEntry", "EnvSection", "LoggingSection",
    "ModelConfig", "Range", "RolloutSection", "RunConfig", "TrainerSection", "WarmstartSection", "apply_overrides",
    "config_markdown", "converter", "describe", "load_config", "option", "read_file", "structure", "to_dict",
]
