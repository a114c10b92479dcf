"""The ragen hook of ragen-searchqa (entry point ``ragen: searchqa = ragen_searchqa.plugin``): its variants."""

from ragen import hookimpl, register_variants
from ragen_searchqa.env import SearchQAEnv

__all__ = ["VARIANTS", "register_envs"]

#: RAGEN's budget: 5 turns x 1 action, 10 actions per episode, 300 tokens
BUDGET = {"max_turns": 5, "max_actions_per_turn": 1, "max_actions_per_episode": 10, "max_tokens": 300}

#: variant -> (config defaults, description)
VARIANTS: dict[str, tuple[dict, str]] = {
    "searchqa": ({**BUDGET, "source": "synthetic"}, "Two-hop questions over a procedural knowledge base (offline)"),
    "searchqa-hotpot": (
        {**BUDGET, "source": "hotpot"},
        "HotpotQA questions over their context paragraphs, from a HotpotQA-format JSON file (set hotpot_file)",
    ),
    "searchqa-hf": (
        # 20,000 questions give ~200,000 paragraphs: the server needs longer than 30 s to index them
        {**BUDGET, "source": "hf", "server_start_timeout": 600.0},
        "HF hotpot_qa (distractor), first 20,000 train questions (RAGEN); needs the network or the HF cache",
    ),
}


@hookimpl
def register_envs(register):
    register_variants(register, SearchQAEnv, VARIANTS)
