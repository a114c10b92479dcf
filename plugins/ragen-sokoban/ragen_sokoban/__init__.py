"""ragen-sokoban: the Sokoban environment and its variants (environments.md §2), registered with ragen."""

from ragen import hookimpl, register_variants
from ragen_sokoban.config import SokobanConfig
from ragen_sokoban.env import SokobanEnv

__all__ = ["SokobanConfig", "SokobanEnv", "VARIANTS", "register_envs"]

#: RAGEN's budget: 5 turns x 2 actions, 10 actions per episode
BUDGET = {"max_turns": 5, "max_actions_per_turn": 2, "max_actions_per_episode": 10}
VOCAB = ("W", ".", "G", "C", "B", "A", "@")

#: variant -> (config defaults, description)
VARIANTS: dict[str, tuple[dict, str]] = {
    "sokoban": ({**BUDGET, "max_tokens": 120}, "6x6, 1 box, grid_coord (RAGEN CoordSokoban)"),
    "sokoban-grid": (
        {**BUDGET, "max_tokens": 100, "observation_format": "grid"},
        "6x6, 1 box, grid (RAGEN SimpleSokoban)",
    ),
    "sokoban-large": (
        {**BUDGET, "max_tokens": 120, "dim_room": (8, 8), "num_boxes": 2, "search_depth": 10},
        "8x8, 2 boxes, search depth 10, grid_coord (RAGEN LargerSokoban)",
    ),
    "sokoban-vocab": (
        {**BUDGET, "max_tokens": 100, "observation_format": "grid", "search_depth": 30, "grid_vocab": VOCAB},
        "6x6, 1 box, grid with symbols W . G C B A @ and a matching legend (RAGEN SokobanDifferentGridVocab)",
    ),
    "sokoban-boxoban": (
        {
            "max_turns": 20,
            "max_actions_per_turn": 5,
            "max_actions_per_episode": 100,
            "max_tokens": 200,
            "max_steps": 200,
            "dim_room": (10, 10),
            "num_boxes": 4,
            "observation_format": "grid",
            "level_source": "boxoban",
        },
        "Boxoban 10x10, 4 boxes, levels from files (set boxoban_files), 20 x 5 actions",
    ),
}


@hookimpl
def register_envs(register):
    register_variants(register, SokobanEnv, VARIANTS)
