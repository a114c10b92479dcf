"""ragen-sudoku: Sudoku with unique-solution puzzles (RAGEN SimpleSudoku), registered through ragen's env hook."""

from ragen import hookimpl, register_variants
from ragen_sudoku.env import SolutionExpert, SudokuConfig, SudokuEnv
from ragen_sudoku.generator import HOLES, Puzzle, generate_puzzle

__all__ = [
    "HOLES",
    "Puzzle",
    "SolutionExpert",
    "SudokuConfig",
    "SudokuEnv",
    "VARIANTS",
    "generate_puzzle",
    "register_envs",
]

#: variant name -> (config defaults, one-line description). Budgets allow one placement per hole (spec 6 FIX).
VARIANTS = {
    "sudoku-4x4": (
        {"size": 4, "difficulty": "easy", "max_turns": 4, "max_actions_per_turn": 3, "max_actions_per_episode": 12,
         "max_tokens": 150},
        "Sudoku 4x4 (2x2 boxes), easy: 6 holes, unique solution; 4 turns x 3 moves",
    ),
    "sudoku-9x9": (
        {"size": 9, "difficulty": "easy", "max_turns": 10, "max_actions_per_turn": 5, "max_actions_per_episode": 50,
         "max_tokens": 200},
        "Sudoku 9x9 (3x3 boxes), easy: 32 holes, unique solution; 10 turns x 5 moves",
    ),
}


@hookimpl
def register_envs(register):
    register_variants(register, SudokuEnv, VARIANTS)
