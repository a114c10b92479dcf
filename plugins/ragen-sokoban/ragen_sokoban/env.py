"""The Sokoban env (environments.md §2): gym-sokoban dynamics and rewards, RAGEN's text observations, move-optimal
expert."""

from __future__ import annotations

from ragen import Env, Expert
from ragen_sokoban.boxoban import load_levels
from ragen_sokoban.config import MEANINGS, SokobanConfig
from ragen_sokoban.generator import generate
from ragen_sokoban.solver import (
    BOX,
    BOX_ON_TARGET,
    EMPTY,
    MOVE_STATE_LIMIT,
    MOVES,
    PLAYER,
    PLAYER_ON_TARGET,
    TARGET,
    WALL,
    Board,
    SearchLimit,
    optimal_first_moves,
    solve,
    solve_moves,
)

#: gym-sokoban's reward constants
STEP_PENALTY, BOX_ON_TARGET_REWARD, BOX_OFF_TARGET_PENALTY, SOLVED_REWARD = -0.1, 1.0, -1.0, 10.0
#: states the diagnostics' search may visit per state (Boxoban's 4 boxes exceed it: those levels are not judged,
#: rather than spending seconds per step of every rollout)
JUDGE_STATE_LIMIT = 100_000


class SokobanExpert(Expert):
    """Plans a move-optimal solution (BFS over player and boxes) from the env's current state and follows it while
    the env stays on it (any other state, e.g. after a blocked or off-plan move, is replanned). Levels beyond the
    move-level search's state limit (Boxoban's 4 boxes) get the push-optimal plan instead. ``[]``: solved, or no
    plan (remembered, so a hopeless state is not searched twice)."""

    def __init__(self) -> None:
        self._plan: dict[tuple, tuple[str, ...]] = {}  # state on the current plan -> the plan's remaining moves
        self._hopeless: set[tuple] = set()

    def forget(self) -> None:
        self._plan, self._hopeless = {}, set()

    def plan(self, env: SokobanEnv) -> tuple[str, ...] | None:
        state = env.state()
        if state in self._plan:
            return self._plan[state]
        if state in self._hopeless:
            return None
        try:
            moves = solve_moves(env.board, env.player, state[1], limit=MOVE_STATE_LIMIT)
        except SearchLimit:
            solution = solve(env.board, env.player, state[1])
            moves = solution[1] if solution is not None else None
        if moves is None:
            self._hopeless.add(state)
            return None
        self._plan = _states_along(env.board, env.player, state[1], tuple(moves))
        return self._plan.get(state, ())

    def next_actions(self, env: SokobanEnv, k: int) -> list[str]:
        if env.board is None or env.solved():
            return []
        return list((self.plan(env) or ())[: max(0, k)])

    def optimal_actions(self, env: SokobanEnv) -> set[str] | None:
        """The moves that start a move-optimal solution (every tie); None when solved, unsolvable (a box in a
        dead corner or wedged: no move is better than another) or too big to search (``JUDGE_STATE_LIMIT``)."""
        found = env.optimal_moves() if env.board is not None else None
        if found is None or not found[0]:
            return None
        return set(found[1])

    def rationale(self, env: SokobanEnv) -> str:
        plan = self.plan(env) if env.board is not None and not env.solved() else None
        if not plan:
            return ""
        grid = env.config.observation_format == "grid"

        def at(cell: int) -> str:
            r, c = divmod(cell, env.board.cols)
            return f"row {r}, column {c}" if grid else f"({r}, {c})"

        player, n = env.player, 0
        while n < len(plan) and player + env.board.step[plan[n]] not in env.boxes:  # walk up to the first push
            player += env.board.step[plan[n]]
            n += 1
        box = player + env.board.step[plan[n]]
        walk = f"walk {n} step{'s' if n != 1 else ''} to {at(player)} and " if n else ""
        pushes = sum(1 for _ in _pushes(env, plan))
        return (f"I am at {at(env.player)}. My plan takes {len(plan)} move{'s' if len(plan) != 1 else ''} "
                f"({pushes} push{'es' if pushes != 1 else ''}); first I {walk}push the box at {at(box)} {plan[n]}.")


def _pushes(env: SokobanEnv, plan: tuple[str, ...]):
    player, boxes = env.player, set(env.boxes)
    for name in plan:
        player += env.board.step[name]
        if player in boxes:
            boxes.remove(player)
            boxes.add(player + env.board.step[name])
            yield name


def _states_along(board: Board, player: int, boxes: frozenset, moves: tuple[str, ...]) -> dict[tuple, tuple[str, ...]]:
    """Every state the plan passes through, mapped to the moves left from it."""
    out = {}
    for i, name in enumerate(moves):
        out[(player, boxes)] = moves[i:]
        d = board.step[name]
        player += d
        if player in boxes:
            boxes = (boxes - {player}) | {player + d}
    return out


