"""Push-level BFS solver: optimal number of pushes, with the walking moves in between (the expert)."""

from __future__ import annotations

from collections import deque

WALL, EMPTY, TARGET, BOX_ON_TARGET, BOX, PLAYER, PLAYER_ON_TARGET = range(7)
MOVES = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}
STATE_LIMIT = 1_000_000


class Board:
    """Static layout: floor cells, targets and dead cells, cells as ints r * cols + c."""

    def __init__(self, room) -> None:
        self.rows, self.cols = len(room), len(room[0])
        self.floor = {r * self.cols + c for r in range(self.rows) for c in range(self.cols) if room[r][c] != WALL}
        self.targets = frozenset(
            r * self.cols + c for r in range(self.rows) for c in range(self.cols)
            if room[r][c] in (TARGET, BOX_ON_TARGET, PLAYER_ON_TARGET)
        )
        self.step = {name: dr * self.cols + dc for name, (dr, dc) in MOVES.items()}
        self.neighbours = {cell: [(name, cell + d) for name, d in self.step.items() if self._inside(cell, name)] for cell in self.floor}
        self.dead = {cell for cell in self.floor if cell not in self.targets and self._corner(cell)}

    def _inside(self, cell: int, name: str) -> bool:
        r, c = divmod(cell, self.cols)
        dr, dc = MOVES[name]
        rr, cc = r + dr, c + dc
        return 0 <= rr < self.rows and 0 <= cc < self.cols and rr * self.cols + cc in self.floor

    def _corner(self, cell: int) -> bool:
        blocked = {name for name in MOVES if not self._inside(cell, name)}
        return bool(blocked & {"Up", "Down"}) and bool(blocked & {"Left", "Right"})

    def reach(self, player: int, boxes: frozenset) -> dict[int, tuple[int, str] | None]:
        """Cells the player can walk to without pushing: cell -> (previous cell, move) for path reconstruction."""
        seen: dict[int, tuple[int, str] | None] = {player: None}
        queue = deque([player])
        while queue:
            cell = queue.popleft()
            for name, nxt in self.neighbours[cell]:
                if nxt not in seen and nxt not in boxes:
                    seen[nxt] = (cell, name)
                    queue.append(nxt)
        return seen


def walk(seen: dict, goal: int) -> list[str]:
    path = []
    while seen[goal] is not None:
        prev, name = seen[goal]
        path.append(name)
        goal = prev
    return path[::-1]


def solve(board: Board, player: int, boxes: frozenset, limit: int = STATE_LIMIT) -> tuple[int, list[str]] | None:
    """(optimal pushes, move sequence) or None if unsolvable within ``limit`` states."""
    if boxes <= board.targets:
        return 0, []
    start_reach = board.reach(player, boxes)
    start = (boxes, min(start_reach))
    parents: dict = {start: None}
    queue = deque([(boxes, player, start_reach)])
    while queue:
        bx, pl, reach = queue.popleft()
        key = (bx, min(reach))
        for box in sorted(bx):  # deterministic tie-breaking: the generator and the expert find the same plan
            for name, d in board.step.items():
                stand, dest = box - d, box + d
                if stand not in reach or dest not in board.floor or dest in bx or dest in board.dead:
                    continue
                if not board._inside(box, name):
                    continue
                nbx = (bx - {box}) | {dest}
                nreach = board.reach(box, nbx)
                nkey = (nbx, min(nreach))
                if nkey in parents:
                    continue
                parents[nkey] = (key, pl, stand, name, box)
                if nbx <= board.targets:
                    return _unwind(board, parents, nkey)
                if len(parents) > limit:
                    return None
                queue.append((nbx, box, nreach))
    return None


def _unwind(board: Board, parents: dict, key) -> tuple[int, list[str]]:
    pushes = []
    while parents[key] is not None:
        prev, pl, stand, name, box = parents[key]
        pushes.append((prev[0], pl, stand, name))
        key = prev
    moves: list[str] = []
    for boxes, pl, stand, name in reversed(pushes):
        moves += walk(board.reach(pl, boxes), stand) + [name]
    return len(pushes), moves
