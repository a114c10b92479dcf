"""ragen-sokoban: the dense reward cannot be farmed.

Sokoban's only dense reward is gym-sokoban's box-on-target shaping: +1 when a push puts a box on a target, -1 when a
push takes one off, -0.1 every move. It is a potential (the number of boxes on targets), so pushing a box on and off
a target nets -0.2 per cycle and no sequence of moves can earn more than one +1 per box that ends on a target. These
tests check that with an exact search: the best return of ANY move sequence that leaves the level unsolved, over the
episode budget (and over 30 moves on a level built for cycling), stays below the expert's solving return.
"""

from __future__ import annotations

import math

import pytest

import ragen

MOVES = ("Up", "Down", "Left", "Right")
CODE = {"#": 0, "_": 1, "O": 2, "√": 3, "X": 4, "P": 5, "S": 6}


def room(text: str) -> list[list[int]]:
    return [[CODE[ch] for ch in line] for line in text.strip().splitlines()]


def best_unsolved_return(env, budget: int) -> tuple[float, tuple[str, ...]]:
    """The best return (and a sequence earning it) of 1..``budget`` moves from the env's state that never solve the
    level: dynamic programming over (player, boxes), each move played by the env's own step."""
    start = (env.player, env.boxes)
    frontier: dict[tuple, tuple[float, tuple[str, ...]]] = {start: (0.0, ())}
    best = (-math.inf, ())
    for _ in range(budget):
        nxt: dict[tuple, tuple[float, tuple[str, ...]]] = {}
        for (player, boxes), (ret, seq) in frontier.items():
            for move in MOVES:
                env.player, env.boxes, env.steps = player, boxes, 0
                _, reward, solved, _, _ = env._step(move)
                if solved:
                    continue
                key, value = (env.player, env.boxes), ret + reward
                if key not in nxt or value > nxt[key][0]:
                    nxt[key] = (value, (*seq, move))
        frontier = nxt
        best = max(best, max(frontier.values()), key=lambda b: b[0])
    env.player, env.boxes, env.steps = start[0], start[1], 0
    return best


def expert_return(env, seed: int) -> float:
    env.reset(seed=seed)
    total, done, k = 0.0, False, 0
    while not done:
        moves = env.expert.next_actions(env, 1)
        assert moves, "the expert has a plan"
        _, reward, terminated, truncated, info = env.step(moves[0])
        total, done, k = total + reward, terminated or truncated, k + 1
    assert info["success"]
    return total


@pytest.mark.parametrize("name", ["sokoban", "sokoban-large"])
def test_no_move_sequence_within_the_budget_out_earns_the_expert(name):
    env = ragen.make_env(name)
    budget = env.config.max_actions_per_episode
    farms = []
    for seed in range(12):
        expert = expert_return(env, seed)
        env.reset(seed=seed)
        farm, seq = best_unsolved_return(env, budget)
        farms.append((round(farm, 1), round(expert, 1)))
        assert farm < expert, (name, seed, farm, seq, expert)
        # the shaping is a potential: unsolved, at most every box but one ends on a target
        assert farm <= env.config.num_boxes - 1 - 0.1 + 1e-9, (seed, farm, seq)
    print(f"{name}: (best unsolved return, expert return) per seed {farms}")


def test_thirty_moves_of_cycling_a_box_over_a_target_earn_at_most_one_point():
    """A room where a box can be pushed on and off a target from both sides forever: the best unsolved 30-move
    return is one push onto a target, less the moves; the solved room earns about +20."""
    env = ragen.make_env("sokoban-grid", max_actions_per_episode=30, max_turns=15, max_steps=200)
    env.reset(seed=0)
    env.load_room(room("""
#######
#_____#
#_XO__#
#P____#
#__XO_#
#######
"""))
    farm, seq = best_unsolved_return(env, 30)
    assert farm == pytest.approx(1.0 - 0.1 * 2)  # Right (onto the target) after reaching the box: 2 moves
    # the red-team cycle: on, off, walk round, on, off... earns nothing more than its first +1
    env.reset(seed=0)
    env.load_room(room("""
#######
#_____#
#_XO__#
#P____#
#__XO_#
#######
"""))
    cycle = ["Up", "Right",  # onto the target: +1
             "Right", "Up", "Right", "Right", "Down", "Left",  # off (-1), round the box, back on (+1)
             "Left", "Up", "Left", "Left", "Down", "Right"]  # off (-1), round, on again (+1)
    rewards = [env.step(move)[1] for move in cycle]
    assert [r for r in rewards if abs(r) > 0.5] == pytest.approx([0.9, -1.1, 0.9, -1.1, 0.9])
    assert sum(rewards) == pytest.approx(1.0 - 0.1 * len(cycle))
    solved = ragen.make_env("sokoban-grid", max_actions_per_episode=30, max_turns=15)
    solved.reset(seed=0)
    solved.load_room(room("""
#######
#_____#
#_XO__#
#P____#
#__XO_#
#######
"""))
    plan = ["Up", "Right", "Down", "Down", "Right"]  # box 1 onto its target, then box 2
    rewards = [solved.step(move)[1] for move in plan]
    assert sum(rewards) == pytest.approx(12 - 0.5) and farm < sum(rewards)
