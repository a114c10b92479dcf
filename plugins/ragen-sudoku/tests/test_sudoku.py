"""ragen-sudoku: unique-solution generator, move parser, reward table, renderer, budget validator, expert, contract."""

import random
import statistics
import time

import pytest
from ragen_sudoku.env import empty_positions_line, ragen_board, ragen_text, render_grid
from ragen_sudoku.generator import HOLES, generate_puzzle
from ragen_sudoku.grid import candidates, count_solutions
from ragen_sudoku.moves import Move, parse_move

import ragen
from ragen.envs.episode import Episode
from ragen.testing import env_contract_tests, run_two_steps

VARIANTS = ["sudoku-4x4", "sudoku-9x9"]

# ---- an independent reference: plain backtracking, first empty cell, digits by scanning ---------------------------
def _box(n):
    return (2, 2) if n == 4 else (3, 3)


def _allowed(grid, n, i, d):
    r, c = divmod(i, n)
    br, bc = _box(n)
    r0, c0 = r - r % br, c - c % bc
    for j in range(n):
        if grid[r * n + j] == d or grid[j * n + c] == d:
            return False
    return all(grid[(r0 + a) * n + c0 + b] != d for a in range(br) for b in range(bc))


def reference_count(givens, limit=2):
    """Solutions of ``givens`` (stopping at ``limit``), by the simplest possible search."""
    n = round(len(givens) ** 0.5)
    grid = list(givens)
    found = []

    def search():
        try:
            i = grid.index(0)
        except ValueError:
            found.append(tuple(grid))
            return len(found) >= limit
        for d in range(1, n + 1):
            if _allowed(grid, n, i, d):
                grid[i] = d
                if search():
                    return True
                grid[i] = 0
        return False

    search()
    return found


def valid_full_grid(grid):
    n = round(len(grid) ** 0.5)
    br, bc = _box(n)
    units = [[r * n + c for c in range(n)] for r in range(n)] + [[r * n + c for r in range(n)] for c in range(n)]
    units += [
        [(r0 + a) * n + c0 + b for a in range(br) for b in range(bc)]
        for r0 in range(0, n, br)
        for c0 in range(0, n, bc)
    ]
    return all(sorted(grid[i] for i in u) == list(range(1, n + 1)) for u in units)


def play_expert(env, seed):
    """An expert episode through the core's budget handling; returns the Episode and the summed env reward."""
    ep = Episode(env)
    ep.reset(seed=seed)
    total = 0.0
    while not ep.done:
        plan = env.expert.next_actions(env, env.config.max_actions_per_turn)
        total += ep.step_turn(" || ".join(plan) if plan else None).reward
    return ep, total


# ---- registration, config and the budget validator ----------------------------------------------------------------
def test_variants_registered_with_budget():
    listed = {c.name: c.dist for c in ragen.list_envs()}
    assert all(listed.get(name) == "ragen-sudoku" for name in VARIANTS)
    small, big = ragen.make_env("sudoku-4x4").config, ragen.make_env("sudoku-9x9").config
    assert (small.size, small.difficulty, small.target_holes) == (4, "easy", 6)
    assert (small.max_turns, small.max_actions_per_turn, small.max_actions_per_episode, small.max_tokens) == (
        4,
        3,
        12,
        150,
    )
    assert (big.size, big.difficulty, big.target_holes) == (9, "easy", 32)
    assert (big.max_turns, big.max_actions_per_turn, big.max_actions_per_episode, big.max_tokens) == (10, 5, 50, 200)
    assert small.step_limit == 12 and big.step_limit == 50


@pytest.mark.parametrize(
    "options", [{"size": 5}, {"size": 16}, {"difficulty": "expert"}, {"holes": 0}, {"holes": 16}, {"max_fills": 0},
                {"max_steps": 0}]
)
def test_bad_config_is_a_config_error(options):
    with pytest.raises(ragen.ConfigError):
        ragen.make_env("sudoku-4x4", **options)


@pytest.mark.parametrize(
    "name, options",
    [
        ("sudoku-9x9", {"max_actions_per_episode": 10}),  # RAGEN's shipped budget: 10 placements for 32 holes
        ("sudoku-9x9", {"max_turns": 2}),  # 2 x 5 = 10 placements
        ("sudoku-9x9", {"difficulty": "hard", "max_actions_per_episode": 47}),
        ("sudoku-9x9", {"holes": 60}),
        ("sudoku-9x9", {"max_steps": 31}),
        ("sudoku-4x4", {"max_actions_per_episode": 5}),
        ("sudoku-4x4", {"max_actions_per_turn": 1}),  # 4 turns x 1 < 6 holes
    ],
)
def test_budget_too_small_to_solve_is_rejected(name, options):
    with pytest.raises(ragen.ConfigError, match="allow_unreachable"):
        ragen.make_env(name, **options)
    assert ragen.make_env(name, allow_unreachable=True, **options).config.allow_unreachable


