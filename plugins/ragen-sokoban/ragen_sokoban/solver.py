"""Push-level BFS solver (environments.md §2): the fewest pushes, with shortest walks between them.

Cells are ints ``r * cols + c``; adjacency is precomputed per floor cell, so no move ever wraps around a row.
A search state is ``(frozenset of box cells, canonical player cell)`` where the canonical cell is the smallest cell
of the region the player can walk to without pushing: states that differ only by walking are one state.
"""

from __future__ import annotations

from collections import deque

WALL, EMPTY, TARGET, BOX_ON_TARGET, BOX, PLAYER, PLAYER_ON_TARGET = range(7)
MOVES = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}
OPPOSITE = {"Up": "Down", "Down": "Up", "Left": "Right", "Right": "Left"}
STATE_LIMIT = 1_000_000


class Board:
    """The static layout of a level: floor, targets, adjacency and corner dead cells."""

    def __init__(self, room) -> None:
        self.rows, self.cols = len(room), len(room[0])
        cols = self.cols
        cells = [(r * cols + c, room[r][c]) for r in range(self.rows) for c in range(cols)]
        self.floor = frozenset(cell for cell, x in cells if x != WALL)
        self.targets = frozenset(cell for cell, x in cells if x in (TARGET, BOX_ON_TARGET, PLAYER_ON_TARGET))
        self.step = {name: dr * cols + dc for name, (dr, dc) in MOVES.items()}
        #: floor cell -> {move name: neighbouring floor cell}
        self.adj: dict[int, dict[str, int]] = {}
        for cell in self.floor:
            r, c = divmod(cell, cols)
            self.adj[cell] = {
                name: (r + dr) * cols + c + dc
                for name, (dr, dc) in MOVES.items()
                if 0 <= r + dr < self.rows and 0 <= c + dc < cols and (r + dr) * cols + c + dc in self.floor
            }
        #: floor cell -> [(move name, neighbouring floor cell)]
        self.neighbours = {cell: list(moves.items()) for cell, moves in self.adj.items()}
        self._near = {cell: tuple(moves.values()) for cell, moves in self.adj.items()}
        #: non-target cells blocked vertically and horizontally: a box pushed there can never move again
        self.dead = frozenset(cell for cell, moves in self.adj.items() if cell not in self.targets and _corner(moves))

    def move(self, cell: int, name: str) -> int | None:
        """The floor cell one ``name`` move from ``cell``, or None (wall or edge)."""
        return self.adj[cell].get(name)

    def region(self, player: int, boxes) -> set[int]:
        """Cells the player can walk to without pushing."""
        seen = {player}
        stack = [player]
        near = self._near
        while stack:
            for nxt in near[stack.pop()]:
                if nxt not in seen and nxt not in boxes:
                    seen.add(nxt)
                    stack.append(nxt)
        return seen

    def walk(self, start: int, goal: int, boxes) -> list[str]:
        """A shortest walk (move names) from ``start`` to ``goal`` around ``boxes``; [] if start == goal."""
        if start == goal:
            return []
        parent: dict[int, tuple[int, str] | None] = {start: None}
        queue = deque([start])
        while queue:
            cell = queue.popleft()
            for name, nxt in self.neighbours[cell]:
                if nxt in parent or nxt in boxes:
                    continue
                parent[nxt] = (cell, name)
                if nxt == goal:
                    path = []
                    while parent[nxt] is not None:
                        nxt, name = parent[nxt]  # type: ignore[misc]
                        path.append(name)
                    return path[::-1]
                queue.append(nxt)
        raise ValueError(f"cell {goal} is not reachable from {start}")


def _corner(moves: dict[str, int]) -> bool:
    return ("Up" not in moves or "Down" not in moves) and ("Left" not in moves or "Right" not in moves)


def solve(board: Board, player: int, boxes: frozenset, limit: int = STATE_LIMIT) -> tuple[int, list[str]] | None:
    """``(optimal pushes, moves)`` or None when unsolvable or more than ``limit`` states were needed.

    BFS over pushes (every edge is one push), so the first solved state found has the fewest pushes; the walks
    between pushes are shortest walks. Boxes and directions are tried in a fixed order: the plan is deterministic.
    """
    boxes = frozenset(boxes)
    targets, dead, adj = board.targets, board.dead, board.adj
    if boxes <= targets:
        return 0, []
    if boxes & dead:
        return None
    region = board.region(player, boxes)
    start = (boxes, min(region))
    #: state -> (parent state, player cell before the push, box pushed, move name)
    parents: dict[tuple, tuple | None] = {start: None}
    queue = deque([(start, player, region)])
    while queue:
        key, pl, region = queue.popleft()
        bx = key[0]
        for box in sorted(bx):
            moves = adj[box]
            for name, dest in moves.items():
                stand = moves.get(OPPOSITE[name])
                if stand is None or stand not in region or dest in bx or dest in dead:
                    continue
                nbx = (bx - {box}) | {dest}
                nregion = board.region(box, nbx)
                nkey = (nbx, min(nregion))
                if nkey in parents:
                    continue
                parents[nkey] = (key, pl, box, name)
                if nbx <= targets:
                    return _unwind(board, parents, nkey)
                if len(parents) >= limit:
                    return None
                queue.append((nkey, box, nregion))
    return None


def _unwind(board: Board, parents: dict, key: tuple) -> tuple[int, list[str]]:
    pushes = []
    while parents[key] is not None:
        prev, pl, box, name = parents[key]
        pushes.append((prev[0], pl, box, name))
        key = prev
    moves: list[str] = []
    for boxes, pl, box, name in reversed(pushes):
        moves += board.walk(pl, board.adj[box][OPPOSITE[name]], boxes)
        moves.append(name)
    return len(pushes), moves
