"""The Sudoku solver side of the expert, pure functions of the board: the next placements of the puzzle's (unique)
solution into the cells that still need it, row-major, and the reasoning behind them. ``SolutionExpert``
(``ragen_sudoku.env``) feeds it the env's live board."""

from __future__ import annotations

from ragen_sudoku.grid import candidates, clashes
from ragen_sudoku.moves import Move


def plan(board: list[int], fixed: list[bool], solution: tuple[int, ...], k: int) -> list[Move]:
    """Up to ``k`` placements that the rules accept one after the other, each writing a solution digit.

    From a board holding only correct digits this is simply the next empty cells row-major. After wrong
    placements, a cell whose solution digit is blocked by a wrong digit elsewhere is skipped until that wrong
    digit has been overwritten; ``[]`` when nothing can be placed (there is no erase action, so two wrong digits
    blocking each other can make a board unsolvable).
    """
    size = round(len(board) ** 0.5)
    work = list(board)
    out: list[Move] = []
    while len(out) < k:
        for i, want in enumerate(solution):
            if not fixed[i] and work[i] != want and not clashes(work, i, want):
                work[i] = want
                out.append(Move(i // size, i % size, want))
                break
        else:
            break
    return out


def explain(board: list[int], moves: list[Move]) -> str:
    """Why each of ``moves``, applied in order from ``board``, writes its digit: the only legal one, or the one of
    the legal digits that completes the grid."""
    if not moves:
        return "No placement can be made."
    size = round(len(board) ** 0.5)
    work, parts = list(board), []
    for m in moves:
        cell = m.row * size + m.col
        legal = candidates(work, cell)
        where = f"Row {m.row + 1}, column {m.col + 1}"
        if legal == [m.digit]:
            parts.append(f"{where} can only be {m.digit}: its row, column and box hold every other digit.")
        else:
            options = ", ".join(map(str, legal))
            parts.append(f"{where} could be {options}; the only choice that completes the grid is {m.digit}.")
        work[cell] = m.digit
    return " ".join(parts)
