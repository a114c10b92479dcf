"""ragen-sudoku: the dense reward cannot be farmed.

The dense scheme pays +1.0 for the solution's digit in an empty cell, +0.5 for a legal other digit, +0.5 for
overwriting to the solution's digit, 0 for other overwrites and repeats, -0.1 for a rule broken; and one cell earns
at most +1.0 in all. So an unsolved episode earns at most one point per hole, while solving earns every hole's point
and +10. These tests play the red-team sequences (wrong/right overwrite cycles on one cell, repeats, conflicts,
legal-but-wrong fills, "everything right but one cell") for the variants' budgets and for 30 turns, and a random
adversary of many episodes, and check each against the expert's return.
"""

from __future__ import annotations

import random

import pytest
from ragen_sudoku.grid import candidates

import ragen


def expert_return(env, seed: int) -> float:
    env.reset(seed=seed)
    total = 0.0
    while env.is_running:
        (action,) = env.expert.next_actions(env, 1)
        total += env.step(action)[1]
    assert env.solved
    return total


def move(env, cell: int, digit: int) -> str:
    r, c = divmod(cell, env.puzzle.size)
    return f"{r + 1},{c + 1},{digit}"


def play(env, seed: int, policy) -> tuple[float, bool]:
    """(return, solved) of one episode of ``policy(env) -> action`` within the env's step budget."""
    env.reset(seed=seed)
    total = 0.0
    while env.is_running and env.steps < env.config.step_limit:
        total += env.step(policy(env))[1]
    return total, env.solved


def cycling(env) -> str:
    """Overwrite one hole forever: a legal wrong digit, the solution's, another wrong one, the solution's..."""
    cell = next(i for i, fixed in enumerate(env.fixed) if not fixed)
    right = env.puzzle.solution[cell]
    legal = [d for d in candidates(env.board, cell) if d != right and d != env.board[cell]]
    return move(env, cell, legal[0] if legal and env.board[cell] == right else right if env.board[cell] != right
                else next(d for d in range(1, env.puzzle.size + 1) if d != right))


def repeat(env) -> str:
    """The same correct digit again and again (after the first, no change: 0)."""
    cell = next(i for i, fixed in enumerate(env.fixed) if not fixed)
    return move(env, cell, env.puzzle.solution[cell])


def wrong_then_right_but_one(env) -> str:
    """Every hole: a legal wrong digit first (+0.5), then the solution's (+0.5): the full point per cell; the last
    hole is left empty and its row's first hole is overwritten wrong where possible, so the grid stays unsolved."""
    holes = [i for i, fixed in enumerate(env.fixed) if not fixed]
    for cell in holes[:-1]:
        right = env.puzzle.solution[cell]
        if env.board[cell] == 0:
            wrong = [d for d in candidates(env.board, cell) if d != right]
            return move(env, cell, wrong[0] if wrong else right)
        if env.board[cell] != right and env.earned[cell] < 1.0:
            return move(env, cell, right)
    for cell in holes[:-1]:  # all earned: keep rewriting a cell to a legal wrong digit, then back (0 each)
        wrong = [d for d in candidates(env.board, cell) if d != env.puzzle.solution[cell] and d != env.board[cell]]
        if wrong:
            return move(env, cell, wrong[0])
    return move(env, holes[0], env.puzzle.solution[holes[0]])


def conflicts(env) -> str:
    """A digit its row already holds, into a hole (-0.1; written anyway with apply_conflicts)."""
    n = env.puzzle.size
    for cell in (i for i, fixed in enumerate(env.fixed) if not fixed):
        r, c = divmod(cell, n)
        seen = {env.board[r * n + j] for j in range(n) if j != c} | {env.board[j * n + c] for j in range(n) if j != r}
        clashing = sorted(seen - {0, env.board[cell]})
        if clashing:
            return move(env, cell, clashing[0])
    return "place 1 at row 1 col 1"


FARMS = {"cycling": cycling, "repeat": repeat, "wrong then right, one left": wrong_then_right_but_one,
         "conflicts": conflicts}
CONFIGS = {
    "sudoku-4x4": {},
    "sudoku-9x9": {},
    "sudoku-4x4, 30 turns": {"max_turns": 30, "max_actions_per_episode": 90},
    "sudoku-4x4, conflicts written": {"apply_conflicts": True, "max_turns": 30, "max_actions_per_episode": 90},
}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_farming_sequences_score_below_the_expert(config):
    env = ragen.make_env(config.split(",")[0], **CONFIGS[config])
    table = []
    for seed in range(4):
        expert = expert_return(env, seed)
        for name, policy in FARMS.items():
            score, solved = play(env, seed, policy)
            if solved:
                continue  # a policy that solves is not farming (only "cycling" on a one-hole puzzle could)
            table.append((seed, name, round(score, 1), round(expert, 1)))
            assert score < expert, (config, seed, name, score, expert)
            assert score <= env.puzzle.holes * env.rewards.correct + 1e-9, (config, seed, name, score)
    print(config, table)


@pytest.mark.parametrize("config", ["sudoku-4x4", "sudoku-4x4, 30 turns", "sudoku-4x4, conflicts written"])
def test_a_random_adversary_never_out_earns_the_expert_unsolved(config):
    """2,000 episodes of random moves, biased towards holes and the solution's digits so that many come close to
    solving: no unsolved one earns more than one point per hole, and none reaches the expert's return."""
    env = ragen.make_env(config.split(",")[0], **CONFIGS[config])
    rng = random.Random(26)
    n = env.config.size
    best = {}
    for episode in range(2_000):
        seed = episode % 8
        if seed not in best:
            best[seed] = [None, expert_return(env, seed)]

        def policy(env):
            holes = [i for i, fixed in enumerate(env.fixed) if not fixed]
            cell = rng.choice(holes) if rng.random() < 0.9 else rng.randrange(n * n)
            digit = env.puzzle.solution[cell] if rng.random() < 0.5 else rng.randint(1, n)
            return move(env, cell, digit)

        score, solved = play(env, seed, policy)
        if not solved:
            assert score <= env.puzzle.holes * env.rewards.correct + 1e-9
            best[seed][0] = score if best[seed][0] is None else max(best[seed][0], score)
    print(config, "(best unsolved, expert) per seed:",
          {seed: (None if b is None else round(b, 1), round(e, 1)) for seed, (b, e) in best.items()})
    assert all(b < e for b, e in best.values() if b is not None)