def test_every_difficulty_fits_its_variant_budget():
    for name in VARIANTS:
        for difficulty in ("easy", "medium", "hard"):
            cfg = ragen.make_env(name, difficulty=difficulty).config
            assert cfg.max_actions_per_episode >= cfg.target_holes
            assert cfg.max_turns * cfg.max_actions_per_turn >= cfg.target_holes


# ---- generator ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("size, seeds", [(4, range(10_000, 10_100)), (9, range(10_000, 10_020))])
def test_generated_puzzles_have_exactly_one_solution(size, seeds):
    """Acceptance 4: 100 4x4 and 20 9x9 puzzles, each with exactly one solution (independent solver, stops at 2)."""
    env = ragen.make_env(f"sudoku-{size}x{size}")
    for seed in seeds:
        env.reset(seed=seed)
        puzzle = env.puzzle
        found = reference_count(puzzle.givens, limit=2)
        assert found == [puzzle.solution], seed
        assert valid_full_grid(puzzle.solution)
        assert puzzle.holes == env.config.target_holes
        assert all(g in (0, s) for g, s in zip(puzzle.givens, puzzle.solution))
    env.close()


@pytest.mark.parametrize("size", [4, 9])
def test_difficulties_dig_their_holes_and_stay_unique(size):
    for difficulty, holes in HOLES[size].items():
        for seed in range(5 if size == 9 else 30):
            p = generate_puzzle(size, holes, seed)
            assert p.holes == holes and len(reference_count(p.givens)) == 1, (difficulty, seed)


def test_generation_is_seeded_and_uses_no_global_rng():
    random.seed(1)
    a = generate_puzzle(9, 40, 77)
    random.seed(2)
    random.random()
    assert generate_puzzle(9, 40, 77) == a
    assert len({generate_puzzle(4, 6, s).givens for s in range(30)}) > 20
    assert len({generate_puzzle(9, 32, s).solution for s in range(10)}) == 10


def test_unreachable_target_accepts_the_most_holes_reached():
    # a 4x4 Sudoku needs at least 4 givens to be unique, so 15 holes cannot be dug
    p = generate_puzzle(4, 15, 3, max_fills=5)
    assert 8 <= p.holes <= 12 and len(reference_count(p.givens)) == 1
    env = ragen.make_env("sudoku-4x4", holes=15, max_fills=5, allow_unreachable=True)
    _, info = env.reset(seed=3)
    assert info["holes"] == p.holes and env.puzzle == p


def test_9x9_generation_is_fast():
    times = []
    for seed in range(20):
        t0 = time.perf_counter()
        generate_puzzle(9, HOLES[9]["hard"], seed)
        times.append(time.perf_counter() - t0)
    assert statistics.median(times) < 0.1 and max(times) < 0.5, times


def test_solver_counts_and_candidates():
    assert count_solutions([0] * 16, limit=5) == 5
    bad = [1, 1] + [0] * 14  # two 1s in row 1
    assert count_solutions(bad) == 0
    p = generate_puzzle(4, 6, 0)
    cell = p.givens.index(0)
    assert p.solution[cell] in candidates(list(p.givens), cell)


# ---- moves --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, move",
    [
        ("place 3 at row 2 col 4", Move(1, 3, 3)),
        ("Place 3 at Row 2, Column 4.", Move(1, 3, 3)),
        ("place 3 at (2,4)", Move(1, 3, 3)),
        ("place 3 at ( 2 , 4 )", Move(1, 3, 3)),
        ("place 3 at 2,4", Move(1, 3, 3)),
        ("3 at 2, 4", Move(1, 3, 3)),
        ("(2,4,3)", Move(1, 3, 3)),
        ("2,4,3", Move(1, 3, 3)),
        ("  2 , 4 , 3  ", Move(1, 3, 3)),
        ("1,1,1", Move(0, 0, 1)),
    ],
)
def test_action_formats(text, move):
    assert parse_move(text, 4) == move


