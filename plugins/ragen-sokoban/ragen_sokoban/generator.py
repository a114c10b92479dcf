"""Seeded level generator (environments.md §2): random-walk topology, reverse play over pulls, RAGEN's player
displacement (RAGEN's rule: no box starts on a target), BFS verification against the move budget.

Everything draws from one ``numpy.random.Generator`` (PCG64) per attempt seed; when a seed's 4 topology tries fail,
the next attempt seed is derived with SHA-256 (never Python's salted ``hash()``), so a level is a pure function of
its arguments. For speed the draws are replayed in Python from the bit generator's raw stream (``draws.Draws``: the
same numbers as ``Generator.random``/``integers``/``choice``; the random walk writes them out), rooms are bitmasks, a
floor layout's tables are cached and built from per-cell entries of the room shape, and one-box levels with a move
budget (the ``sokoban`` variants) have their own loop: reverse play over int states and a move BFS bounded by the
box's pull distances.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

import attrs

from ragen_sokoban.draws import Draws
from ragen_sokoban.solver import (
    BOX,
    BOX_ON_TARGET,
    EMPTY,
    PLAYER,
    PLAYER_ON_TARGET,
    TARGET,
    WALL,
    Board,
    MoveTables,
    SearchLimit,
    search_moves,
    search_one_box,
    solve,
)

#: 3x3 brushes carving floor (gym-sokoban's masks): horizontal bar, vertical bar and three corner shapes
BRUSHES = (
    ((0, 0, 0), (1, 1, 1), (0, 0, 0)),
    ((0, 1, 0), (0, 1, 0), (0, 1, 0)),
    ((0, 0, 0), (1, 1, 0), (0, 1, 0)),
    ((0, 0, 0), (1, 1, 0), (1, 1, 0)),
    ((0, 0, 0), (0, 1, 1), (0, 1, 0)),
)
DIRECTIONS = ((1, 0), (0, 1), (-1, 0), (0, -1))
P_CHANGE_DIRECTION = 0.35
TOPOLOGY_TRIES = 4
MAX_ATTEMPTS = 1000
REVERSE_STATE_LIMIT = 300_000
UNREACHABLE = 1 << 20  #: pull distance of a cell no pull reaches


class GenerationError(RuntimeError):
    """No acceptable level within ``MAX_ATTEMPTS`` attempt seeds (settings that admit almost no level)."""


@attrs.frozen
class Level:
    room: tuple[tuple[int, ...], ...]  #: codes 0..6 (wall, empty, target, box on target, box, player, player on target)
    moves: tuple[str, ...]  #: a move-optimal plan (walks and pushes each count one move)
    attempt: int  #: attempt seed index that produced the level (0 = the seed itself)

    def optimal_pushes(self) -> int:
        """The fewest pushes that solve the level (push-optimal BFS; computed on demand, generation does not need it
        unless ``min_pushes`` > 1)."""
        board = Board(self.room)
        cells = [(r * board.cols + c, x) for r, row in enumerate(self.room) for c, x in enumerate(row)]
        player = next(cell for cell, x in cells if x in (PLAYER, PLAYER_ON_TARGET))
        solution = solve(board, player, frozenset(cell for cell, x in cells if x in (BOX, BOX_ON_TARGET)))
        assert solution is not None, "a generated level is solvable"
        return solution[0]


@attrs.frozen
class Layout:
    """The static tables of one floor bitmask (cached per room size and floor): floor cells in row-major order,
    per cell its floor neighbours in ``MOVES`` order as ``(next, the cell behind or -1)``, and the move-BFS table."""

    rows: int
    cols: int
    floor: int  #: bitmask of floor cells
    cells: tuple[int, ...]
    near: list  #: cell -> ((next floor cell, floor cell opposite it or -1), ...) in MOVES order; None off the floor
    steps2: list  #: cell -> ((move index, next floor cell, the floor cell after it or -1), ...); None off the floor
    corners: int  #: bitmask of floor cells blocked vertically and horizontally

    def tables(self, targets: tuple[int, ...]) -> MoveTables:
        tmask = 0
        for t in targets:
            tmask |= 1 << t
        size = self.rows * self.cols
        return MoveTables(self.steps2, tmask, self.corners & ~tmask, size.bit_length(), self.cols, size)

    def board(self, targets: tuple[int, ...]) -> Board:
        return Board(room_of(self, targets, (), -1))


@lru_cache(maxsize=16384)
def layout(rows: int, cols: int, floor: int) -> Layout:
    """The tables of a floor bitmask whose floor is interior (border cells are walls). A new floor is met in about
    half of the generator's tries, so a cell's entries are not computed here: they depend only on the floor bits of
    its 4 neighbours and of the 4 cells two steps away, and are looked up in the room shape's ``_cell_entries``."""
    size = rows * cols
    entries = _cell_entries(rows, cols)
    near: list = [None] * size
    steps2: list = [None] * size
    cells = []
    corners = 0
    rest = floor
    while rest:
        low = rest & -rest
        cell = low.bit_length() - 1
        rest ^= low
        window, table = entries[cell]
        entry = table.get(floor & window)
        if entry is None:
            entry = table[floor & window] = _cell_entry(cell, cols, floor)
        near[cell], steps2[cell], corner = entry
        corners |= corner
        cells.append(cell)
    return Layout(rows, cols, floor, tuple(cells), near, steps2, corners)


