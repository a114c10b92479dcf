"""Sokoban solvers (environments.md §2): move-optimal BFS and push-optimal BFS.

Cells are ints ``r * cols + c``; adjacency is precomputed per floor cell, so no move ever wraps around a row.

* ``solve_moves``: the fewest moves (a walk and a push each count one), BFS over (player cell, box bitmask). This is
  the plan the expert follows and the length the generator compares with the episode budget.
* ``solve``: the fewest pushes, with shortest walks between them. A search state is ``(frozenset of box cells,
  canonical player cell)`` where the canonical cell is the smallest cell of the region the player can walk to without
  pushing: states that differ only by walking are one state. It reports push counts (``optimal_pushes``).
"""

from __future__ import annotations

from collections import deque
from functools import lru_cache
from typing import NamedTuple

WALL, EMPTY, TARGET, BOX_ON_TARGET, BOX, PLAYER, PLAYER_ON_TARGET = range(7)
MOVES = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}
OPPOSITE = {"Up": "Down", "Down": "Up", "Left": "Right", "Right": "Left"}
STATE_LIMIT = 1_000_000
#: move-level states the expert searches before it falls back to the push-optimal plan (Boxoban's 4 boxes)
MOVE_STATE_LIMIT = 200_000


class SearchLimit(RuntimeError):
    """The move-level search met its state limit before it found a solution or proved there is none."""


class MoveTables(NamedTuple):
    """What the move-level BFS reads: per cell ``[(move index, next floor cell, the floor cell after it or -1)]``
    (None off the floor), bitmasks of targets and dead corners, the bit width of a player cell in a state key, and
    the room's columns and cell count (for distances)."""

    steps2: list
    target_mask: int
    dead_mask: int
    shift: int
    cols: int
    size: int


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
        names = list(MOVES)
        steps2: list = [None] * (self.rows * cols)
        for cell, moves in self.adj.items():
            steps2[cell] = [(names.index(name), nxt, self.adj[nxt].get(name, -1)) for name, nxt in moves.items()]
        size = self.rows * cols
        self.tables = MoveTables(steps2, _mask(self.targets), _mask(self.dead), size.bit_length(), cols, size)

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


def _mask(cells) -> int:
    out = 0
    for cell in cells:
        out |= 1 << cell
    return out


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


def solve_moves(
    board: Board, player: int, boxes, max_moves: int | None = None, limit: int = STATE_LIMIT
) -> list[str] | None:
    """A shortest move sequence (walks and pushes each count one move) that puts every box on a target; None when
    there is none of at most ``max_moves`` moves (None: any length). Raises ``SearchLimit`` past ``limit`` states."""
    return search_moves(board.tables, player, _mask(boxes), max_moves, limit)


def search_moves(tables: MoveTables, player: int, bm: int, max_moves: int | None = None,
                 limit: int = STATE_LIMIT) -> list[str] | None:
    """``solve_moves`` on a box bitmask: BFS layer by layer over (player cell, box bitmask). Pushes into corner dead
    cells are pruned (such a box never reaches a target, so no solution is lost). Moves are tried in the order Up,
    Down, Left, Right: the plan is deterministic."""
    steps2, tmask, dead, shift, _, _ = tables
    if not bm & ~tmask:
        return []
    if bm & dead:
        return None
    if max_moves is not None and not bm & (bm - 1) and not tmask & (tmask - 1):
        return search_one_box(tables, player, bm.bit_length() - 1, max_moves, limit=limit)
    start = bm << shift | player
    pmask = (1 << shift) - 1
    parent: dict[int, tuple[int, int] | None] = {start: None}
    frontier = [start]
    depth = 0
    while frontier and (max_moves is None or depth < max_moves):
        depth += 1
        nxt_frontier = []
        for key in frontier:
            bm = key >> shift
            for d, n1, n2 in steps2[key & pmask]:
                if bm >> n1 & 1:  # a push: the cell behind the box must be free floor, not a dead corner
                    if n2 < 0 or (bm | dead) >> n2 & 1:
                        continue
                    nbm = bm ^ (1 << n1) | 1 << n2
                    nk = nbm << shift | n1
                    if nk in parent:
                        continue
                    parent[nk] = (key, d)
                    if not nbm & ~tmask:
                        return _unwind_moves(parent, nk)
                else:
                    nk = key ^ (key & pmask) | n1
                    if nk in parent:
                        continue
                    parent[nk] = (key, d)
                nxt_frontier.append(nk)
        if len(parent) > limit:
            raise SearchLimit(f"move-level search stopped at {limit} states")
        frontier = nxt_frontier
    return None


