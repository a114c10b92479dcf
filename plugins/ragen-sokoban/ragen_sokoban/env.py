"""The Sokoban env (environments.md §2): gym-sokoban dynamics and rewards, text observations, BFS expert."""

from __future__ import annotations

from ragen import Env, Expert

from ragen_sokoban.boxoban import load_levels
from ragen_sokoban.config import MEANINGS, SokobanConfig
from ragen_sokoban.generator import generate
from ragen_sokoban.solver import (
    BOX,
    BOX_ON_TARGET,
    EMPTY,
    MOVES,
    PLAYER,
    PLAYER_ON_TARGET,
    TARGET,
    WALL,
    Board,
    solve,
)

STEP_PENALTY, BOX_ON, BOX_OFF, SOLVED = -0.1, 1.0, -1.0, 10.0


class SokobanExpert(Expert):
    """Follows one optimal plan while the env stays on it; replans with the push-level BFS otherwise."""

    def __init__(self) -> None:
        self._plan: dict[tuple, list[str]] = {}  # state -> remaining moves of the current plan

    def next_actions(self, env: SokobanEnv, k: int) -> list[str]:
        if env.boxes <= env.board.targets:
            return []
        state = (env.player, frozenset(env.boxes))
        if state not in self._plan:
            solution = solve(env.board, env.player, frozenset(env.boxes))
            if solution is None:
                return []
            self._plan = _states_along(env.board, env.player, set(env.boxes), solution[1])
        return self._plan[state][:k]

    def forget(self) -> None:
        self._plan = {}

    def rationale(self, env: SokobanEnv) -> str:
        r, c = divmod(env.player, env.board.cols)
        boxes = ", ".join(str(divmod(b, env.board.cols)) for b in sorted(env.boxes - env.board.targets))
        return f"I am at ({r}, {c}). I need to push the box at {boxes} onto a target without getting it stuck."


def _states_along(board: Board, player: int, boxes: set[int], moves: list[str]) -> dict[tuple, list[str]]:
    """Every state the plan passes through, mapped to the moves left from it."""
    out = {}
    for i, name in enumerate(moves):
        out[(player, frozenset(boxes))] = moves[i:]
        player += board.step[name]
        if player in boxes:
            boxes = (boxes - {player}) | {player + board.step[name]}
    return out