@pytest.mark.parametrize(
    "text",
    [
        "",
        "place",
        "place 3",
        "place 3 at row 2",
        "2,4",
        "2,4,3,1",
        "5,1,1",
        "1,1,5",
        "0,1,1",
        "place 0 at row 1 col 1",
        "place 3 at row 5 col 1",
        "(2,4,3",
        "row 2 col 4 = 3",
        "put 3 at 2,4",
        "2;4;3",
        "place -1 at row 1 col 1",
        "٣,1,1",
    ],
)
def test_unreadable_or_out_of_range_moves(text):
    assert parse_move(text, 4) is None


def test_nine_by_nine_range():
    assert parse_move("9,9,9", 9) == Move(8, 8, 9)
    assert parse_move("place 9 at row 9 col 9", 4) is None
    assert parse_move("10,1,1", 9) is None


# ---- renderer -----------------------------------------------------------------------------------------------------
SPEC_GRID = """   1  2   3  4 
1 [1] . | . [4]
2  . [4]|[1] . 
  ------+------
3 [4] . | . [1]
4  . [1]|[4] . """


def test_render_matches_spec_example():
    board = [1, 0, 0, 4, 0, 4, 1, 0, 4, 0, 0, 1, 0, 1, 4, 0]
    assert render_grid(board, [v != 0 for v in board]) == SPEC_GRID
    board[1] = 2
    fixed = [v != 0 and i != 1 for i, v in enumerate(board)]
    assert render_grid(board, fixed).splitlines()[1] == "1 [1] 2 | . [4]"
    assert render_grid(board, fixed, {1}).splitlines()[1] == "1 [1]*2*| . [4]"


def test_render_9x9_layout():
    p = generate_puzzle(9, 32, 1)
    lines = render_grid(list(p.givens), [v != 0 for v in p.givens]).splitlines()
    assert lines[0] == "   1  2  3   4  5  6   7  8  9 "
    assert lines[4] == lines[8] == "  ---------+---------+---------"
    assert len(lines) == 12 and all(len(line) == len(lines[1]) for line in lines[1:] if not line.startswith("  -"))


def test_ragen_render_modes():
    board = [1, 0, 0, 4, 0, 4, 1, 0, 4, 0, 0, 1, 0, 1, 4, 0]
    assert ragen_text(board) == "| 1 . . 4 | . 4 1 . | 4 . . 1 | . 1 4 . "
    assert (
        empty_positions_line(board)
        == "\nEmpty positions to be filled are at (1,2), (1,3), (2,1), (2,4), (3,2), (3,3), (4,1), (4,4)."
    )
    assert empty_positions_line([1] * 15 + [0]) == "\nEmpty position to be filled is at (4,4)."
    assert empty_positions_line([1] * 16) == "\nNo empty positions found (board might be complete)."
    cfg = ragen.make_env("sudoku-4x4").config
    assert ragen_board(board, 3, cfg) == (
        "Sudoku Board (4x4):\n---------------\n| 1 . | . 4 |\n| . 4 | 1 . |\n---------------\n| 4 . | . 1 |\n"
        "| . 1 | 4 . |\n---------------\nStep: 3/12\nDifficulty: easy\n"
    )
    for fmt in ("text", "text_with_coordinates", "board"):
        env = ragen.make_env("sudoku-4x4", observation_format=fmt)
        obs, _ = env.reset(seed=5)
        assert ("Empty positions" in obs) == (fmt == "text_with_coordinates") and "Progress" not in obs
        assert (
            env.symbol_legend == {"d": "digit (given or placed)", ".": "empty cell"}
            and "feedback" not in env.instructions
        )
        obs = env.step(env.expert.next_actions(env, 1)[0])[0]
        assert "Last action" not in obs and (fmt != "board" or "Step: 1/12" in obs)
    with pytest.raises(ragen.ConfigError, match="observation_format"):
        ragen.make_env("sudoku-4x4", observation_format="ansi")


def test_sparse_reward_scheme():
    env = ragen.make_env("sudoku-4x4", reward_scheme="sparse")
    ep, total = play_expert(env, 10000)
    assert ep.success and total == 1.0
    env.reset(seed=10000)
    assert env.step("nonsense")[1] == 0.0 and env.step(env.expert.next_actions(env, 1)[0])[1] == 0.0
    with pytest.raises(ragen.ConfigError, match="reward_scheme"):
        ragen.make_env("sudoku-4x4", reward_scheme="shaped")


# ---- reward table and feedback ------------------------------------------------------------------------------------
def _setup(seed=10000):
    """The 4x4 env on a puzzle with an empty cell that has a legal wrong digit; returns (env, cell, right, wrong)."""
    env = ragen.make_env("sudoku-4x4", max_steps=12)
    for s in range(seed, seed + 100):
        env.reset(seed=s)
        for cell, v in enumerate(env.board):
            legal = candidates(env.board, cell)
            if v == 0 and len(legal) > 1:
                wrong = next(d for d in legal if d != env.puzzle.solution[cell])
                return env, cell, env.puzzle.solution[cell], wrong
    raise AssertionError("no puzzle with a two-candidate cell")


