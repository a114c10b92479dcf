"""Sokoban: generator, solver, dynamics, rewards, observations, variants, Boxoban files, contract checks."""

from pathlib import Path

import gymnasium.utils.env_checker
import pytest

import ragen
from ragen.checker import check_env
from ragen_sokoban.boxoban import load_levels
from ragen_sokoban.generator import generate
from ragen_sokoban.solver import Board, solve

BOXOBAN = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "boxoban"
SYMBOLS = "#_O√XPS"


def expected_return(env, moves):
    """RAGEN's reward for a move sequence, computed independently of step(): -0.1 a move, ±1 box on/off, +10 solved."""
    board = env.board
    player, boxes, total = env.player, set(env.boxes), 0.0
    for name in moves:
        d = board.step[name]
        total -= 0.1
        nxt = player + d
        if nxt in boxes:
            boxes.remove(nxt)
            boxes.add(nxt + d)
            total += (nxt + d in board.targets) - (nxt in board.targets)
        player = nxt
    return total + 10.0 * (boxes <= board.targets)


def test_thousand_levels_solvable_and_replay_gives_ragen_reward():
    env = ragen.make_env("sokoban")
    for seed in range(1000):
        obs, info = env.reset(seed=10_000 + seed)
        solution = solve(env.board, env.player, frozenset(env.boxes))
        assert solution is not None and solution[0] == info["optimal_pushes"] >= 1
        moves = solution[1]
        assert len(moves) <= env.config.max_actions_per_episode  # reject_over_budget
        want = expected_return(env, moves)
        got, done = 0.0, False
        for i, m in enumerate(moves):
            _, r, done, trunc, step_info = env.step(m)
            got += r
            assert done == (i == len(moves) - 1) and not trunc
        assert done and step_info["success"] and got == pytest.approx(want)


def test_spec_example_level_scores_10_7():
    env = ragen.make_env("sokoban")
    env.reset(seed=0)
    room = [[0] * 6, [0, 2, 0, 0, 0, 0], [0, 1, 1, 0, 0, 0], [0, 4, 1, 0, 0, 0], [0, 1, 5, 1, 0, 0], [0] * 6]
    env.board, env.boxes, env.player, env.steps = Board(room), {3 * 6 + 1}, 4 * 6 + 2, 0
    assert env._observation() == (
        "Coordinates: \nBoard size: 6 rows x 6 cols (zero-indexed).\nTargets: (1, 1)\nBoxes: (3, 1)\nPlayer: (4, 2)\n"
        "Grid Map: \n######\n#O####\n#__###\n#X_###\n#_P_##\n######"
    )
    total = sum(env.step(a)[1] for a in ("Left", "Up", "Up"))
    assert total == pytest.approx(10.7)
    assert env._observation().splitlines()[2] == "Boxes on target: (1, 1)"


def wall_move(env):
    """Reset to the first seed whose player stands next to a wall; return the move into it."""
    for seed in range(100):
        env.reset(seed=seed)
        for n in ("Up", "Down", "Left", "Right"):
            if env.player + env.board.step[n] not in env.board.floor:
                return n
    raise AssertionError("no level with the player next to a wall")


def test_blocked_move_is_valid_not_effective_and_unknown_text_is_invalid():
    env = ragen.make_env("sokoban-grid")
    move = wall_move(env)
    obs = env.render()
    o, r, term, trunc, info = env.step(move)
    assert o == obs and r == pytest.approx(-0.1) and info["action_is_valid"] and not info["action_is_effective"]
    o, r, term, trunc, info = env.step("teleport")
    assert o == obs and r == 0.0 and not info["action_is_valid"]


def test_truncated_at_max_steps():
    env = ragen.make_env("sokoban", max_steps=3)
    move = wall_move(env)
    results = [env.step("Nope") for _ in range(2)]  # invalid text does not count as a step
    assert not any(r[3] for r in results)
    outs = [env.step(move) for _ in range(3)]
    assert [o[3] for o in outs] == [False, False, True]


