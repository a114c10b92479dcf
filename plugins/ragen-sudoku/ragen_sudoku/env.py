"""The Sudoku environment (RAGEN SimpleSudoku): generated puzzles with a unique solution, RAGEN's moves and rewards.

Rewards per executed move, ``reward_scheme="dense"`` (RAGEN SimpleSudoku): unreadable move, changing a given cell,
or breaking a row/column/box rule -0.1 (the move is not applied); a legal digit +1.0 when it is the solution's, +0.5
otherwise; completing the grid +10. Project rule for overwriting an earlier placement: +0.5 if it now matches the
solution, 0 if legal but wrong, capped so that one cell never earns more than +1.0 in total. ``"sparse"`` (RAGEN's
SudokuEnv): 1.0 for the move that completes a correct grid, 0 for every other move.

Observations: ``grid`` (the spec's grid with feedback lines) or RAGEN's render modes ``text`` (``| d . d d `` row
after row on one line), ``text_with_coordinates`` (that, then the 1-indexed empty positions) and ``board`` (its
boxed board with the step count and difficulty); RAGEN's modes show no feedback, as RAGEN.
"""

from __future__ import annotations

from typing import Any

import attrs

from ragen import ConfigError, Env, EnvConfig, Expert, option
from ragen_sudoku.generator import HOLES, Puzzle, generate_puzzle
from ragen_sudoku.grid import BOX_SHAPES, candidates, clashes, conflicting_pairs, geometry, is_solved
from ragen_sudoku.moves import Move, parse_move
from ragen_sudoku.solver import explain, plan


@attrs.frozen
class Rewards:
    """The reward of each kind of move."""

    penalty: float  #: unreadable, a given cell, or a rule broken (not applied)
    correct: float  #: a legal digit equal to the solution's, into an empty cell (also a cell's total cap)
    legal: float  #: a legal digit that is not the solution's, into an empty cell
    rewrite_correct: float  #: overwriting an earlier placement with the solution's digit
    solved: float  #: added by the move that completes a correct grid


REWARD_SCHEMES = {"dense": Rewards(-0.1, 1.0, 0.5, 0.5, 10.0), "sparse": Rewards(0.0, 0.0, 0.0, 0.0, 1.0)}
OBSERVATION_FORMATS = ("grid", "text", "text_with_coordinates", "board")
CANDIDATES_BELOW = 10  #: list every empty cell's legal digits once at most this many cells are empty