@lru_cache(maxsize=64)
def _cell_entries(rows: int, cols: int) -> tuple:
    """Per cell of a room shape: ``(window, {floor & window: (near, steps2, corner bit)})``, where the window masks
    the cell's 4 neighbours and the 4 cells two steps away inside the interior (at most 256 entries per cell,
    filled as floors are met; they never depend on a level)."""
    out = []
    for cell in range(rows * cols):
        r, c = divmod(cell, cols)
        window = 0
        for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1), (-2, 0), (2, 0), (0, -2), (0, 2)):
            if 1 <= r + dr <= rows - 2 and 1 <= c + dc <= cols - 2:
                window |= 1 << ((r + dr) * cols + c + dc)
        out.append((window, {}))
    return tuple(out)


def _cell_entry(cell: int, cols: int, floor: int) -> tuple:
    """``(near, steps2, corner bit)`` of an interior floor cell (its neighbours and the cells beyond them are inside
    the grid and on its row or column: no bounds checks). Moves in ``MOVES`` order: Up, Down, Left, Right."""
    up, down, left, right = cell - cols, cell + cols, cell - 1, cell + 1
    fu, fd, fl, fr = floor >> up & 1, floor >> down & 1, floor >> left & 1, floor >> right & 1
    near_cell, steps = [], []
    if fu:
        near_cell.append((up, down if fd else -1))
        steps.append((0, up, up - cols if floor >> (up - cols) & 1 else -1))
    if fd:
        near_cell.append((down, up if fu else -1))
        steps.append((1, down, down + cols if floor >> (down + cols) & 1 else -1))
    if fl:
        near_cell.append((left, right if fr else -1))
        steps.append((2, left, left - 1 if floor >> (left - 1) & 1 else -1))
    if fr:
        near_cell.append((right, left if fl else -1))
        steps.append((3, right, right + 1 if floor >> (right + 1) & 1 else -1))
    corner = 1 << cell if not (fu and fd) and not (fl and fr) else 0
    return tuple(near_cell), tuple(steps), corner