def test_same_seed_same_level_and_levels_vary():
    a, b = ragen.make_env("sokoban"), ragen.make_env("sokoban")
    assert a.reset(seed=7)[0] == b.reset(seed=7)[0]
    assert len({a.reset(seed=s)[0] for s in range(20)}) > 15
    assert a.reset(seed=7, options={"rollout_index": 3})[0] == b.reset(seed=7)[0]


def test_large_variant_two_boxes():
    env = ragen.make_env("sokoban-large")
    obs, _ = env.reset(seed=3)
    grid = obs.split("Grid Map: \n")[1].splitlines()
    assert len(grid) == 8 and all(len(row) == 8 for row in grid)
    assert len(env.boxes) == 2 and len(env.board.targets) == 2


def test_vocab_variant_legend_matches_symbols():
    env = ragen.make_env("sokoban-vocab")
    obs, _ = env.reset(seed=4)
    assert set(obs) - {"\n"} <= set(env.symbol_legend)
    assert env.symbol_legend == {"W": "wall", ".": "empty", "G": "target", "C": "box on target", "B": "box", "A": "player",
                                 "@": "player on target"}
    from ragen.prompt import system_prompt

    assert "W: wall, .: empty, G: target" in system_prompt(env) and "#: wall" not in system_prompt(env)


def test_coord_walls_and_instructions_use_real_size():
    env = ragen.make_env("sokoban-large", coord_walls=True, observation_format="coord")
    obs, _ = env.reset(seed=5)
    assert obs.startswith("Board size: 8 rows x 8 cols (zero-indexed).") and "\nWalls: " in obs
    assert "(7, 7) bottom-right" in env.instructions and env.symbol_legend is None


def test_generator_is_fast_and_deterministic():
    a = generate(123, 6, 6, 1, 300, max_moves=10)
    assert a == generate(123, 6, 6, 1, 300, max_moves=10)


def test_budget_validator():
    with pytest.raises(ragen.ConfigError, match="allow_unreachable"):
        ragen.make_env("sokoban", min_pushes=3, max_turns=1, max_actions_per_turn=2)
    with pytest.raises(ragen.ConfigError, match="grid_vocab"):
        ragen.make_env("sokoban", grid_vocab=["a", "b"])


def test_boxoban_needs_files():
    with pytest.raises(ragen.ConfigError, match="boxoban_files"):
        ragen.make_env("sokoban-boxoban")


@pytest.mark.skipif(not BOXOBAN.is_dir(), reason="shared Boxoban data not present")
def test_boxoban_levels_load_and_expert_solves():
    levels = load_levels((str(BOXOBAN / "hard_000.txt"),))
    assert len(levels) == 1000 and all(len(lv) == 10 and len(lv[0]) == 10 for lv in levels)
    env = ragen.make_env("sokoban-boxoban", boxoban_files=[str(BOXOBAN / "medium_valid_000.txt")])
    obs, info = env.reset(seed=0)
    assert info["task_id"] == "sokoban/boxoban/0" and len(env.boxes) == 4
    assert obs.count("X") + obs.count("√") == 4
    solved = 0
    for seed in range(3):
        env.reset(seed=seed)
        for _ in range(env.config.max_steps):
            plan = env.expert.next_actions(env, 5)
            if not plan:
                break
            for a in plan:
                _, _, term, trunc, _ = env.step(a)
                if term or trunc:
                    break
            if term or trunc:
                break
        solved += bool(env._solved())
    assert solved >= 2


@pytest.mark.parametrize("name", ["sokoban", "sokoban-grid", "sokoban-large", "sokoban-vocab"])
def test_contract(name):
    failed = [c for c in check_env(name) if not c.ok]
    assert not failed, failed


@pytest.mark.parametrize("name", ["sokoban", "sokoban-large", "sokoban-vocab"])
@pytest.mark.filterwarnings("ignore:.*alternative render modes")
def test_gymnasium_checker(name):
    gymnasium.utils.env_checker.check_env(ragen.make_env(name))
