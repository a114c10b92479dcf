"""Sokoban settings (environments.md §2)."""

from __future__ import annotations

import attrs

from ragen import ConfigError, EnvConfig, option

DEFAULT_VOCAB = ("#", "_", "O", "√", "X", "P", "S")
MEANINGS = ("wall", "empty", "target", "box on target", "box", "player", "player on target")
FORMATS = ("grid", "coord", "grid_coord")


def _pair(value) -> tuple[int, int]:
    return tuple(int(v) for v in value)  # type: ignore[return-value]


@attrs.frozen(kw_only=True)
class SokobanConfig(EnvConfig):
    """Room, generator and observation settings; the budget fields come from EnvConfig."""

    dim_room: tuple[int, int] = option((6, 6), "Room rows x cols, border walls included (RAGEN 6x6).", converter=_pair)
    num_boxes: int = option(1, "Boxes (and targets) per level (RAGEN's train setting: 1).")
    search_depth: int = option(300, "Depth of the reverse-play search that scrambles the solved level (RAGEN 300).")
    min_pushes: int = option(1, "Reject levels solvable in fewer pushes.")
    max_steps: int = option(100, "Env steps before `truncated` (gym-sokoban 100).")
    observation_format: str = option("grid_coord", "grid, coord or grid_coord (RAGEN CoordSokoban: grid_coord).",
                                     validator=attrs.validators.in_(FORMATS))
    grid_vocab: tuple[str, ...] = option(DEFAULT_VOCAB, "Symbols for wall, empty, target, box on target, box, player, "
                                         "player on target (code order).", converter=tuple)
    coord_walls: bool = option(False, "List interior walls in coordinate observations (RAGEN omits them).")
    player_displacement: bool = option(True, "RAGEN's random player walk after reverse play.")
    reject_over_budget: bool = option(True, "Reject levels whose solution needs more moves than max_actions_per_episode.")
    level_source: str = option("procedural", "procedural (own generator) or boxoban (level files).",
                               validator=attrs.validators.in_(("procedural", "boxoban")))
    boxoban_files: tuple[str, ...] = option((), "Boxoban .txt files or folders (level_source=boxoban).", converter=tuple)

    def __attrs_post_init__(self) -> None:
        if len(self.grid_vocab) != 7 or len(set(self.grid_vocab)) != 7:
            raise ConfigError(f"grid_vocab: expected 7 distinct symbols, got {list(self.grid_vocab)}")
        if min(self.dim_room) < 3:
            raise ConfigError(f"dim_room: each side must be >= 3, got {self.dim_room}")
        if self.num_boxes < 1:
            raise ConfigError(f"num_boxes: must be >= 1, got {self.num_boxes}")
        super().__attrs_post_init__()

    def required_actions(self) -> int:
        return max(1, self.min_pushes)
