"""Boxoban level files: `; N` then ten rows of ten characters (# wall, @ player, $ box, . goal, * box on goal,
+ player on goal, space floor). Index = seed mod total over the files sorted by name, file order."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from ragen import ConfigError

CHARS = {"#": 0, " ": 1, ".": 2, "*": 3, "$": 4, "@": 5, "+": 6}


def level_files(paths: tuple[str, ...]) -> tuple[Path, ...]:
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files += sorted(p.glob("*.txt"))
        elif p.is_file():
            files.append(p)
        else:
            raise ConfigError(f"boxoban_files: {str(p)!r} does not exist")
    if not files:
        raise ConfigError("boxoban_files: no level files given; set it to Boxoban .txt files or a folder of them")
    return tuple(sorted(files, key=lambda f: f.name))


@lru_cache(maxsize=8)
def load_levels(paths: tuple[str, ...]) -> tuple[tuple[tuple[int, ...], ...], ...]:
    levels = []
    for f in level_files(paths):
        rows: list[str] = []
        for line in f.read_text().splitlines() + [";"]:
            if line.startswith(";"):
                if rows:
                    levels.append(_parse(rows, f))
                rows = []
            elif line.strip() or rows:
                rows.append(line)
    return tuple(levels)


def _parse(rows: list[str], f: Path) -> tuple[tuple[int, ...], ...]:
    rows = [r for r in rows if r.strip()]
    width = max(len(r) for r in rows)
    try:
        return tuple(tuple(CHARS[ch] for ch in r.ljust(width)) for r in rows)
    except KeyError as exc:
        raise ConfigError(f"boxoban_files: {f} has an unknown character {exc.args[0]!r}") from None
