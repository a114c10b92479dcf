"""Seeded level generator: random-walk topology, reverse play over pulls, RAGEN's player displacement.

Everything draws from one ``numpy.random.Generator``; a failed seed moves on to attempt seeds derived with SHA-256
(never Python's salted ``hash()``), so a level is a pure function of (config, seed).
"""

from __future__ import annotations

import hashlib

import numpy as np

from ragen_sokoban.solver import BOX, BOX_ON_TARGET, EMPTY, PLAYER, TARGET, WALL, Board, solve

BRUSHES = [
    np.array([[0, 0, 0], [1, 1, 1], [0, 0, 0]]),  # horizontal bar
    np.array([[0, 1, 0], [0, 1, 0], [0, 1, 0]]),  # vertical bar
    np.array([[0, 0, 0], [1, 1, 0], [0, 1, 0]]),  # L-corners
    np.array([[0, 0, 0], [1, 1, 0], [1, 1, 0]]),
    np.array([[0, 0, 0], [0, 1, 1], [0, 1, 0]]),
]
DIRECTIONS = [(1, 0), (0, 1), (-1, 0), (0, -1)]
TOPOLOGY_TRIES = 4
MAX_ATTEMPTS = 1000
REVERSE_STATE_LIMIT = 300_000


class GenerationError(RuntimeError):
    pass


def attempt_seed(seed: int, attempt: int) -> int:
    if attempt == 0:
        return seed
    digest = hashlib.sha256(f"sokoban:{seed}:{attempt}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def topology(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """All walls, then a random walk of int(1.7 * (rows + cols)) steps carving floor with 3x3 brushes."""
    level = np.zeros((rows, cols), dtype=np.int8)
    direction = DIRECTIONS[rng.integers(4)]
    pos = np.array([rng.integers(1, rows - 1), rng.integers(1, cols - 1)])
    for _ in range(int(1.7 * (rows + cols))):
        if rng.random() < 0.35:
            direction = DIRECTIONS[rng.integers(4)]
        pos = pos + direction
        pos[0] = min(max(pos[0], 1), rows - 2)
        pos[1] = min(max(pos[1], 1), cols - 2)
        brush = BRUSHES[rng.integers(len(BRUSHES))]
        level[pos[0] - 1 : pos[0] + 2, pos[1] - 1 : pos[1] + 2] |= brush.astype(np.int8)
    level[[0, -1], :] = 0
    level[:, [0, -1]] = 0
    return level  # 1 = floor, 0 = wall


def reverse_play(board: Board, targets: list[int], player: int, search_depth: int):
    """DFS over pulls from the solved state; best state by box_swaps x total box displacement (first on ties)."""
    start_boxes = tuple(targets)  # box i starts on target i
    best = (0, start_boxes, player)
    seen = set()
    stack = [(start_boxes, player, -1, 0, 0)]  # boxes, player, last pulled box index, swaps, depth
    while stack and len(seen) < REVERSE_STATE_LIMIT:
        boxes, pl, last, swaps, depth = stack.pop()
        key = (boxes, pl)
        if key in seen:
            continue
        seen.add(key)
        disp = sum(_manhattan(board, b, t) for b, t in zip(boxes, targets, strict=True))
        score = swaps * disp
        if score > best[0]:
            best = (score, boxes, pl)
        if depth >= search_depth:
            continue
        occupied = set(boxes)
        for name, nxt in board.neighbours[pl]:
            if nxt in occupied:
                continue
            stack.append((boxes, nxt, last, swaps, depth + 1))  # walk
            behind = pl - board.step[name]
            if behind in occupied:  # pull the box behind the player into the player's old cell
                i = boxes.index(behind)
                moved = boxes[:i] + (pl,) + boxes[i + 1 :]
                stack.append((moved, nxt, i, swaps + (i != last), depth + 1))
    return best


def _manhattan(board: Board, a: int, b: int) -> int:
    (ar, ac), (br, bc) = divmod(a, board.cols), divmod(b, board.cols)
    return abs(ar - br) + abs(ac - bc)


def displace_player(rng: np.random.Generator, board: Board, boxes: set[int], player: int, displacement: int) -> int:
    """RAGEN: maybe walk the player up to 3 steps to unvisited free cells (walking keeps the level solvable)."""
    if rng.random() >= (0.8 if displacement == 1 else 0.5):
        return player
    visited = {player}
    for step in range(3):
        options = [nxt for _, nxt in board.neighbours[player] if nxt not in boxes and nxt not in visited]
        if not options:
            break
        player = options[rng.integers(len(options))]
        visited.add(player)
        if step < 2 and rng.random() >= 0.5:
            break
    return player


def generate(seed: int, rows: int, cols: int, num_boxes: int, search_depth: int, min_pushes: int = 1,
             max_moves: int | None = None, player_displacement: bool = True):
    """A solvable level: (room codes as a list of lists, optimal pushes, solution moves)."""
    for attempt in range(MAX_ATTEMPTS):
        rng = np.random.default_rng(attempt_seed(seed, attempt))
        for _ in range(TOPOLOGY_TRIES):
            level = _try(rng, rows, cols, num_boxes, search_depth, min_pushes, max_moves, player_displacement)
            if level is not None:
                return level
    raise GenerationError(f"no {rows}x{cols} level with {num_boxes} box(es) after {MAX_ATTEMPTS} attempts for seed {seed}")


def _try(rng, rows, cols, num_boxes, search_depth, min_pushes, max_moves, player_displacement):
    floor = topology(rng, rows, cols)
    cells = [int(r * cols + c) for r, c in zip(*np.nonzero(floor), strict=True)]
    if len(cells) < num_boxes + 2:
        return None
    picks = rng.choice(len(cells), size=num_boxes + 1, replace=False)
    targets, player = [cells[i] for i in picks[:-1]], cells[picks[-1]]
    room = [[EMPTY if floor[r, c] else WALL for c in range(cols)] for r in range(rows)]
    for t in targets:
        room[t // cols][t % cols] = TARGET
    board = Board(room)
    score, boxes, player = reverse_play(board, targets, player, search_depth)
    if score == 0:
        return None
    disp = sum(_manhattan(board, b, t) for b, t in zip(boxes, targets, strict=True))
    if player_displacement:
        player = displace_player(rng, board, set(boxes), player, disp)
    solution = solve(board, player, frozenset(boxes))
    if solution is None or solution[0] < min_pushes or (max_moves is not None and len(solution[1]) > max_moves):
        return None
    for b in boxes:
        room[b // cols][b % cols] = BOX_ON_TARGET if b in board.targets else BOX
    r, c = divmod(player, cols)
    room[r][c] = PLAYER if room[r][c] == EMPTY else 6
    return room, solution[0], solution[1]
