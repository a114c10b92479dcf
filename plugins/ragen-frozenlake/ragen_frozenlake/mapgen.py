"""The FrozenLake map generator (RAGEN's): random N x N lakes with a start connected to a distinct goal.

A map is drawn from one ``numpy.random.Generator(PCG64(seed))`` (the generator ``gymnasium.utils.seeding`` and
RAGEN use): every cell is frozen with probability ``p``, else a hole; then the start and the goal are two uniform
cells; the draw is kept when they differ and the goal is 4-connected to the start through non-hole cells, otherwise
the whole draw (board, start, goal) is repeated from the same generator.
"""

from __future__ import annotations

import attrs
import numpy as np

FROZEN, HOLE, START, GOAL = "F", "H", "S", "G"
#: row/col deltas of Left, Down, Right, Up (gymnasium's action order 0..3)
MOVES: tuple[tuple[int, int], ...] = ((0, -1), (1, 0), (0, 1), (-1, 0))


@attrs.frozen
class LakeMap:
    """A generated lake: ``desc`` rows of ``F``/``H``/``S``/``G`` (gymnasium's ``desc``), start and goal cells."""

    desc: tuple[str, ...]
    start: tuple[int, int]
    goal: tuple[int, int]

    @property
    def size(self) -> int:
        return len(self.desc)

    @property
    def holes(self) -> list[tuple[int, int]]:
        return [(r, c) for r, row in enumerate(self.desc) for c, ch in enumerate(row) if ch == HOLE]


def connected(board: list[list[str]] | tuple[str, ...], start: tuple[int, int], goal: tuple[int, int]) -> bool:
    """Whether ``goal`` is reachable from ``start`` by 4-neighbour moves through non-hole cells (DFS)."""
    n = len(board)
    stack, seen = [start], {start}
    while stack:
        r, c = stack.pop()
        if (r, c) == goal:
            return True
        for dr, dc in MOVES:
            nr, nc = r + dr, c + dc
            if 0 <= nr < n and 0 <= nc < n and (nr, nc) not in seen and board[nr][nc] != HOLE:
                seen.add((nr, nc))
                stack.append((nr, nc))
    return False


def generate_map(size: int, p: float, seed: int) -> LakeMap:
    """The RAGEN map of ``seed``: frozen with probability ``p``, start and goal distinct and connected."""
    if size < 2:
        raise ValueError(f"size: must be >= 2, got {size}")
    if not 0.0 < p <= 1.0:
        raise ValueError(f"p: must be in (0, 1], got {p}")
    rng = np.random.Generator(np.random.PCG64(seed))
    while True:
        board = rng.choice([FROZEN, HOLE], (size, size), p=[p, 1.0 - p]).tolist()
        start = tuple(int(v) for v in rng.integers(size, size=2))
        goal = tuple(int(v) for v in rng.integers(size, size=2))
        if start == goal:
            continue
        board[start[0]][start[1]], board[goal[0]][goal[1]] = START, GOAL
        if connected(board, start, goal):
            return LakeMap(tuple("".join(row) for row in board), start, goal)