def _at(cell, digit):
    r, c = divmod(cell, 4)
    return f"place {digit} at row {r + 1} col {c + 1}"


def test_reward_table_and_overwrite_cap():
    env, cell, right, wrong = _setup()
    obs, r, term, trunc, info = env.step(_at(cell, wrong))
    assert (r, term, info["action_is_valid"], info["action_is_effective"]) == (0.5, False, True, True)
    assert "-> valid but not the solution (+0.5)" in obs and env.board[cell] == wrong
    obs, r, *_ = env.step(_at(cell, right))  # overwrite to the solution: +0.5, the cell's total is 1.0
    assert r == 0.5 and "correct (+0.5)" in obs
    assert env.step(_at(cell, wrong))[1] == 0.0  # legal but wrong overwrite
    assert env.step(_at(cell, right))[1] == 0.0  # capped: the cell already earned 1.0
    obs, r, _, _, info = env.step(_at(cell, right))  # same digit again: no change
    assert r == 0.0 and not info["action_is_effective"] and "no change" in obs


def test_first_correct_placement_earns_one_and_completion_ten():
    env, *_ = _setup()
    rewards = []
    while env.is_running:
        (action,) = env.expert.next_actions(env, 1)
        obs, r, term, trunc, info = env.step(action)
        rewards.append(r)
    assert rewards == [1.0] * (env.puzzle.holes - 1) + [11.0]
    assert term and not trunc and info["success"] and info["solved_fraction"] == 1.0
    assert "correct (+1.0), puzzle solved (+10.0)" in obs


def test_penalties_are_not_applied():
    env, cell, right, wrong = _setup()
    board = list(env.board)
    given = env.board.index(next(v for v in env.board if v))
    r, c = divmod(given, 4)
    obs, rew, _, _, info = env.step(f"{r + 1},{c + 1},{env.board[given] % 4 + 1}")
    assert rew == -0.1 and not info["action_is_valid"] and "cannot change a given cell (-0.1)" in obs
    obs, rew, _, _, info = env.step("put it somewhere")
    assert rew == -0.1 and not info["action_is_valid"] and "invalid format (-0.1)" in obs
    assert "Last action: put it somewhere -> invalid format" in obs
    # a digit already in the cell's row
    r, c = divmod(cell, 4)
    in_row = next(env.board[r * 4 + j] for j in range(4) if env.board[r * 4 + j])
    obs, rew, _, _, info = env.step(f"{r + 1},{c + 1},{in_row}")
    legal = ",".join(map(str, candidates(env.board, cell)))
    assert rew == -0.1 and info["conflict"] and not info["action_is_valid"] and not info["action_is_effective"]
    assert f"conflict: {in_row} already in row {r + 1}" in obs and f"(-0.1), legal digits: {legal}" in obs
    assert env.board == board and "Conflicts:" not in obs and env.steps == 3


def test_apply_conflicts_writes_and_marks_the_digit():
    env = ragen.make_env("sudoku-4x4", apply_conflicts=True)
    env.reset(seed=10000)
    cell = env.board.index(0)
    r, c = divmod(cell, 4)
    in_row = next(env.board[r * 4 + j] for j in range(4) if env.board[r * 4 + j])
    obs, rew, _, _, info = env.step(f"{r + 1},{c + 1},{in_row}")
    assert rew == -0.1 and info["conflict"] and info["action_is_effective"] and env.board[cell] == in_row
    assert f"*{in_row}*" in obs and "Conflicts: " in obs and f"(row {r + 1})" in obs
    assert "*d*" in env.symbol_legend and "*d*" not in ragen.make_env("sudoku-4x4").symbol_legend


def test_observation_lines():
    env = ragen.make_env("sudoku-9x9")
    obs, _ = env.reset(seed=10000)
    assert "Candidates:" not in obs and "Last action" not in obs
    assert obs.endswith("Progress: 49/81 cells filled (49 given, 0 placed). Steps: 0/50.")
    while sum(v == 0 for v in env.board) > 10:
        obs = env.step(env.expert.next_actions(env, 1)[0])[0]
    empty = [i for i, v in enumerate(env.board) if not v]
    line = next(x for x in obs.splitlines() if x.startswith("Candidates: "))
    assert line.count(";") == len(empty) - 1 and line.startswith(
        f"Candidates: r{empty[0] // 9 + 1}c{empty[0] % 9 + 1}: "
    )
    assert f"Steps: {env.steps}/50." in obs and f"({49} given, {81 - 49 - len(empty)} placed)" in obs