def search_one_box(tables: MoveTables, player: int, box: int, max_moves: int, limit: int = STATE_LIMIT,
                   bound: list[int] | None = None) -> list[str] | None:
    """``search_moves`` for one box, one target and a move budget: the same BFS (same order, same plan) that skips
    states which cannot finish in time. A state needs at least ``bound[box]`` pushes plus ``d(player, box) - 1``
    walks (manhattan ``d``; ``bound`` defaults to the box's manhattan distance to the target, and any per-cell lower
    bound on the pushes that changes by at most 1 per push will do, such as the generator's pull distances). That
    bound changes by at most 1 per move, so a skipped state's successors are skipped too and every state kept is
    first reached from the same parent as in the full BFS."""
    steps2, tmask, dead, shift, cols, size = tables
    dist = _manhattan(cols, size)
    target = tmask.bit_length() - 1
    to_target = dist[target] if bound is None else bound
    pmask = (1 << shift) - 1
    start = box << shift | player
    parent: dict[int, tuple[int, int] | None] = {start: None}
    frontier = [start]
    for depth in range(1, max_moves + 1):
        left = max_moves - depth  # moves still allowed after this one
        nxt_frontier = []
        for key in frontier:
            box, pl = key >> shift, key & pmask
            walk_bound = to_target[box] - 1
            near_box = dist[box]
            for d, n1, n2 in steps2[pl]:
                if n1 == box:  # a push
                    if n2 < 0 or dead >> n2 & 1 or to_target[n2] > left:
                        continue
                    nk = n2 << shift | n1
                    if nk in parent:
                        continue
                    parent[nk] = (key, d)
                    if n2 == target:
                        return _unwind_moves(parent, nk)
                else:
                    if walk_bound + near_box[n1] > left:
                        continue
                    nk = key ^ pl | n1
                    if nk in parent:
                        continue
                    parent[nk] = (key, d)
                nxt_frontier.append(nk)
        if len(parent) > limit:
            raise SearchLimit(f"move-level search stopped at {limit} states")
        if not nxt_frontier:
            return None
        frontier = nxt_frontier
    return None


@lru_cache(maxsize=64)
def _manhattan(cols: int, size: int) -> list[list[int]]:
    """``d[a][b]``: manhattan distance between cells a and b of a room with ``cols`` columns."""
    rc = [divmod(cell, cols) for cell in range(size)]
    return [[abs(ar - br) + abs(ac - bc) for br, bc in rc] for ar, ac in rc]


def _unwind_moves(parent: dict, key: int) -> list[str]:
    names = list(MOVES)
    moves = []
    while parent[key] is not None:
        key, d = parent[key]
        moves.append(names[d])
    return moves[::-1]


def optimal_first_moves(
    board: Board, player: int, boxes, limit: int = STATE_LIMIT
) -> tuple[int, frozenset[str]] | None:
    """``(fewest moves to solve, every move that starts a shortest solution)`` from a state; None when it is
    unsolvable. Raises ``SearchLimit`` past ``limit`` states. Same BFS as ``search_moves`` (same pruning), but each
    state carries the set of first moves that reach it in the fewest moves, and the layer of the first solved state
    is finished, so ties are all found: an action is optimal iff it starts some shortest solution."""
    found = first_move_masks(board.tables, player, _mask(boxes), limit)
    if found is None:
        return None
    names = list(MOVES)
    depth, mask = found
    return depth, frozenset(names[d] for d in range(len(names)) if mask >> d & 1)


def first_move_masks(tables: MoveTables, player: int, bm: int, limit: int = STATE_LIMIT) -> tuple[int, int] | None:
    """``optimal_first_moves`` on a box bitmask: ``(depth, bitmask of move indices)``."""
    steps2, tmask, dead, shift, _, _ = tables
    if not bm & ~tmask:
        return 0, 0
    if bm & dead:
        return None
    pmask = (1 << shift) - 1
    start = bm << shift | player
    seen = {start}
    layer = {start: 0}  # state -> bitmask of the first moves reaching it in `depth` moves
    depth = 0
    while layer:
        depth += 1
        nxt: dict[int, int] = {}
        solved = 0
        for key, label in layer.items():
            bm = key >> shift
            for d, n1, n2 in steps2[key & pmask]:
                if bm >> n1 & 1:
                    if n2 < 0 or (bm | dead) >> n2 & 1:
                        continue
                    nbm = bm ^ (1 << n1) | 1 << n2
                else:
                    nbm = bm
                nk = nbm << shift | n1
                if nk in seen and nk not in nxt:
                    continue  # reached in fewer moves
                first = label if depth > 1 else 1 << d
                nxt[nk] = nxt.get(nk, 0) | first
                seen.add(nk)
                if not nbm & ~tmask:
                    solved |= nxt[nk]
        if solved:
            return depth, solved
        if len(seen) > limit:
            raise SearchLimit(f"move-level search stopped at {limit} states")
        layer = nxt
    return None