@lru_cache(maxsize=64)
def _brush_masks(rows: int, cols: int) -> tuple[tuple[int, ...], ...]:
    """Centre cell -> the floor bitmask each brush carves there (centres 1..rows-2 x 1..cols-2); entry 0 (a border
    cell, never a centre) is the interior mask instead."""
    masks: list = [()] * (rows * cols)
    masks[0] = sum(((1 << (cols - 2)) - 1) << (r * cols + 1) for r in range(1, rows - 1))
    for r in range(1, rows - 1):
        for c in range(1, cols - 1):
            masks[r * cols + c] = tuple(
                sum(1 << ((r + i - 1) * cols + c + j - 1) for i in range(3) for j in range(3) if brush[i][j])
                for brush in BRUSHES
            )
    return tuple(masks)


@lru_cache(maxsize=64)
def _walk_steps(rows: int, cols: int) -> tuple[tuple[int, ...], ...]:
    """Direction index (``DIRECTIONS``) -> interior cell -> the cell one step on, clamped to the interior."""
    out = []
    for dr, dc in DIRECTIONS:
        step = [0] * (rows * cols)
        for r in range(1, rows - 1):
            for c in range(1, cols - 1):
                step[r * cols + c] = min(max(r + dr, 1), rows - 2) * cols + min(max(c + dc, 1), cols - 2)
        out.append(tuple(step))
    return tuple(out)


def attempt_seed(seed: int, attempt: int) -> int:
    """Attempt 0 is the seed; later ones are the first 8 bytes of SHA-256("sokoban:{seed}:{attempt}")."""
    if attempt == 0:
        return seed
    return int.from_bytes(hashlib.sha256(f"sokoban:{seed}:{attempt}".encode()).digest()[:8], "big")


def topology(draws: Draws, rows: int, cols: int) -> int:
    """All walls, then a random walk of int(1.7 * (rows + cols)) steps carving floor with random 3x3 brushes; the
    border stays wall. Returns the floor bitmask (bit ``r * cols + c``).

    The walk's draws (a float per step, ``below(4)`` on a change of direction, ``below(5)`` for the brush) are
    ``Draws.random``/``below`` written out on the raw words: they are most of a try's draws, and the calls were a
    fifth of a level's time. Lemire's rejection never happens for 4 and only for a zero low half for 5."""
    masks, walk = _brush_masks(rows, cols), _walk_steps(rows, cols)
    below = draws.below
    step = walk[below(4)]
    pos = (1 + below(rows - 2)) * cols + 1 + below(cols - 2)
    floor = 0
    words, i, half = draws.words, draws.index, draws.half
    for _ in range(int(1.7 * (rows + cols))):
        if i == 64:
            words, i = draws.refill(), 0
        if (words[i] >> 11) * 1.1102230246251565e-16 < P_CHANGE_DIRECTION:  # Draws.random
            if half is None:  # Draws.below(4): m >> 32 of a 32-bit draw times 4
                i += 1
                if i == 64:
                    words, i = draws.refill(), 0
                word = words[i]
                half, d = word >> 32, (word & 0xFFFFFFFF) >> 30
            else:
                half, d = None, half >> 30
            step = walk[d]
        i += 1
        pos = step[pos]
        if half is None:  # Draws.below(5)
            if i == 64:
                words, i = draws.refill(), 0
            word = words[i]
            i += 1
            half, m = word >> 32, (word & 0xFFFFFFFF) * 5
        else:
            half, m = None, half * 5
        if not m & 0xFFFFFFFF:  # rejected (threshold (2**32 - 5) % 5 = 1): the slow path redraws
            draws.index, draws.half = i, half
            while not m & 0xFFFFFFFF:
                m = draws._next32() * 5
            words, i, half = draws.words, draws.index, draws.half
        floor |= masks[pos][m >> 32]
    draws.index, draws.half = i, half
    return floor & masks[0]