def test_truncation_at_max_steps():
    env = ragen.make_env("sudoku-4x4", max_steps=8)
    env.reset(seed=4)
    results = [env.step("nonsense") for _ in range(8)]
    assert [r[3] for r in results] == [False] * 7 + [True] and not results[-1][2]
    with pytest.raises(RuntimeError):
        env.step("1,1,1")


def test_instructions_follow_live_config():
    small, big = ragen.make_env("sudoku-4x4"), ragen.make_env("sudoku-9x9")
    assert "4x4 Sudoku" in small.instructions and "2x2 boxes" in small.instructions and "1 to 4" in small.instructions
    assert "9x9 Sudoku" in big.instructions and "3x3 boxes" in big.instructions
    # the examples must be legal moves for the size
    for env in (small, big):
        for example in env.instructions.split("<answer>")[1:]:
            for piece in env.split_actions(example.split("</answer>")[0]):
                assert parse_move(piece, env.config.size) is not None, piece


def test_same_seed_same_episode():
    a, b = ragen.make_env("sudoku-4x4"), ragen.make_env("sudoku-4x4")
    actions = ["1,1,1", "2,2,2", "place 3 at row 3 col 3", "4,4,4", "x", "1,2,3", "2,1,4", "3,4,1"]
    for seed in range(20):
        assert a.reset(seed=seed) == b.reset(seed=seed, options={"rollout_index": 3})
        for act in actions:
            ra, rb = a.step(act), b.step(act)
            assert repr(ra) == repr(rb)
            if ra[2] or ra[3]:
                break


# ---- expert -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, episodes", [("sudoku-4x4", 100), ("sudoku-9x9", 20)])
def test_expert_solves_within_budget(name, episodes):
    """Acceptance 4: the expert solves every generated puzzle within the variant's episode budget."""
    env = ragen.make_env(name)
    for i in range(episodes):
        ep, total = play_expert(env, 10_000 + i)
        holes = env.puzzle.holes
        assert ep.success and not ep.truncated, i
        assert ep.actions_used == holes <= env.config.max_actions_per_episode
        assert total == pytest.approx(holes + 10.0)
    env.close()


def test_expert_hard_puzzles_within_budget():
    for name in VARIANTS:
        env = ragen.make_env(name, difficulty="hard")
        for seed in range(5):
            ep, _ = play_expert(env, seed)
            assert ep.success and ep.actions_used == env.config.target_holes


def test_expert_repairs_wrong_digits_and_explains():
    env, cell, right, wrong = _setup()
    env.step(_at(cell, wrong))
    plan = env.expert.next_actions(env, 20)
    assert _at(cell, right) in plan and len(plan) == env.puzzle.holes
    assert "Row " in env.expert.rationale(env)
    for action in plan:
        env.step(action)
    assert env.solved


def test_expert_without_a_legal_move_returns_nothing():
    # two wrong digits that block each other's solution digit in one row leave no legal repair
    board = [1, 2, 3, 4, 3, 4, 1, 2, 2, 1, 4, 3, 4, 3, 2, 1]
    givens = [0, 0, 3, 4] + board[4:]
    env = ragen.make_env("sudoku-4x4", holes=2)
    env.reset(seed=0)
    env.puzzle = env.puzzle.__class__(4, tuple(givens), tuple(board))
    env.fixed = [v != 0 for v in givens]
    env.board = [2, 1, 3, 4] + board[4:]  # swapped: each blocks the other
    assert env.expert.next_actions(env, 3) == [] and env.expert.rationale(env) == "No placement can be made."


# ---- the env contract ---------------------------------------------------------------------------------------------
test_ragen_check_env, test_gymnasium_check_env = env_contract_tests(VARIANTS)


@pytest.mark.slow
def test_two_step_grpo_run(tmp_path):
    # 4 turns of up to 400 tokens each cost the tiny model ~10 CPU-minutes; 100 keeps the test short
    _, rows = run_two_steps("sudoku-4x4", tmp_path, "env.options.response_length=100", response_length=None)
    steps = [r for r in rows if "rollout/success" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert all("rollout/sudoku-4x4/success" in r for r in steps)  # (info metrics only appear once an action ran)
    assert rows[0]["step"] == 0 and "val/success" in rows[0]
