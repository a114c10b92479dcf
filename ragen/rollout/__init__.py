"""The rollout side of StarPO: env groups and seeds, token-exact contexts, engines, the multi-turn loop.

* ``groups``     — ``EnvGroups`` pool and the train/val seed rule (environments.md §1.5)
* ``context``    — ``ChatFormat`` / ``ChatContext``: fixed-base delta rendering, masks (algorithms.md §1.1)
* ``engine``     — ``SamplingParams``, ``Generation``, the ``RolloutEngine`` protocol
* ``hf``, ``vllm``, ``expert`` — the engines; ``engines`` picks one from ``rollout.engine``
* ``runner``     — ``run_rollout(engine, envs, sampling, RolloutSettings)`` -> ``RolloutResult``; ``Rollout`` (train/val
  pools and the settings from a ``RunConfig``)
"""

from ragen.contract.trajectory import Trajectory, TurnRecord
from ragen.rollout.context import ChatContext, ChatFormat, turn_end
from ragen.rollout.engine import Generation, RolloutEngine, SamplingParams
from ragen.rollout.groups import EnvGroups, EnvSlot, GroupSpec, train_seed, val_seed
from ragen.rollout.hf import HFEngine
from ragen.rollout.runner import Rollout, RolloutResult, RolloutSettings, rollout_metrics, run_rollout

__all__ = [
    "ChatContext",
    "ChatFormat",
    "EnvGroups",
    "EnvSlot",
    "Generation",
    "GroupSpec",
    "HFEngine",
    "Rollout",
    "RolloutEngine",
    "RolloutResult",
    "RolloutSettings",
    "SamplingParams",
    "Trajectory",
    "TurnRecord",
    "rollout_metrics",
    "run_rollout",
    "train_seed",
    "turn_end",
    "val_seed",
]
