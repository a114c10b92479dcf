"""Seeded level generator (environments.md §2): random-walk topology, reverse play over pulls, RAGEN's player
displacement (RAGEN's rule: no box starts on a target), BFS verification against the move budget.

Everything draws from one ``numpy.random.Generator``; when a seed's 4 topology tries fail, the next attempt seed is
derived with SHA-256 (never Python's salted ``hash()``), so a level is a pure function of its arguments.
"""

from __future__ import annotations

import hashlib

import attrs
import numpy as np

from ragen_sokoban.solver import (
    BOX,
    BOX_ON_TARGET,
    EMPTY,
    OPPOSITE,
    PLAYER,
    PLAYER_ON_TARGET,
    TARGET,
    WALL,
    Board,
    SearchLimit,
    solve,
    solve_moves,
)

#: 3x3 brushes carving floor (gym-sokoban's masks): horizontal bar, vertical bar and three corner shapes
BRUSHES = tuple(
    np.array(m, dtype=bool)
    for m in (
        [[0, 0, 0], [1, 1, 1], [0, 0, 0]],
        [[0, 1, 0], [0, 1, 0], [0, 1, 0]],
        [[0, 0, 0], [1, 1, 0], [0, 1, 0]],
        [[0, 0, 0], [1, 1, 0], [1, 1, 0]],
        [[0, 0, 0], [0, 1, 1], [0, 1, 0]],
    )
)
DIRECTIONS = ((1, 0), (0, 1), (-1, 0), (0, -1))
P_CHANGE_DIRECTION = 0.35
TOPOLOGY_TRIES = 4
MAX_ATTEMPTS = 1000
REVERSE_STATE_LIMIT = 300_000


class GenerationError(RuntimeError):
    """No acceptable level within ``MAX_ATTEMPTS`` attempt seeds (settings that admit almost no level)."""


@attrs.frozen
class Level:
    room: tuple[tuple[int, ...], ...]  #: codes 0..6 (wall, empty, target, box on target, box, player, player on target)
    pushes: int  #: optimal number of pushes (push-optimal solver)
    moves: tuple[str, ...]  #: a move-optimal plan (walks and pushes each count one move)
    attempt: int  #: attempt seed index that produced the level (0 = the seed itself)


def attempt_seed(seed: int, attempt: int) -> int:
    """Attempt 0 is the seed; later ones are the first 8 bytes of SHA-256("sokoban:{seed}:{attempt}")."""
    if attempt == 0:
        return seed
    return int.from_bytes(hashlib.sha256(f"sokoban:{seed}:{attempt}".encode()).digest()[:8], "big")