class SokobanEnv(Env):
    """Push every box onto a target."""

    config_cls = SokobanConfig

    def __init__(self, config: SokobanConfig | None = None, render_mode: str | None = "ansi"):
        super().__init__(config, render_mode)
        cfg = self.config
        if cfg.level_source == "boxoban":
            self._levels = load_levels(cfg.boxoban_files)  # fails early with a clear ConfigError
        rows, cols = cfg.dim_room
        coord = cfg.observation_format != "grid"
        self.instructions = (
            "You are solving the Sokoban puzzle. You are the player and you need to push all boxes to targets. "
            "When you are right next to a box, you can push it by moving in the same direction. "
            "You cannot push a box through a wall, and you cannot pull a box. "
            + (f"Coordinates are (row, column), from (0, 0) top-left to ({rows - 1}, {cols - 1}) bottom-right. " if coord else "")
            + "The answer should be a sequence of actions, like <answer>Right || Right || Up</answer>."
        )
        self.action_names = list(MOVES)
        self.symbol_legend = dict(zip(cfg.grid_vocab, MEANINGS, strict=True)) if cfg.observation_format != "coord" else None
        self.expert = SokobanExpert()
        self.board: Board | None = None
        self.boxes: set[int] = set()
        self.player = 0
        self.steps = 0

    # ---- reset -----------------------------------------------------------------------------------------
    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        cfg = self.config
        if cfg.level_source == "boxoban":
            index = int(options.get("task_index", seed)) % len(self._levels)
            room = [list(row) for row in self._levels[index]]
            self.task_id = f"sokoban/boxoban/{index}"
            info = {}
        else:
            rows, cols = cfg.dim_room
            max_moves = cfg.max_actions_per_episode if cfg.reject_over_budget else None
            room, pushes, moves = generate(seed, rows, cols, cfg.num_boxes, cfg.search_depth, cfg.min_pushes, max_moves,
                                           cfg.player_displacement)
            self.task_id = f"sokoban/{rows}x{cols}/b{cfg.num_boxes}/s{seed}"
            info = {"optimal_pushes": pushes, "optimal_moves": len(moves)}
        self.board = Board(room)
        cols = self.board.cols
        self.boxes = {r * cols + c for r, row in enumerate(room) for c, x in enumerate(row) if x in (BOX, BOX_ON_TARGET)}
        self.player = next(r * cols + c for r, row in enumerate(room) for c, x in enumerate(row) if x in (PLAYER, PLAYER_ON_TARGET))
        self.steps = 0
        self.expert.forget()  # plans belong to the previous level
        return self._observation(), info

    # ---- step --------------------------------------------------------------------------------------------
    def _step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        name = self.canonical_action(action)
        if name is None:  # not an action: nothing happens, nothing is earned
            return self._observation(), 0.0, False, False, {
                "success": self._solved(), "action_is_valid": False, "action_is_effective": False}
        self.steps += 1
        board, d = self.board, self.board.step[name]
        reward = STEP_PENALTY
        moved = False
        nxt = self.player + d
        if board._inside(self.player, name) and nxt in board.floor:
            if nxt not in self.boxes:
                self.player, moved = nxt, True
            elif board._inside(nxt, name) and nxt + d in board.floor and nxt + d not in self.boxes:
                was, now = nxt in board.targets, nxt + d in board.targets
                self.boxes = (self.boxes - {nxt}) | {nxt + d}
                self.player, moved = nxt, True
                reward += (BOX_ON if now and not was else 0.0) + (BOX_OFF if was and not now else 0.0)
        solved = self._solved()
        if solved:
            reward += SOLVED
        truncated = not solved and self.steps >= self.config.max_steps
        info = {"success": solved, "action_is_valid": True, "action_is_effective": moved,
                "boxes_on_target": len(self.boxes & board.targets)}
        return self._observation(), reward, solved, truncated, info

    def _solved(self) -> bool:
        return self.board is not None and self.boxes <= self.board.targets

    # ---- observation -------------------------------------------------------------------------------------
    def codes(self) -> list[list[int]]:
        b = self.board
        out = []
        for r in range(b.rows):
            row = []
            for c in range(b.cols):
                cell = r * b.cols + c
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

    def _observation(self) -> str:
        codes = self.codes()
        fmt = self.config.observation_format
        grid = "\n".join("".join(self.config.grid_vocab[x] for x in row) for row in codes)
        if fmt == "grid":
            return grid
        coord = self._coord(codes)
        return coord if fmt == "coord" else "Coordinates: \n" + coord + "\nGrid Map: \n" + grid

    def _coord(self, codes: list[list[int]]) -> str:
        rows, cols = len(codes), len(codes[0])
        cells = {k: [] for k in (TARGET, BOX, BOX_ON_TARGET, PLAYER, PLAYER_ON_TARGET, WALL)}
        for r, row in enumerate(codes):
            for c, x in enumerate(row):
                interior = 0 < r < rows - 1 and 0 < c < cols - 1
                if x != WALL or interior:
                    cells.setdefault(x, []).append(f"({r}, {c})")
        lines = [f"Board size: {rows} rows x {cols} cols (zero-indexed)."]
        if self.config.coord_walls and cells[WALL]:
            lines.append("Walls: " + ", ".join(cells[WALL]))
        for label, code in (("Targets", TARGET), ("Boxes", BOX), ("Boxes on target", BOX_ON_TARGET),
                            ("Player", PLAYER), ("Player on target", PLAYER_ON_TARGET)):
            if cells[code]:
                lines.append(f"{label}: " + ", ".join(cells[code]))
        return "\n".join(lines)