def reverse_play(lay: Layout, targets: tuple[int, ...], player: int, search_depth: int,
                 allow_box_on_target: bool = False) -> tuple[int, tuple[int, ...], int]:
    """DFS over walks and pulls from the solved state (box i starts on target i), at most ``REVERSE_STATE_LIMIT``
    visited states, states at most ``search_depth - 2`` moves deep: RAGEN's ``ttl`` is spent on the root call and
    stops the call that reaches 0, so its LargerSokoban (depth 10) scores states up to 8 moves deep. Returns the best
    ``(score, boxes, player)`` by ``box_swaps * sum(manhattan(box_i, target_i))`` (first found on ties; score 0 =
    nothing found). RAGEN scores a state 0 while a box stands on a target, so no level starts with one;
    ``allow_box_on_target`` lifts that rule."""
    if len(targets) == 1 and _one_box_loop_fits(lay):
        return _reverse_play_one(lay, targets[0], player, search_depth - 2, pulls(lay, targets[0])[1])
    near, on_target = lay.near, frozenset(targets).isdisjoint
    dist = [_distances(lay.rows, lay.cols, t) for t in targets]
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
            score = swaps * sum(d[b] for d, b in zip(dist, boxes))
            if score > best[0]:
                best = (score, boxes, pl)
        if depth >= search_depth - 2:
            continue
        for nxt, behind in near[pl]:
            if nxt in boxes:
                continue
            stack.append((boxes, nxt, last, swaps, depth + 1))  # walk
            if behind in boxes:  # pull: the box behind follows into the player's old cell
                i = boxes.index(behind)
                stack.append((boxes[:i] + (pl,) + boxes[i + 1 :], nxt, i, swaps + (i != last), depth + 1))
    return best


def _one_box_loop_fits(lay: Layout) -> bool:
    """Whether ``_reverse_play_one``'s int states (8 bits per cell) and its unbounded visited set fit this floor."""
    return len(lay.cells) ** 2 < REVERSE_STATE_LIMIT and lay.rows * lay.cols <= 256


def _reverse_play_one(lay: Layout, target: int, player: int, max_depth: int,
                      top: int) -> tuple[int, tuple[int, ...], int]:
    """``reverse_play`` for one box, same visiting order and result: after its first pull the box is the only one
    ever pulled, so box_swaps is 1 and the score is the box's distance from the target (0 on it, whatever the
    on-target rule). States are ints ``box << 8 | player``; a state already visited is not pushed again (it would
    be skipped when popped), and the search stops once the box reaches ``top`` (``pulls``: nothing can score more
    and ties keep the first): in about 9 levels out of 10 it does, on average halfway through the search."""
    near, dist = lay.near, _distances(lay.rows, lay.cols, target)
    best, best_key = 0, target << 8 | player
    seen = set()
    stack = [best_key]  # entries: depth << 16 | box << 8 | player
    pop, push, visit = stack.pop, stack.append, seen.add
    while stack:
        entry = pop()
        key = entry & 0xFFFF
        if key in seen:
            continue
        visit(key)
        box, pl = key >> 8, key & 255
        if dist[box] > best:
            best, best_key = dist[box], key
            if best == top:
                break
        depth = (entry >> 16) + 1
        if depth > max_depth:
            continue
        high, pull, deep = key ^ pl, pl << 8, depth << 16  # a walk's key lacks only the player; a pull's, the box
        for nxt, behind in near[pl]:
            if nxt != box:
                k = high | nxt
                if k not in seen:
                    push(deep | k)
                if behind == box:
                    k = pull | nxt
                    if k not in seen:
                        push(deep | k)
    return best, (best_key >> 8,), best_key & 255


def pulls(lay: Layout, target: int) -> tuple[list[int], int]:
    """``(pull distance per cell, top)`` for a box on ``target`` if the player could stand anywhere: a pull moves
    the box from b to b + d with the player going from b + d to b + 2d, so both must be floor. The pull distance
    (``UNREACHABLE`` where no pull leads) is a lower bound on the pushes from a cell to the target that changes by at
    most 1 per push (a bound for the move BFS); ``top`` is the largest manhattan distance from the target among the
    cells reached (no reverse play can score more)."""
    dist = _distances(lay.rows, lay.cols, target)
    steps2 = lay.steps2
    far = [UNREACHABLE] * (lay.rows * lay.cols)
    far[target] = 0
    queue, top = [target], 0
    for cell in queue:  # BFS: the list grows while it is read
        d = far[cell] + 1
        for _, n1, n2 in steps2[cell]:
            if n2 >= 0 and far[n1] == UNREACHABLE:
                far[n1] = d
                queue.append(n1)
                if dist[n1] > top:
                    top = dist[n1]
    return far, top