def topology(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """All walls, then a random walk of int(1.7 * (rows + cols)) steps carving floor with random 3x3 brushes."""
    floor = np.zeros((rows, cols), dtype=bool)
    direction = DIRECTIONS[rng.integers(4)]
    r, c = int(rng.integers(1, rows - 1)), int(rng.integers(1, cols - 1))
    for _ in range(int(1.7 * (rows + cols))):
        if rng.random() < P_CHANGE_DIRECTION:
            direction = DIRECTIONS[rng.integers(4)]
        r = min(max(r + direction[0], 1), rows - 2)
        c = min(max(c + direction[1], 1), cols - 2)
        floor[r - 1 : r + 2, c - 1 : c + 2] |= BRUSHES[rng.integers(len(BRUSHES))]
    floor[[0, -1], :] = False
    floor[:, [0, -1]] = False
    return floor


def reverse_play(board: Board, targets: tuple[int, ...], player: int, search_depth: int,
                 allow_box_on_target: bool = False) -> tuple[int, tuple[int, ...], int]:
    """DFS over walks and pulls from the solved state (box i starts on target i), at most ``REVERSE_STATE_LIMIT``
    visited states, states at most ``search_depth - 2`` moves deep: RAGEN's ``ttl`` is spent on the root call and
    stops the call that reaches 0, so its LargerSokoban (depth 10) scores states up to 8 moves deep. Returns the best ``(score, boxes, player)`` by
    ``box_swaps * sum(manhattan(box_i, target_i))`` (first found on ties; score 0 = nothing found). RAGEN scores a
    state 0 while a box stands on a target, so no level starts with one; ``allow_box_on_target`` lifts that rule."""
    cols, adj, on_target = board.cols, board.adj, board.targets.isdisjoint
    target_rc = [divmod(t, cols) for t in targets]

    def displacement(boxes: tuple[int, ...]) -> int:
        total = 0
        for b, (tr, tc) in zip(boxes, target_rc, strict=True):
            br, bc = divmod(b, cols)
            total += abs(br - tr) + abs(bc - tc)
        return total

    best = (0, targets, player)
    seen: set[tuple] = set()
    stack = [(targets, player, -1, 0, 0)]  # boxes, player, index of the last pulled box, swaps, depth
    while stack and len(seen) < REVERSE_STATE_LIMIT:
        boxes, pl, last, swaps, depth = stack.pop()
        key = (boxes, pl)
        if key in seen:
            continue
        seen.add(key)
        if swaps and (allow_box_on_target or on_target(boxes)):
            score = swaps * displacement(boxes)
            if score > best[0]:
                best = (score, boxes, pl)
        if depth >= search_depth - 2:
            continue
        moves = adj[pl]
        for name, nxt in moves.items():
            if nxt in boxes:
                continue
            stack.append((boxes, nxt, last, swaps, depth + 1))  # walk
            behind = moves.get(OPPOSITE[name])
            if behind is not None and behind in boxes:  # pull: the box behind follows into the player's old cell
                i = boxes.index(behind)
                stack.append((boxes[:i] + (pl,) + boxes[i + 1 :], nxt, i, swaps + (i != last), depth + 1))
    return best


def displace_player(rng: np.random.Generator, board: Board, boxes: tuple[int, ...], player: int, displacement: int) -> int:
    """RAGEN: with probability 0.8 (total box displacement 1) or 0.5 (otherwise) walk the player one step to an
    adjacent unvisited free cell, continuing with probability 0.5 per step, at most 3 steps."""
    if rng.random() >= (0.8 if displacement == 1 else 0.5):
        return player
    visited = {player}
    for step in range(3):
        free = [nxt for nxt in board.adj[player].values() if nxt not in boxes and nxt not in visited]
        if not free:
            break
        player = free[rng.integers(len(free))]
        visited.add(player)
        if step == 2 or rng.random() >= 0.5:
            break
    return player


def generate(seed: int, rows: int = 6, cols: int = 6, num_boxes: int = 1, search_depth: int = 300, min_pushes: int = 1,
             max_moves: int | None = None, player_displacement: bool = True, allow_box_on_target: bool = False) -> Level:
    """A BFS-verified level for ``seed``: the first candidate (``candidates``) with at least ``min_pushes`` optimal
    pushes and, unless ``max_moves`` is None, a solution of at most ``max_moves`` moves."""
    for attempt, board, player, boxes in candidates(seed, rows, cols, num_boxes, search_depth, player_displacement,
                                                    allow_box_on_target):
        level = verify(board, player, boxes, min_pushes, max_moves)
        if level is not None:
            return attrs.evolve(level, attempt=attempt)
    raise GenerationError(
        f"no {rows}x{cols} level with {num_boxes} box(es), min_pushes={min_pushes}, max_moves={max_moves} "
        f"after {MAX_ATTEMPTS} attempts for seed {seed}"
    )


def candidates(seed: int, rows: int, cols: int, num_boxes: int, search_depth: int, player_displacement: bool = True,
               allow_box_on_target: bool = False):
    """The reverse-played levels of ``seed`` in generation order, before any check: ``(attempt, board, player,
    boxes)``. Checks draw nothing from the generator, so this order is the same whatever ``generate`` rejects."""
    for attempt in range(MAX_ATTEMPTS):
        rng = np.random.default_rng(attempt_seed(seed, attempt))
        for _ in range(TOPOLOGY_TRIES):
            found = _scramble(rng, rows, cols, num_boxes, search_depth, player_displacement, allow_box_on_target)
            if found is not None:
                yield (attempt, *found)


def verify(board: Board, player: int, boxes: tuple[int, ...], min_pushes: int, max_moves: int | None) -> Level | None:
    """The level if a move-optimal solution within ``max_moves`` exists and the push optimum is >= ``min_pushes``."""
    try:
        moves = solve_moves(board, player, boxes, max_moves)
    except SearchLimit:
        return None
    solution = solve(board, player, frozenset(boxes)) if moves is not None else None
    if solution is None or solution[0] < min_pushes:
        return None
    return Level(room_of(board, player, boxes), solution[0], tuple(moves), 0)


def room_of(board: Board, player: int, boxes) -> tuple[tuple[int, ...], ...]:
    """Codes 0..6 of the level: the board's walls and targets with the boxes and the player placed."""
    cols = board.cols
    room = [[WALL] * cols for _ in range(board.rows)]
    for cell in board.floor:
        room[cell // cols][cell % cols] = TARGET if cell in board.targets else EMPTY
    for b in boxes:
        room[b // cols][b % cols] = BOX_ON_TARGET if b in board.targets else BOX
    r, c = divmod(player, cols)
    room[r][c] = PLAYER_ON_TARGET if room[r][c] == TARGET else PLAYER
    return tuple(map(tuple, room))


def _scramble(rng, rows, cols, num_boxes, search_depth, player_displacement, allow_box_on_target):
    """One topology try: ``(board, player, boxes)`` after reverse play and player displacement, or None (score 0)."""
    floor = topology(rng, rows, cols)
    rr, cc = np.nonzero(floor)
    cells = (rr * cols + cc).tolist()
    if len(cells) < num_boxes + 1:
        return None
    picks = rng.choice(len(cells), size=num_boxes + 1, replace=False).tolist()
    targets, player = tuple(cells[i] for i in picks[:-1]), cells[picks[-1]]
    room = [[EMPTY if floor[r, c] else WALL for c in range(cols)] for r in range(rows)]
    for t in targets:
        room[t // cols][t % cols] = TARGET
    board = Board(room)
    score, boxes, player = reverse_play(board, targets, player, search_depth, allow_box_on_target)
    if score == 0:
        return None
    if player_displacement:
        disp = sum(abs(b // cols - t // cols) + abs(b % cols - t % cols) for b, t in zip(boxes, targets, strict=True))
        player = displace_player(rng, board, boxes, player, disp)
    return board, player, boxes
