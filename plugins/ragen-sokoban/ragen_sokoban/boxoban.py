"""Boxoban level files (environments.md §2): each level is a `; <n>` line and ten rows of ten characters
(``#`` wall, ``@`` player, ``$`` box, ``.`` goal, space floor; ``*`` box on goal and ``+`` player on goal accepted).
The configured files are sorted by name and read in file order; level index = seed mod the total."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import attrs

from ragen import ConfigError
from ragen_sokoban.solver import BOX, BOX_ON_TARGET, EMPTY, PLAYER, PLAYER_ON_TARGET, TARGET, WALL

CHARS = {"#": WALL, " ": EMPTY, ".": TARGET, "*": BOX_ON_TARGET, "$": BOX, "@": PLAYER, "+": PLAYER_ON_TARGET}


@attrs.frozen
class BoxobanLevel:
    name: str  #: "<file stem>/<n>", n from the `; <n>` header
    room: tuple[tuple[int, ...], ...]  #: codes 0..6, like generated levels


def level_files(paths: tuple[str, ...]) -> tuple[Path, ...]:
    """The .txt files named by ``paths`` (files, or folders whose *.txt files are taken), sorted by file name."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files += p.glob("*.txt")
        elif p.is_file():
            files.append(p)
        else:
            raise ConfigError(f"boxoban_files: {str(p)!r} does not exist")
    if not files:
        raise ConfigError(
            "boxoban_files: no Boxoban level files configured; set boxoban_files to .txt level files or a folder of "
            "them (e.g. -o boxoban_files=path/to/boxoban-levels/medium/train)"
        )
    return tuple(sorted(set(files), key=lambda f: (f.name, str(f))))


@lru_cache(maxsize=8)
def load_levels(paths: tuple[str, ...]) -> tuple[BoxobanLevel, ...]:
    """Every level of the configured files, in order (cached per process: files are read once)."""
    levels: list[BoxobanLevel] = []
    for f in level_files(paths):
        header, rows = None, []
        for lineno, line in enumerate(f.read_text().splitlines() + [";"], 1):
            if line.startswith(";"):
                if rows:
                    levels.append(_parse(f, header, rows))
                header, rows = line[1:].strip() or str(len(levels)), []
            elif line.strip():
                if header is None:
                    raise ConfigError(f"boxoban_files: {f}:{lineno}: level rows before a '; <n>' header")
                rows.append(line)
    if not levels:
        raise ConfigError(f"boxoban_files: no levels in {', '.join(map(str, level_files(paths)))}")
    return tuple(levels)


def _parse(f: Path, header: str, rows: list[str]) -> BoxobanLevel:
    width = max(len(r) for r in rows)
    try:
        room = tuple(tuple(CHARS[ch] for ch in r.ljust(width)) for r in rows)
    except KeyError as exc:
        raise ConfigError(f"boxoban_files: {f}, level {header}: unknown character {exc.args[0]!r}") from None
    flat = [x for row in room for x in row]
    players = sum(x in (PLAYER, PLAYER_ON_TARGET) for x in flat)
    boxes = sum(x in (BOX, BOX_ON_TARGET) for x in flat)
    goals = sum(x in (TARGET, BOX_ON_TARGET, PLAYER_ON_TARGET) for x in flat)
    if players != 1 or boxes == 0 or boxes != goals:
        raise ConfigError(f"boxoban_files: {f}, level {header}: {players} players, {boxes} boxes, {goals} goals")
    return BoxobanLevel(f"{f.stem}/{header}", room)