@attrs.frozen(kw_only=True)
class SudokuConfig(EnvConfig):
    """Sudoku settings: grid size, difficulty (holes), generator effort, step limit, conflict handling."""

    size: int = option(4, "Side of the grid: 4 (2x2 boxes) or 9 (3x3 boxes).")
    difficulty: str = option(
        "easy", "'easy', 'medium' or 'hard': 6/8/9 holes on 4x4, 32/40/48 on 9x9 (RAGEN's 40/50/60 % of 81)."
    )
    holes: int | None = option(None, "Empty cells to dig; None = from `difficulty`.")
    max_fills: int = option(
        20, "Full grids the generator digs before accepting the most holes it reached (reported as info.holes)."
    )
    max_steps: int | None = option(
        None, "Moves after which the env truncates the episode; None = max_actions_per_episode."
    )
    apply_conflicts: bool = option(
        False, "Write rule-breaking digits on the board (shown *d*) instead of rejecting them (RAGEN: rejected). "
        "Either way they earn the penalty."
    )
    reward_scheme: str = option(
        "dense", "'dense' (RAGEN SimpleSudoku: -0.1 / +1.0 / +0.5 per move, +10 on completion) or 'sparse' (RAGEN "
        "SudokuEnv: 1.0 for completing the grid, else 0).",
        validator=attrs.validators.in_(tuple(REWARD_SCHEMES)),
    )
    observation_format: str = option(
        "grid", "'grid' (grid + feedback lines) or RAGEN's render modes 'text', 'text_with_coordinates', 'board'.",
        validator=attrs.validators.in_(OBSERVATION_FORMATS),
    )

    def __attrs_post_init__(self) -> None:
        if self.size not in BOX_SHAPES:
            raise ConfigError(f"size: expected one of {', '.join(map(str, BOX_SHAPES))}, got {self.size}")
        if self.difficulty not in HOLES[self.size]:
            raise ConfigError(f"difficulty: expected one of {', '.join(HOLES[self.size])}, got {self.difficulty!r}")
        if self.holes is not None and not 1 <= self.holes < self.size * self.size:
            raise ConfigError(f"holes: must be in 1..{self.size * self.size - 1} or None, got {self.holes}")
        if self.max_fills < 1:
            raise ConfigError(f"max_fills: must be >= 1, got {self.max_fills}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ConfigError(f"max_steps: must be >= 1 or None, got {self.max_steps}")
        super().__attrs_post_init__()

    @property
    def target_holes(self) -> int:
        return self.holes if self.holes is not None else HOLES[self.size][self.difficulty]

    @property
    def step_limit(self) -> int:
        return self.max_steps if self.max_steps is not None else self.max_actions_per_episode

    def required_actions(self) -> int:
        """One placement per hole (FIX: RAGEN's 9x9 config allows 10 placements for 32 holes)."""
        return self.target_holes

    def check_budget(self) -> None:
        super().check_budget()
        if self.step_limit < self.target_holes and not self.allow_unreachable:
            raise ConfigError(
                f"max_steps: a solved episode needs >= {self.target_holes} moves but the env truncates after "
                f"{self.step_limit}; raise it or set allow_unreachable=true"
            )


# ---- rendering ----------------------------------------------------------------------------------------------------
def render_grid(board: list[int], fixed: list[bool], conflicted: set[int] | frozenset[int] = frozenset()) -> str:
    """3 characters a cell (``[d]`` given, `` d `` placed, ``*d*`` placed and conflicting, `` . `` empty), box borders,
    1-indexed row labels and column header."""
    geo = geometry(round(len(board) ** 0.5))
    n, br, bc = geo.size, geo.box_rows, geo.box_cols
    header = "  " + "".join((" " if c and c % bc == 0 else "") + f" {c + 1} " for c in range(n))
    rule = "  " + "+".join("-" * (3 * bc) for _ in range(n // bc))
    lines = [header]
    for r in range(n):
        if r and r % br == 0:
            lines.append(rule)
        cells = []
        for c in range(n):
            i = geo.index(r, c)
            v = board[i]
            cell = " . " if not v else f"[{v}]" if fixed[i] else f"*{v}*" if i in conflicted else f" {v} "
            cells.append(("|" if c and c % bc == 0 else "") + cell)
        lines.append(f"{r + 1} " + "".join(cells))
    return "\n".join(lines)


def ragen_text(board: list[int]) -> str:
    """RAGEN's ``text`` render: ``"| "`` then each cell's digit or ``.`` and a space, row after row on one line."""
    n = round(len(board) ** 0.5)
    return "".join("| " + "".join(f"{v or '.'} " for v in board[r * n : (r + 1) * n]) for r in range(n))


def empty_positions_line(board: list[int]) -> str:
    """What RAGEN's ``text_with_coordinates`` adds to ``text``: the empty cells as 1-indexed (row,col) pairs."""
    n = round(len(board) ** 0.5)
    empty = [f"({i // n + 1},{i % n + 1})" for i, v in enumerate(board) if not v]
    if not empty:
        return "\nNo empty positions found (board might be complete)."
    if len(empty) == 1:
        return f"\nEmpty position to be filled is at {empty[0]}."
    return f"\nEmpty positions to be filled are at {', '.join(empty)}."


def ragen_board(board: list[int], steps: int, cfg: SudokuConfig) -> str:
    """RAGEN's boxed render: a title, dashed lines around and between box rows, ``| `` between boxes, then the step
    count and the difficulty."""
    geo = geometry(cfg.size)
    n = geo.size
    line = "-" * (n * 2 + (n // geo.box_cols - 1) * 2 + 5)
    out = [f"Sudoku Board ({n}x{n}):", line]
    for r in range(n):
        if r and r % geo.box_rows == 0:
            out.append(line)
        cells = "".join(("| " if c and c % geo.box_cols == 0 else "") + f"{board[r * n + c] or '.'} " for c in range(n))
        out.append(f"| {cells}|")
    out += [line, f"Step: {steps}/{cfg.step_limit}", f"Difficulty: {cfg.difficulty}", ""]
    return "\n".join(out)


def _cell_name(i: int, size: int) -> str:
    return f"r{i // size + 1}c{i % size + 1}"


def _digits(ds: list[int]) -> str:
    return ",".join(map(str, ds)) if ds else "none"


class SolutionExpert(Expert):
    """Places the solution's digits (oracle access to the generated solution), ``place N at row R col C``."""

    def moves(self, env: SudokuEnv, k: int) -> list[Move]:
        if k < 1 or not env.is_running:
            return []
        return plan(env.board, env.fixed, env.puzzle.solution, k)

    def next_actions(self, env: SudokuEnv, k: int) -> list[str]:
        return [f"place {m.digit} at row {m.row + 1} col {m.col + 1}" for m in self.moves(env, k)]

    def rationale(self, env: SudokuEnv) -> str:
        return explain(env.board, self.moves(env, env.config.max_actions_per_turn))


class SudokuEnv(Env):
    """Fill a generated Sudoku (unique solution) one placement per action (RAGEN SimpleSudoku)."""

    config_cls = SudokuConfig
    reset_options = ("task_index",)
    name = "sudoku-4x4"
    config: SudokuConfig

    def __init__(self, config: SudokuConfig | None = None, render_mode: str | None = "ansi"):
        super().__init__(config, render_mode)
        cfg = self.config
        self.symbol_legend = self._legend(cfg)
        self.instructions = self._instructions(cfg)
        self.expert = SolutionExpert()
        self.puzzle: Puzzle | None = None
        self.board: list[int] = []
        self.fixed: list[bool] = []  #: given cells
        self.earned: list[float] = []  #: reward each cell has earned so far (capped at rewards.correct)
        self.rewards = REWARD_SCHEMES[cfg.reward_scheme]
        self.steps = 0
        self.solved = False

    # ---- text from the live config ------------------------------------------------------------------------------
    @staticmethod
    def _legend(cfg: SudokuConfig) -> dict[str, str]:
        if cfg.observation_format != "grid":  # RAGEN's renders do not tell given digits from placed ones
            return {"d": "digit (given or placed)", ".": "empty cell"}
        legend = {"[d]": "given digit (cannot be changed)", "d": "digit you placed"}
        if cfg.apply_conflicts:  # only then can a rule-breaking digit stand on the board
            legend["*d*"] = "placed digit that breaks a rule"
        legend["."] = "empty cell"
        return legend

    @staticmethod
    def _instructions(cfg: SudokuConfig) -> str:
        n = cfg.size
        br, bc = BOX_SHAPES[n]
        # example moves valid for this size: (digit, row, col) and a second placement as (row, col, digit)
        (digit, row, col), second = ((5, 2, 3), "7,8,1") if n >= 9 else ((3, 2, 4), "3,1,2")
        boxes = {"grid": " (separated by | and - lines)", "board": " (separated by | and - lines)"}.get(
            cfg.observation_format, "")
        feedback = (" A move that breaks a rule is not applied; the feedback names the conflict and the legal digits."
                    if cfg.observation_format == "grid" else " A move that breaks a rule is not applied.")
        return (
            f"You are solving a {n}x{n} Sudoku puzzle. Fill every empty cell with a digit from 1 to {n} so that each "
            f"row, each column and each of the {n} {br}x{bc} boxes{boxes} contains every digit "
            f"from 1 to {n} exactly once. Given digits cannot be changed. Rows and columns are numbered 1 to {n} from "
            f"the top-left. Place a digit with <answer>place {digit} at row {row} col {col}</answer> or "
            f"<answer>{row},{col},{digit}</answer> (row, column, digit); join several placements with ||, e.g. "
            f"<answer>place {digit} at row {row} col {col} || {second}</answer>.{feedback}"
        )

    # ---- state the expert and tests read ------------------------------------------------------------------------
    @property
    def is_running(self) -> bool:
        return self.puzzle is not None and not self._done and not self.solved

    def _require(self) -> Puzzle:
        if self.puzzle is None:
            raise RuntimeError(f"{self.name}: call reset() first")
        return self.puzzle

    # ---- the contract -------------------------------------------------------------------------------------------
    def _reset(self, seed: int, options: dict) -> tuple[str, dict]:
        options.pop("task_index", None)  # procedural: the seed alone picks the puzzle
        cfg = self.config
        self.puzzle = generate_puzzle(cfg.size, cfg.target_holes, seed, cfg.max_fills)
        self.board = list(self.puzzle.givens)
        self.fixed = [v != 0 for v in self.board]
        self.earned = [0.0] * len(self.board)
        self.steps, self.solved = 0, False
        self.task_id = f"sudoku/{cfg.size}x{cfg.size}/h{cfg.target_holes}/s{seed}"
        return self._render(None), {"holes": self.puzzle.holes}

    def _step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        puzzle = self._require()
        self.steps += 1
        reward, feedback, valid, effective, conflict = self._apply(action)
        self.solved = is_solved(self.board)
        if self.solved:
            reward += self.rewards.solved
            feedback += f", puzzle solved (+{self.rewards.solved})"
        truncated = self.steps >= self.config.step_limit and not self.solved
        info = {
            "success": self.solved,
            "action_is_valid": valid,
            "action_is_effective": effective,
            "conflict": conflict,
            "solved_fraction": self._correct_placements() / max(puzzle.holes, 1),
        }
        return self._render(f"{action} -> {feedback}"), reward, self.solved, truncated, info

    def _apply(self, action: str) -> tuple[float, str, bool, bool, bool]:
        """Execute one move: ``(reward, feedback, valid, effective, conflict)``."""
        size, penalty = self.puzzle.size, self.rewards.penalty
        move = parse_move(action, size)
        if move is None:
            return penalty, (
                f"invalid format ({penalty}): write place N at row R col C or R,C,N with R, C, N from 1 to {size}"
            ), False, False, False
        i = move.row * size + move.col
        if self.fixed[i]:
            return penalty, f"cannot change a given cell ({penalty})", False, False, False
        units = clashes(self.board, i, move.digit)
        if units:
            legal = _digits(candidates(self.board, i))
            applied = self.config.apply_conflicts and self.board[i] != move.digit
            if applied:
                self.board[i] = move.digit
            note = ", written anyway" if applied else ""
            return penalty, (
                f"conflict: {move.digit} already in {' and '.join(units)} ({penalty}{note}), legal digits: {legal}"
            ), False, applied, True
        previous = self.board[i]
        correct = move.digit == self.puzzle.solution[i]
        if previous == move.digit:
            return (
                0.0,
                f"no change: {move.digit} is already at row {move.row + 1} col {move.col + 1} (+0.0)",
                True,
                False,
                False,
            )
        rw = self.rewards
        base = (rw.correct if correct else rw.legal) if previous == 0 else (rw.rewrite_correct if correct else 0.0)
        reward = min(base, rw.correct - self.earned[i])  # one cell earns at most rw.correct in total
        self.earned[i] += reward
        self.board[i] = move.digit
        text = "correct" if correct else "valid but not the solution"
        return reward, f"{text} (+{reward})", True, True, False

    def _correct_placements(self) -> int:
        return sum(1 for i, v in enumerate(self.board) if not self.fixed[i] and v == self.puzzle.solution[i])

    def _render(self, last_action: str | None) -> str:
        fmt = self.config.observation_format
        if fmt == "grid":
            return self._render_grid(last_action)
        text = ragen_text(self.board) if fmt != "board" else ragen_board(self.board, self.steps, self.config)
        if fmt == "text_with_coordinates":
            text += empty_positions_line(self.board)
        return text

    def _render_grid(self, last_action: str | None) -> str:
        size, board = self.puzzle.size, self.board
        pairs = conflicting_pairs(board)
        conflicted = {k for i, j, _ in pairs for k in (i, j) if not self.fixed[k]}
        lines = [render_grid(board, self.fixed, conflicted)]
        if last_action is not None:
            lines.append(f"Last action: {last_action}")
        if pairs:
            lines.append("Conflicts: " + "; ".join(
                f"{_cell_name(i, size)} and {_cell_name(j, size)} both hold {board[i]} ({unit})" for i, j, unit in pairs
            ))
        empty = [i for i, v in enumerate(board) if not v]
        if 0 < len(empty) <= CANDIDATES_BELOW:
            lines.append(
                "Candidates: " + "; ".join(f"{_cell_name(i, size)}: {_digits(candidates(board, i))}" for i in empty)
            )
        given = sum(self.fixed)
        filled = size * size - len(empty)
        lines.append(
            f"Progress: {filled}/{size * size} cells filled ({given} given, {filled - given} placed). "
            f"Steps: {self.steps}/{self.config.step_limit}."
        )
        return "\n".join(lines)

    def _close(self) -> None:
        self.puzzle = None
