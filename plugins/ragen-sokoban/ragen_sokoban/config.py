"""Sokoban settings (environments.md §2); the budget fields come from ``ragen.EnvConfig``."""

from __future__ import annotations

from typing import Any

import attrs

from ragen import ConfigError, EnvConfig, option

#: default symbols in code order: wall, empty, target, box on target, box, player, player on target
DEFAULT_VOCAB = ("#", "_", "O", "√", "X", "P", "S")
MEANINGS = ("wall", "empty", "target", "box on target", "box", "player", "player on target")
FORMATS = ("grid", "coord", "grid_coord")
SOURCES = ("procedural", "boxoban")


def _pair(value: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in value)


def _paths(value: Any) -> tuple[str, ...]:
    """One path (str/PathLike) or a list of them."""
    if value is None:
        return ()
    if isinstance(value, str) or hasattr(value, "__fspath__"):
        return (str(value),)
    return tuple(str(v) for v in value)


@attrs.frozen(kw_only=True)
class SokobanConfig(EnvConfig):
    """Room, generator, observation and level-source settings of the Sokoban env."""

    dim_room: tuple[int, int] = option((6, 6), "Room rows x cols, border walls included (RAGEN: 6x6).", converter=_pair)
    num_boxes: int = option(1, "Boxes (and targets) per generated level (RAGEN's training setting: 1).")
    search_depth: int = option(
        300,
        "RAGEN's reverse-play depth (its ttl): scrambled states are at most search_depth - 2 moves deep (RAGEN: 300).",
    )
    min_pushes: int = option(1, "Reject generated levels whose optimal solution has fewer pushes.")
    max_steps: int = option(100, "Env steps (executed actions) before `truncated` (gym-sokoban: 100).")
    observation_format: str = option(
        "grid_coord", "grid, coord or grid_coord (coordinates, then the grid; RAGEN CoordSokoban).",
        validator=attrs.validators.in_(FORMATS),
    )
    grid_vocab: tuple[str, ...] = option(
        DEFAULT_VOCAB,
        "Grid symbols in code order: wall, empty, target, box on target, box, player, player on target.",
        converter=tuple,
    )
    coord_walls: bool = option(False, "List the interior walls in coordinate observations (RAGEN omits them).")
    player_displacement: bool = option(True, "RAGEN's random walk of the player (up to 3 steps) after reverse play.")
    reject_over_budget: bool = option(
        True,
        "Reject generated levels whose move-optimal solution is longer than the episode budget "
        "(False: RAGEN's levels).",
    )
    allow_box_on_target: bool = option(
        False, "Let reverse play end with a box on a target (RAGEN never does; True gives easier multi-box levels)."
    )
    level_source: str = option(
        "procedural", "procedural (own generator) or boxoban (levels read from boxoban_files).",
        validator=attrs.validators.in_(SOURCES),
    )
    boxoban_files: Any = option(
        (), "Boxoban level files (.txt) or folders of them, for level_source=boxoban; one path or a list.",
        converter=_paths,
    )

    def __attrs_post_init__(self) -> None:
        if len(self.dim_room) != 2 or min(self.dim_room) < 3:
            raise ConfigError(f"dim_room: expected [rows, cols], each >= 3, got {list(self.dim_room)}")
        vocab = self.grid_vocab
        if len(vocab) != 7 or len(set(vocab)) != 7 or any(len(s) != 1 or s.isspace() for s in vocab):
            raise ConfigError(f"grid_vocab: expected 7 distinct one-character symbols, got {list(vocab)}")
        for key in ("num_boxes", "max_steps"):
            if getattr(self, key) < 1:
                raise ConfigError(f"{key}: must be >= 1, got {getattr(self, key)}")
        if self.search_depth < 3:
            raise ConfigError(
                f"search_depth: must be >= 3 (reverse play reaches search_depth - 2 moves), got {self.search_depth}"
            )
        if self.min_pushes < 0:
            raise ConfigError(f"min_pushes: must be >= 0, got {self.min_pushes}")
        if self.level_source == "procedural" and self.num_boxes + 1 > (self.dim_room[0] - 2) * (self.dim_room[1] - 2):
            raise ConfigError(f"num_boxes: {self.num_boxes} boxes and the player do not fit in a {self.dim_room} room")
        super().__attrs_post_init__()

    @property
    def action_budget(self) -> int:
        """Actions an episode can execute: min(max_actions_per_episode, max_turns * max_actions_per_turn)."""
        return min(self.max_actions_per_episode, self.max_turns * self.max_actions_per_turn)

    def required_actions(self) -> int:
        """A solved episode pushes at least ``min_pushes`` times (generated levels) and makes at least one move."""
        return max(1, self.min_pushes) if self.level_source == "procedural" else 1
