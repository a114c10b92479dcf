"""ragen-lean: theorem proving (RAGEN's Lean env) over a prover backend, Coq by default, registered through ragen's
hook."""

from ragen import hookimpl, register_variants
from ragen_lean.env import LeanConfig, LeanEnv

__all__ = ["LeanConfig", "LeanEnv", "VARIANTS", "register_envs"]

#: variant name -> (config defaults, one-line description); spec 11's table
VARIANTS = {
    "lean": (
        {"backend": "coq", "problems": "minif2f", "data_path": "../shared/data/minif2f-rocq",
         "max_turns": 15, "max_actions_per_turn": 4, "max_actions_per_episode": 30, "response_length": 512},
        "Coq prover on miniF2F-rocq (data_path; valid/ = train, test/ = val), 15 x 4 tactics, 30 per episode",
    ),
    "lean-easy": (
        {"backend": "coq", "problems": "curriculum", "max_turns": 8, "max_actions_per_turn": 4,
         "max_actions_per_episode": 30},
        "Coq prover on the built-in curriculum of easy lemmas with known proofs (expert), 8 x 4 tactics, "
        "30 per episode",
    ),
    "lean4": (
        {"backend": "lean4", "problems": "jsonl", "max_turns": 15, "max_actions_per_turn": 4,
         "max_actions_per_episode": 30},
        "Lean 4 via a REPL (lean_repl_path) or Kimina server (kimina_url) on a JSONL file (data_path), 15 x 4, 30",
    ),
}  # fmt: skip


@hookimpl
def register_envs(register):
    register_variants(register, LeanEnv, VARIANTS)