@lru_cache(maxsize=4096)
def _distances(rows: int, cols: int, target: int) -> list[int]:
    """Cell -> manhattan distance to ``target``."""
    tr, tc = divmod(target, cols)
    return [abs(b // cols - tr) + abs(b % cols - tc) for b in range(rows * cols)]


def displace_player(draws: Draws, lay: Layout, boxes: tuple[int, ...], player: int, displacement: int) -> int:
    """RAGEN: with probability 0.8 (total box displacement 1) or 0.5 (otherwise) walk the player one step to an
    adjacent unvisited free cell, continuing with probability 0.5 per step, at most 3 steps."""
    if draws.random() >= (0.8 if displacement == 1 else 0.5):
        return player
    visited = [player]
    for step in range(3):
        free = [nxt for nxt, _ in lay.near[player] if nxt not in boxes and nxt not in visited]
        if not free:
            break
        player = free[draws.below(len(free))]
        visited.append(player)
        if step == 2 or draws.random() >= 0.5:
            break
    return player


def generate(
    seed: int,
    rows: int = 6,
    cols: int = 6,
    num_boxes: int = 1,
    search_depth: int = 300,
    min_pushes: int = 1,
    max_moves: int | None = None,
    player_displacement: bool = True,
    allow_box_on_target: bool = False,
) -> Level:
    """A BFS-verified level for ``seed``: the first candidate (``candidates``) with a solution of at most
    ``max_moves`` moves (None: any solution) and at least ``min_pushes`` optimal pushes."""
    if num_boxes == 1 and max_moves is not None and rows * cols <= 256:
        level = _generate_one_box(seed, rows, cols, search_depth, min_pushes, max_moves, player_displacement)
    else:
        level = None
        for attempt, lay, targets, player, boxes in _candidates(seed, rows, cols, num_boxes, search_depth,
                                                                player_displacement, allow_box_on_target):
            level = verify(lay, targets, player, boxes, min_pushes, max_moves, attempt)
            if level is not None:
                break
    if level is not None:
        return level
    raise GenerationError(
        f"no {rows}x{cols} level with {num_boxes} box(es), min_pushes={min_pushes}, max_moves={max_moves} "
        f"after {MAX_ATTEMPTS} attempts for seed {seed}"
    )


def _generate_one_box(seed: int, rows: int, cols: int, search_depth: int, min_pushes: int, max_moves: int,
                      player_displacement: bool) -> Level | None:
    """``generate`` for one box and a move budget (the ``sokoban`` variants): the same draws, candidates, checks and
    level as ``_candidates`` + ``verify``, written as one loop without their per-try tuples and calls, and the move
    BFS bounded by the pull distances that reverse play's ``top`` is computed from anyway (a tighter bound than
    manhattan's: the same plan, fewer states). None when no attempt gives a level."""
    for attempt in range(MAX_ATTEMPTS):
        draws = Draws(attempt_seed(seed, attempt))
        for _ in range(TOPOLOGY_TRIES):
            lay = layout(rows, cols, topology(draws, rows, cols))
            cells = lay.cells
            if len(cells) < 2:
                continue
            picks = draws.sample(len(cells), 2)
            target, player = cells[picks[0]], cells[picks[1]]
            far, top = pulls(lay, target)  # rows * cols <= 256: _reverse_play_one fits (_one_box_loop_fits)
            score, (box,), player = _reverse_play_one(lay, target, player, search_depth - 2, top)
            if score == 0:
                continue
            if player_displacement:  # the score of one box is its manhattan displacement
                player = displace_player(draws, lay, (box,), player, score)
            try:
                moves = search_one_box(lay.tables((target,)), player, box, max_moves, bound=far)
            except SearchLimit:
                continue
            if moves is None:
                continue
            level = Level(room_of(lay, (target,), (box,), player), tuple(moves), attempt)
            if min_pushes <= 1 or level.optimal_pushes() >= min_pushes:
                return level
    return None


def candidates(seed: int, rows: int, cols: int, num_boxes: int, search_depth: int, player_displacement: bool = True,
               allow_box_on_target: bool = False):
    """The reverse-played levels of ``seed`` in generation order, before any check: ``(attempt, board, player,
    boxes)``. Checks draw nothing from the generator, so this order is the same whatever ``generate`` rejects."""
    for attempt, lay, targets, player, boxes in _candidates(seed, rows, cols, num_boxes, search_depth,
                                                            player_displacement, allow_box_on_target):
        yield attempt, lay.board(targets), player, boxes


def _candidates(seed, rows, cols, num_boxes, search_depth, player_displacement, allow_box_on_target):
    for attempt in range(MAX_ATTEMPTS):
        draws = Draws(attempt_seed(seed, attempt))
        for _ in range(TOPOLOGY_TRIES):
            found = _scramble(draws, rows, cols, num_boxes, search_depth, player_displacement, allow_box_on_target)
            if found is not None:
                yield (attempt, *found)


def verify(lay: Layout, targets: tuple[int, ...], player: int, boxes: tuple[int, ...], min_pushes: int,
           max_moves: int | None, attempt: int = 0) -> Level | None:
    """The level if a move-optimal solution within ``max_moves`` exists and the push optimum is >= ``min_pushes``
    (reverse play leaves a box off its target, so 1 push is always needed: the push search runs only for more)."""
    bm = 0
    for b in boxes:
        bm |= 1 << b
    try:
        moves = search_moves(lay.tables(targets), player, bm, max_moves)
    except SearchLimit:
        return None
    if moves is None:
        return None
    level = Level(room_of(lay, targets, boxes, player), tuple(moves), attempt)
    if min_pushes > 1 and level.optimal_pushes() < min_pushes:
        return None
    return level


def room_of(lay: Layout, targets: tuple[int, ...], boxes, player: int) -> tuple[tuple[int, ...], ...]:
    """Codes 0..6 of a level: walls, floor and targets, with the boxes and (unless -1) the player placed."""
    codes = [WALL] * (lay.rows * lay.cols)
    for cell in lay.cells:
        codes[cell] = EMPTY
    for t in targets:
        codes[t] = TARGET
    for b in boxes:
        codes[b] = BOX_ON_TARGET if codes[b] == TARGET else BOX
    if player >= 0:
        codes[player] = PLAYER_ON_TARGET if codes[player] == TARGET else PLAYER
    return tuple(tuple(codes[r * lay.cols : (r + 1) * lay.cols]) for r in range(lay.rows))


def _scramble(draws, rows, cols, num_boxes, search_depth, player_displacement, allow_box_on_target):
    """One topology try: ``(layout, targets, player, boxes)`` after reverse play and player displacement, or None
    (score 0)."""
    lay = layout(rows, cols, topology(draws, rows, cols))
    cells = lay.cells
    if len(cells) < num_boxes + 1:
        return None
    picks = draws.sample(len(cells), num_boxes + 1)
    targets, player = tuple(cells[i] for i in picks[:-1]), cells[picks[-1]]
    score, boxes, player = reverse_play(lay, targets, player, search_depth, allow_box_on_target)
    if score == 0:
        return None
    if player_displacement:
        disp = sum(abs(b // cols - t // cols) + abs(b % cols - t % cols) for b, t in zip(boxes, targets, strict=True))
        player = displace_player(draws, lay, boxes, player, disp)
    return lay, targets, player, boxes
