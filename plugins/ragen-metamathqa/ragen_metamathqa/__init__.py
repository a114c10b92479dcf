"""ragen-metamathqa: math questions with several attempts (RAGEN MetamathQA), registered through ragen's env hook."""

from ragen import hookimpl, register_variants
from ragen_metamathqa.env import MetaMathQAConfig, MetaMathQAEnv

__all__ = ["MetaMathQAConfig", "MetaMathQAEnv", "VARIANTS", "register_envs"]

_RETRIES = {
    "max_attempts": 3,
    "max_turns": 3,
    "max_actions_per_turn": 1,
    "max_actions_per_episode": 3,
    "max_tokens": 100,
}

#: variant name -> (config defaults, one-line description)
VARIANTS = {
    "metamathqa": (
        {**_RETRIES, "source": "procedural"},
        "Math word problems from the built-in generator (offline), 3 attempts worth 1, 0.5, 0.25",
    ),
    "metamathqa-gsm8k": (
        {**_RETRIES, "source": "gsm8k"},
        "GSM8K questions from path=FOLDER (train.jsonl, test.jsonl), 3 attempts",
    ),
    "metamathqa-hf": (
        {**_RETRIES, "source": "hf", "question_field": "query", "answer_field": "response", "max_tokens": 200},
        "meta-math/MetaMathQA from the Hugging Face Hub (needs network or a cached copy), 3 attempts",
    ),
    "metamathqa-single": (
        {"source": "procedural", "max_attempts": 1, "max_turns": 1, "max_actions_per_turn": 1,
         "max_actions_per_episode": 1, "max_tokens": 100},
        "Generated math word problems with a single attempt (RAGEN's budget)",
    ),
}


@hookimpl
def register_envs(register):
    register_variants(register, MetaMathQAEnv, VARIANTS)