class SokobanEnv(Env):
    """Push every box onto a target (gym-sokoban rules, RAGEN observations)."""

    config_cls = SokobanConfig
    reset_options = ("task_index",)  # boxoban levels only; procedural levels come from the seed alone
    step_cost = STEP_PENALTY  # every move costs it: all-fail groups would differ by action count alone

    def __init__(self, config: SokobanConfig | None = None, render_mode: str | None = "ansi"):
        super().__init__(config, render_mode)
        cfg: SokobanConfig = self.config
        self._levels = load_levels(cfg.boxoban_files) if cfg.level_source == "boxoban" else ()  # fails early
        self.procedural = cfg.level_source == "procedural"
        self.action_names = list(MOVES)
        self.symbol_legend = (
            dict(zip(cfg.grid_vocab, MEANINGS, strict=True)) if cfg.observation_format != "coord" else None
        )
        self.expert = SokobanExpert()
        self.board: Board | None = None
        self.boxes: frozenset[int] = frozenset()
        self.player = 0
        self.steps = 0
        self.optimal_pushes: int | None = None
        self.instructions = self._instructions(*cfg.dim_room)

    def _instructions(self, rows: int, cols: int) -> str:
        coords = ""
        if self.config.observation_format != "grid":
            coords = (f"Positions are (row, column), from (0, 0) top-left to ({rows - 1}, {cols - 1}) bottom-right; "
                      "Up decreases the row, Down increases it, Left decreases the column, Right increases it. ")
        return (
            "You are solving the Sokoban puzzle. You are the player and you need to push all boxes to targets. "
            "When you are right next to a box, you can push it by moving in the same direction. "
            "You cannot push a box into a wall or into another box, and you cannot pull a box. "
            + coords
            + "The answer should be a sequence of actions, like <answer>Right || Right || Up</answer>."
        )

    # ---- reset -----------------------------------------------------------------------------------------
    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        cfg: SokobanConfig = self.config
        info: dict = {}
        if cfg.level_source == "boxoban":
            index = int(options.get("task_index", seed)) % len(self._levels)
            level = self._levels[index]
            room = level.room
            self.task_id = f"sokoban/boxoban/{level.name}"
            self.optimal_pushes = None  # solved lazily by the expert
            info["level_index"] = index
        else:
            rows, cols = cfg.dim_room
            level = generate(seed, rows, cols, cfg.num_boxes, cfg.search_depth, cfg.min_pushes,
                             cfg.action_budget if cfg.reject_over_budget else None, cfg.player_displacement,
                             cfg.allow_box_on_target)
            room = level.room
            self.task_id = f"sokoban/{rows}x{cols}/b{cfg.num_boxes}/s{seed}"
            info["plan_moves"] = len(level.moves)
        obs = self.load_room(room)
        if self.procedural:  # generation checks the move budget; the push optimum is reported from here
            self.optimal_pushes = info["optimal_pushes"] = solve(self.board, self.player, self.boxes)[0]
        return obs, info

    def load_room(self, room) -> str:
        """Set the level from a room of codes 0..6 and return its observation (used by ``_reset``; after a
        ``reset()``, tests load hand-built levels with it)."""
        self.board = board = Board(room)
        cells = [(r * board.cols + c, x) for r, row in enumerate(room) for c, x in enumerate(row)]
        self.boxes = frozenset(cell for cell, x in cells if x in (BOX, BOX_ON_TARGET))
        self.player = next(cell for cell, x in cells if x in (PLAYER, PLAYER_ON_TARGET))
        self.steps = 0
        self._optimal: dict[tuple, tuple[int | None, frozenset[str]]] = {}  # state -> optimal_moves()
        self._too_big = False
        self.expert.forget()  # plans belong to the previous level
        self.instructions = self._instructions(board.rows, board.cols)
        return self._observation()

    # ---- step --------------------------------------------------------------------------------------------
    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        name = self.canonical_action(action)
        board = self.board
        if name is None:  # not an action: a no-op that uses no step and earns nothing
            return self._observation(), 0.0, False, False, {
                "success": self.solved(), "action_is_valid": False, "action_is_effective": False,
                "boxes_on_target": len(self.boxes & board.targets)}
        self.steps += 1
        reward, moved = STEP_PENALTY, False
        nxt = board.move(self.player, name)
        if nxt is not None:
            if nxt not in self.boxes:
                self.player, moved = nxt, True
            else:
                dest = board.move(nxt, name)
                if dest is not None and dest not in self.boxes:
                    self.boxes = (self.boxes - {nxt}) | {dest}
                    self.player, moved = nxt, True
                    if dest in board.targets and nxt not in board.targets:
                        reward += BOX_ON_TARGET_REWARD
                    elif nxt in board.targets and dest not in board.targets:
                        reward += BOX_OFF_TARGET_PENALTY
        solved = self.solved()
        if solved:
            reward += SOLVED_REWARD
        truncated = not solved and self.steps >= self.config.max_steps
        info = {"success": solved, "action_is_valid": True, "action_is_effective": moved,
                "boxes_on_target": len(self.boxes & board.targets)}
        return self._observation(), reward, solved, truncated, info

    # ---- state -------------------------------------------------------------------------------------------
    def solved(self) -> bool:
        return self.board is not None and self.boxes <= self.board.targets

    def optimal_moves(self) -> tuple[int | None, frozenset[str]] | None:
        """``(fewest moves left, the moves that start a shortest solution)`` of the current state, ``(None,
        frozenset())`` when it is unsolvable, None when the level is too big to search; cached per state, and a level
        that met the search limit once is not searched again (its states are as big)."""
        state = self.state()
        if state in self._optimal:
            return self._optimal[state]
        if self._too_big:
            return None
        try:
            found = optimal_first_moves(self.board, self.player, self.boxes, limit=JUDGE_STATE_LIMIT)
        except SearchLimit:
            self._too_big = True
            return None
        self._optimal[state] = (None, frozenset()) if found is None else found
        return self._optimal[state]

    def potential(self) -> float | None:
        """Minus the fewest moves left to solve (0 when solved). An unsolvable state (a deadlocked box), or one that
        needs more moves than an episode's whole action budget, counts as ``-(action_budget + 1)``: below every state
        an episode can still solve, and on the scale of the env's rewards (a deadlock is not worth -100 against +10
        for solving). None for levels too big to search."""
        found = self.optimal_moves() if self.board is not None else None
        if found is None:
            return None
        moves = found[0]
        cap = self.config.action_budget + 1
        return -float(cap if moves is None else min(moves, cap))

    def state(self) -> tuple[int, frozenset[int]]:
        """(player cell, box cells): the dynamic part of the level."""
        return self.player, self.boxes

    def codes(self) -> list[list[int]]:
        """The room as codes 0..6 (wall, empty, target, box on target, box, player, player on target)."""
        b = self.board
        out = []
        for r in range(b.rows):
            row = []
            for cell in range(r * b.cols, (r + 1) * b.cols):
                target = cell in b.targets
                if cell not in b.floor:
                    row.append(WALL)
                elif cell == self.player:
                    row.append(PLAYER_ON_TARGET if target else PLAYER)
                elif cell in self.boxes:
                    row.append(BOX_ON_TARGET if target else BOX)
                else:
                    row.append(TARGET if target else EMPTY)
            out.append(row)
        return out

    # ---- observation -------------------------------------------------------------------------------------
    def _observation(self) -> str:
        codes = self.codes()
        fmt = self.config.observation_format
        if fmt == "coord":
            return coord_text(codes, self.config.coord_walls)
        grid = grid_text(codes, self.config.grid_vocab)
        if fmt == "grid":
            return grid
        return "Coordinates: \n" + coord_text(codes, self.config.coord_walls) + "\nGrid Map: \n" + grid


def grid_text(codes: list[list[int]], vocab) -> str:
    """Rows of symbols joined by newlines, no spaces."""
    return "\n".join("".join(vocab[x] for x in row) for row in codes)


def coord_text(codes: list[list[int]], walls: bool = False) -> str:
    """RAGEN's coordinate listing: the board size, then the non-empty groups among targets, boxes, boxes on target,
    player, player on target; ``walls`` adds the interior walls after the size line."""
    rows, cols = len(codes), len(codes[0])
    cells: dict[int, list[str]] = {code: [] for code in range(7)}
    for r, row in enumerate(codes):
        for c, x in enumerate(row):
            if x != WALL or (0 < r < rows - 1 and 0 < c < cols - 1):
                cells[x].append(f"({r}, {c})")
    lines = [f"Board size: {rows} rows x {cols} cols (zero-indexed)."]
    groups = [("Targets", TARGET), ("Boxes", BOX), ("Boxes on target", BOX_ON_TARGET), ("Player", PLAYER),
              ("Player on target", PLAYER_ON_TARGET)]
    if walls:
        groups.insert(0, ("Walls", WALL))
    lines += [f"{label}: " + ", ".join(cells[code]) for label, code in groups if cells[code]]
    return "\n".join(lines)
