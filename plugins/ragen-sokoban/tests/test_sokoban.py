"""ragen-sokoban: generator, solver, dynamics and rewards, observations, variants, Boxoban files, contract checks."""

from __future__ import annotations

import hashlib
from collections import deque
from pathlib import Path

import gymnasium.utils.env_checker
import numpy as np
import pytest
from ragen_sokoban.boxoban import load_levels
from ragen_sokoban.generator import (
    DIRECTIONS,
    Draws,
    _brush_masks,
    _candidates,
    attempt_seed,
    candidates,
    generate,
    topology,
    verify,
)
from ragen_sokoban.solver import Board, SearchLimit, solve, solve_moves

import ragen
from ragen.envs.episode import Episode
from ragen.envs.prompt import system_prompt
from ragen.testing import check_env

BOXOBAN = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "boxoban"
needs_boxoban = pytest.mark.skipif(
    not (BOXOBAN / "hard_000.txt").is_file(), reason=f"Boxoban test data not at {BOXOBAN}"
)

#: a room from text: # wall, _ floor, O target, √ box on target, X box, P player, S player on target
CODE = {"#": 0, "_": 1, "O": 2, "√": 3, "X": 4, "P": 5, "S": 6}


def room(text: str) -> list[list[int]]:
    return [[CODE[ch] for ch in line] for line in text.strip().splitlines()]


#: the spec's example level (environments.md §2): `Left, Up, Up` scores 10.7
SPEC_LEVEL = """
######
#O####
#__###
#X_###
#_P_##
######
"""


def expected_return(board: Board, player: int, boxes, moves) -> float:
    """RAGEN's reward for a legal move sequence, computed apart from step(): -0.1 a move, +1 / -1 for each box
    entering / leaving a target, +10 once all boxes are on targets."""
    boxes, total = set(boxes), 0.0
    for name in moves:
        d = board.step[name]
        total -= 0.1
        player += d
        if player in boxes:
            boxes.remove(player)
            boxes.add(player + d)
            total += (player + d in board.targets) - (player in board.targets)
    return total + 10.0 * (boxes <= board.targets)


def reference_optimum(board: Board, player: int, boxes, walk_cost: int) -> int | None:
    """Independent optimum: 0-1 BFS over (player, boxes) with no pruning and no bitmasks, a push costing 1 and a walk
    ``walk_cost`` (0: the fewest pushes, 1: the fewest moves)."""
    start = (player, frozenset(boxes))
    dist = {start: 0}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        (pl, bx), d = state, dist[state]
        if bx <= board.targets:
            return d
        for name, nxt in board.neighbours[pl]:
            cost, nbx = walk_cost, bx
            if nxt in bx:
                dest = board.move(nxt, name)
                if dest is None or dest in bx:
                    continue
                cost, nbx = 1, (bx - {nxt}) | {dest}
            new = (nxt, nbx)
            if new not in dist or dist[new] > d + cost:
                dist[new] = d + cost
                (queue.appendleft if cost == 0 else queue.append)(new)
    return None


def fewest_pushes(board: Board, player: int, boxes) -> int | None:
    return reference_optimum(board, player, boxes, walk_cost=0)


def fewest_moves(board: Board, player: int, boxes) -> int | None:
    return reference_optimum(board, player, boxes, walk_cost=1)


def start_of(level_room) -> tuple[Board, int, frozenset]:
    """(board, player cell, box cells) of a room of codes."""
    cols = len(level_room[0])
    flat = [(r * cols + c, x) for r, row in enumerate(level_room) for c, x in enumerate(row)]
    return (Board(level_room), next(cell for cell, x in flat if x in (5, 6)),
            frozenset(cell for cell, x in flat if x in (3, 4)))


def play(env, moves):
    """Step through ``moves``; returns (total reward, last step)."""
    total, last = 0.0, None
    for m in moves:
        last = env.step(m)
        total += last[1]
    return total, last


# ---- generator and solver -------------------------------------------------------------------------------------
def test_thousand_levels_are_solvable_and_the_plan_earns_the_ragen_reward():
    env = ragen.make_env("sokoban")
    for seed in range(10_000, 11_000):
        _, info = env.reset(seed=seed)
        start = (env.board, env.player, env.boxes)
        moves = solve_moves(*start)
        assert solve(*start)[0] == info["optimal_pushes"] >= 1
        assert len(moves) == info["plan_moves"] <= 10  # reject_over_budget
        want = expected_return(*start, moves)
        got = 0.0
        for i, m in enumerate(moves):
            _, r, term, trunc, step_info = env.step(m)
            got += r
            assert term == (i == len(moves) - 1) and not trunc and step_info["action_is_effective"]
        assert step_info["success"] and got == pytest.approx(want)
        assert got == pytest.approx(11 - 0.1 * len(moves))  # one box, one target: it lands there once, at the end


@pytest.mark.parametrize("name", ["sokoban", "sokoban-large"])
def test_no_level_starts_with_a_box_on_a_target(name):
    env = ragen.make_env(name)
    for seed in range(1000):
        env.reset(seed=seed)
        assert not env.boxes & env.board.targets, seed
    # RAGEN's rule is what removes them: lifted, some 2-box levels start with a box already home
    lifted = ragen.make_env(name, allow_box_on_target=True)
    on_target = 0
    for seed in range(200):
        lifted.reset(seed=seed)
        on_target += bool(lifted.boxes & lifted.board.targets)
    assert on_target > 20 if name == "sokoban-large" else on_target == 0  # one box on its target scores 0 anyway


def test_expert_plan_is_move_optimal():
    for name, seeds in (("sokoban", range(1000)), ("sokoban-large", range(200)), ("sokoban-vocab", range(200))):
        env = ragen.make_env(name)
        for seed in seeds:
            env.reset(seed=seed)
            plan = env.expert.next_actions(env, 100)
            assert len(plan) == fewest_moves(env.board, env.player, env.boxes), (name, seed)
            play(env, plan)
            assert env.solved()


@pytest.mark.parametrize("name", ["sokoban", "sokoban-large"])
def test_expert_episodes_all_succeed_within_the_turn_budget(name):
    """What the warm start records: expert turns of max_actions_per_turn actions through the core's episode, every
    deterministic level solved within 5 turns x 2 actions."""
    env = ragen.make_env(name)
    for seed in range(300):
        ep = Episode(env)
        ep.reset(seed=seed)
        while not ep.done:
            plan = env.expert.next_actions(env, env.config.max_actions_per_turn)
            ep.step_turn(" || ".join(plan) if plan else None)
        assert ep.success, (name, seed)


def test_no_level_solvable_within_the_budget_is_rejected():
    """The generated level is the first reverse-played candidate whose move optimum fits the 10-move budget."""
    for seed in range(1000):
        level = generate(seed, 6, 6, 1, 300, min_pushes=1, max_moves=10)
        for attempt, board, player, boxes in candidates(seed, 6, 6, 1, 300):
            best = fewest_moves(board, player, boxes)
            if best is not None and best <= 10:
                assert (attempt, start_of(level.room)[1:]) == (level.attempt, (player, frozenset(boxes))), seed
                assert len(level.moves) == best
                break


def test_move_solver_on_hand_built_levels():
    board = Board(room(SPEC_LEVEL))
    assert solve_moves(board, 4 * 6 + 2, {3 * 6 + 1}) == ["Left", "Up", "Up"]
    assert solve_moves(board, 4 * 6 + 2, {3 * 6 + 1}, max_moves=2) is None  # needs 3
    assert solve_moves(board, 4 * 6 + 2, {1 * 6 + 1}) == []
    shorter = 0
    for seed in range(300):  # the push-optimal plan is never shorter and, on some levels, longer
        board, player, boxes = start_of(generate(seed).room)
        moves, (_, push_plan) = solve_moves(board, player, boxes), solve(board, player, boxes)
        assert len(moves) == fewest_moves(board, player, boxes) <= len(push_plan)
        shorter += len(moves) < len(push_plan)
    assert shorter >= 10
    with pytest.raises(SearchLimit):
        solve_moves(board, player, boxes, limit=1)


def test_solver_push_count_is_optimal():
    for seed, (rows, cols, boxes, depth) in [(s, (6, 6, 1, 300)) for s in range(60)] + [
        (s, (8, 8, 2, 10)) for s in range(20)
    ]:
        level = generate(seed, rows, cols, boxes, depth)
        board = Board(level.room)
        player = next(r * cols + c for r, row in enumerate(level.room) for c, x in enumerate(row) if x in (5, 6))
        box_cells = frozenset(
            r * cols + c for r, row in enumerate(level.room) for c, x in enumerate(row) if x in (3, 4)
        )
        assert level.optimal_pushes() == fewest_pushes(board, player, box_cells), seed


def test_solver_on_hand_built_levels():
    board = Board(room(SPEC_LEVEL))
    assert solve(board, 4 * 6 + 2, frozenset({3 * 6 + 1})) == (2, ["Left", "Up", "Up"])
    stuck = room("""
#####
#X_O#
#__P#
#####
""")  # the box is in a corner: dead, no plan
    assert solve(Board(stuck), 2 * 5 + 3, frozenset({1 * 5 + 1})) is None
    assert solve(board, 4 * 6 + 2, frozenset({1 * 6 + 1})) == (0, [])  # already solved


def test_generator_is_deterministic_and_seeds_differ():
    assert generate(123, max_moves=10) == generate(123, max_moves=10)
    assert len({generate(s).room for s in range(30)}) >= 25
    digest = hashlib.sha256(b"sokoban:7:2").digest()[:8]
    assert attempt_seed(7, 0) == 7 and attempt_seed(7, 2) == int.from_bytes(digest, "big")


def test_draws_replay_numpys_generator():
    """Draws gives the numbers numpy.random.default_rng(seed) would: interleaved floats, integers and samples."""
    for seed in (0, 1, 7, 10_000, 2**32 - 1, 2**32, 2**40 + 3, 2**64 - 1, 2**70 + 3):  # our seeding < 2**64
        rng, draws = np.random.default_rng(seed), Draws(seed)
        for i in range(300):  # more than one batch of raw words, the 32-bit half carried across other draws
            n = (1, 2, 3, 4, 5, 16, 2**31 + 5)[i % 7]
            assert draws.below(n) == rng.integers(n)
            assert draws.random() == rng.random()
            if i % 5 == 0:
                pop, k = 3 + i % 14, 1 + i % 3
                assert draws.sample(pop, k) == rng.choice(pop, size=k, replace=False).tolist()


class ScriptedDraws(Draws):
    """Draws over a given list of raw words (then numpy's stream of seed 0), to reach Lemire's rare rejections."""

    def __init__(self, words: list[int]) -> None:
        super().__init__(0)
        self._script = list(words)

    def refill(self) -> list[int]:
        if self._script:
            self.words, self._script = (self._script + [0] * 64)[:64], self._script[64:]
            return self.words
        return super().refill()


def reference_topology(draws: Draws, rows: int, cols: int) -> int:
    """The random walk with Draws' own calls, as the generator wrote it before its draws were written out."""
    masks = _brush_masks(rows, cols)
    dr, dc = DIRECTIONS[draws.below(4)]
    r, c = 1 + draws.below(rows - 2), 1 + draws.below(cols - 2)
    floor = 0
    for _ in range(int(1.7 * (rows + cols))):
        if draws.random() < 0.35:
            dr, dc = DIRECTIONS[draws.below(4)]
        r, c = min(max(r + dr, 1), rows - 2), min(max(c + dc, 1), cols - 2)
        floor |= masks[r * cols + c][draws.below(5)]
    return floor & masks[0]


def test_topology_draws_match_draws_calls():
    """topology's written-out draws take the same numbers as Draws.random/below, then leave the stream where they
    would: on seeds, and on scripted words with zero 32-bit halves (below(5) rejects those and draws again)."""
    for rows, cols in ((6, 6), (8, 8), (7, 9)):
        for seed in range(300):
            a, b = Draws(seed), Draws(seed)
            assert topology(a, rows, cols) == reference_topology(b, rows, cols), (rows, cols, seed)
            assert [a.below(7), a.random(), a.below(3)] == [b.below(7), b.random(), b.below(3)]
    rng = np.random.default_rng(5)
    for trial in range(200):
        words = rng.integers(0, 2**64, size=150, dtype=np.uint64).tolist()
        for i in rng.integers(0, 150, size=12).tolist():  # zero halves: rejections, and small floats (turns)
            words[i] &= (0xFFFFFFFF << 32, 0xFFFFFFFF, 0)[i % 3]
        a, b = ScriptedDraws(words), ScriptedDraws(words)
        assert topology(a, 6, 6) == reference_topology(b, 6, 6), trial
        assert [a.below(5) for _ in range(5)] == [b.below(5) for _ in range(5)]


def test_one_box_generation_is_the_general_pipeline():
    """generate's one-box loop (pull-distance bound, no per-try tuples) returns what _candidates + verify do, for
    other room shapes, budgets and min_pushes too."""
    for rows, cols, budget, min_pushes, displace in ((6, 6, 10, 1, True), (7, 9, 12, 2, True), (6, 7, 6, 1, False)):
        for seed in range(150):
            want = next(level for attempt, lay, targets, player, boxes
                        in _candidates(seed, rows, cols, 1, 300, displace, False)
                        if (level := verify(lay, targets, player, boxes, min_pushes, budget, attempt)) is not None)
            assert generate(seed, rows, cols, 1, 300, min_pushes, budget, displace) == want, (rows, cols, seed)


PINNED = "1c1cdf278f45161f"  # computed with the generator of commit 1f1422d (RAGEN's distribution rules)


def test_level_set_is_pinned():
    """The speed work must not move a single level: the levels of seeds 0..199 hash to the value they had when
    RAGEN's distribution rules landed (learning runs compare against that set)."""
    digest = hashlib.sha256()
    for seed in range(200):
        level = generate(seed, max_moves=10)
        digest.update(repr((level.room, level.moves, level.attempt)).encode())
    for seed in range(50):
        level = generate(seed, 8, 8, 2, 10, max_moves=10)
        digest.update(repr((level.room, level.moves, level.attempt)).encode())
    assert digest.hexdigest()[:16] == PINNED


def test_generated_levels_respect_the_settings():
    level = generate(5, 8, 8, 2, 10, min_pushes=3)
    flat = [x for row in level.room for x in row]
    assert len(level.room) == 8 and len(level.room[0]) == 8 and level.optimal_pushes() >= 3
    assert sum(x in (3, 4) for x in flat) == 2 and sum(x in (2, 3, 6) for x in flat) == 2
    assert sum(x in (5, 6) for x in flat) == 1
    assert all(x == 0 for x in level.room[0] + level.room[-1]) and all(row[0] == row[-1] == 0 for row in level.room)
    # RAGEN's distribution (no budget) keeps the rare level whose optimum exceeds 10 moves; the budget replaces it
    assert len(generate(243, max_moves=None).moves) > 10 >= len(generate(243, max_moves=10).moves)


# ---- dynamics and rewards ---------------------------------------------------------------------------------------
def test_spec_example_observation_and_reward():
    env = ragen.make_env("sokoban")
    env.reset(seed=0)
    obs = env.load_room(room(SPEC_LEVEL))
    assert obs == (
        "Coordinates: \nBoard size: 6 rows x 6 cols (zero-indexed).\nTargets: (1, 1)\nBoxes: (3, 1)\nPlayer: (4, 2)\n"
        "Grid Map: \n######\n#O####\n#__###\n#X_###\n#_P_##\n######"
    )
    total, (obs, r, term, trunc, info) = play(env, ["left", "UP", " Up "])  # case-insensitive
    assert total == pytest.approx(10.7) and r == pytest.approx(10.9) and term and info["success"] and not trunc
    assert obs.splitlines()[2:4] == ["Boxes on target: (1, 1)", "Player: (2, 1)"]
    with pytest.raises(RuntimeError):
        env.step("Down")


def test_box_off_and_back_onto_a_target():
    env = ragen.make_env("sokoban-grid")
    env.reset(seed=0)
    env.load_room(room("""
#######
#P√__O#
#######
"""))
    steps = [env.step(a) for a in ("Right", "Right", "Right")]  # off (-1), along, onto the other target (+1 +10)
    assert [s[1] for s in steps] == pytest.approx([-1.1, -0.1, 10.9])
    assert [s[0].splitlines()[1] for s in steps] == ["#_SX_O#", "#_OPXO#", "#_O_P√#"] and steps[-1][2]


def test_blocked_moves_are_valid_not_effective_and_unknown_text_is_a_no_op():
    env = ragen.make_env("sokoban-grid")
    env.reset(seed=0)
    start = env.load_room(room("""
#######
#PXX_O#
#X____#
#######
"""))
    for action in ("Up", "Left", "Right", "Down"):  # wall, wall, box into box, box into wall
        obs, r, term, trunc, info = env.step(action)
        assert obs == start and r == pytest.approx(-0.1) and not (term or trunc)
        assert info["action_is_valid"] and not info["action_is_effective"] and not info["success"]
    obs, r, term, trunc, info = env.step("xyz")
    assert obs == start and r == 0.0 and not info["action_is_valid"] and not info["action_is_effective"]
    assert env.steps == 4 and not env.validate_action("xyz") and env.validate_action(" down ")


def test_truncated_at_max_steps():
    env = ragen.make_env("sokoban", max_steps=3)
    env.reset(seed=0)
    env.load_room(room(SPEC_LEVEL))
    assert not env.step("Nope")[3]  # unknown text uses no step
    assert [env.step("Right")[3] for _ in range(3)] == [False, False, True]


# ---- observations and prompt ----------------------------------------------------------------------------------
def test_coord_format_with_walls_and_player_on_target():
    env = ragen.make_env("sokoban", observation_format="coord", coord_walls=True)
    env.reset(seed=0)
    obs = env.load_room(room("""
######
#S_#_#
#√X_O#
######
"""))
    assert obs == (
        "Board size: 4 rows x 6 cols (zero-indexed).\nWalls: (1, 3)\nTargets: (2, 4)\nBoxes: (2, 2)\n"
        "Boxes on target: (2, 1)\nPlayer on target: (1, 1)"
    )
    assert env.symbol_legend is None and "(3, 5) bottom-right" in env.instructions


def test_grid_formats_and_instructions_follow_the_live_config():
    env = ragen.make_env("sokoban-large")
    obs, info = env.reset(seed=3)
    coord, grid = obs.split("\nGrid Map: \n")
    assert coord.startswith("Coordinates: \nBoard size: 8 rows x 8 cols (zero-indexed).")
    assert len(grid.splitlines()) == 8 and all(len(row) == 8 for row in grid.splitlines())
    assert grid.count("X") + grid.count("√") == 2 and info["task_id"] == "sokoban/8x8/b2/s3"
    assert "(7, 7) bottom-right" in env.instructions
    grid_env = ragen.make_env("sokoban-grid")
    assert grid_env.reset(seed=3)[0] == grid_env.render() and "\n" in grid_env.render()
    assert "bottom-right" not in grid_env.instructions


def test_vocab_variant_legend_matches_the_symbols():
    env = ragen.make_env("sokoban-vocab")
    seen = set()
    for seed in range(20):
        seen |= set(env.reset(seed=seed)[0]) - {"\n"}
    assert seen <= set(env.symbol_legend) and {"W", ".", "G", "B", "A"} <= seen
    assert env.symbol_legend == {"W": "wall", ".": "empty", "G": "target", "C": "box on target", "B": "box",
                                 "A": "player", "@": "player on target"}
    prompt = system_prompt(env)
    assert "W: wall, .: empty, G: target, C: box on target, B: box, A: player, @: player on target" in prompt
    assert "#: wall" not in prompt


def test_same_seed_same_level_whatever_the_rollout_index():
    a, b = ragen.make_env("sokoban"), ragen.make_env("sokoban")
    oa, ia = a.reset(seed=7)
    ob, ib = b.reset(seed=7, options={"rollout_index": 3, "split": "val"})
    assert oa == ob and ia["task_id"] == ib["task_id"] == "sokoban/6x6/b1/s7"
    assert len({a.reset(seed=s)[0] for s in range(20)}) >= 15


# ---- expert ------------------------------------------------------------------------------------------------------
def test_expert_replans_and_explains():
    env = ragen.make_env("sokoban")
    env.reset(seed=0)
    env.load_room(room(SPEC_LEVEL))
    assert env.expert.next_actions(env, 2) == ["Left", "Up"]
    assert env.expert.rationale(env) == (
        "I am at (4, 2). My plan takes 3 moves (2 pushes); first I walk 1 step to (4, 1) and push the box at (3, 1) Up."
    )
    env.step("Right")  # off the plan
    assert env.expert.next_actions(env, 10) == ["Left", "Left", "Up", "Up"]
    play(env, ["Left", "Left", "Up", "Up"])
    assert env.expert.next_actions(env, 2) == [] and env.solved()
    env.reset(seed=1)
    env.load_room(room("#####\n#X_O#\n#__P#\n#####"))
    assert env.expert.next_actions(env, 2) == [] and env.expert.rationale(env) == ""


# ---- config and budget -----------------------------------------------------------------------------------------
def test_budget_and_config_validation():
    with pytest.raises(ragen.ConfigError, match="allow_unreachable"):
        ragen.make_env("sokoban", min_pushes=3, max_turns=1, max_actions_per_turn=2)
    assert ragen.make_env("sokoban", min_pushes=3, max_turns=1, max_actions_per_turn=2, allow_unreachable=True)
    with pytest.raises(ragen.ConfigError, match="grid_vocab"):
        ragen.make_env("sokoban", grid_vocab=["a", "b"])
    with pytest.raises(ragen.ConfigError, match="dim_room"):
        ragen.make_env("sokoban", dim_room=[2, 6])
    with pytest.raises(ragen.ConfigError, match="observation_format"):
        ragen.make_env("sokoban", observation_format="pixels")
    env = ragen.make_env("sokoban", max_turns=2, max_actions_per_turn=3)  # 6 actions: levels fit the real budget
    assert all(env.reset(seed=s)[1]["plan_moves"] <= 6 for s in range(50))


# ---- Boxoban -----------------------------------------------------------------------------------------------------
def test_boxoban_without_files_is_a_clear_config_error():
    with pytest.raises(ragen.ConfigError, match="set boxoban_files"):
        ragen.make_env("sokoban-boxoban")
    with pytest.raises(ragen.ConfigError, match="does not exist"):
        ragen.make_env("sokoban-boxoban", boxoban_files=["/nonexistent/levels.txt"])


def test_unknown_reset_options_are_refused():
    env = ragen.make_env("sokoban")
    assert env.reset(seed=3, options={"task_index": 8})[0] == env.reset(seed=3)[0]  # procedural: the seed picks
    with pytest.raises(ragen.ConfigError, match=r"unknown reset options \['task_idx'\]"):
        env.reset(seed=0, options={"task_idx": 1})


@needs_boxoban
def test_boxoban_files_load():
    levels = load_levels((str(BOXOBAN / "hard_000.txt"),))
    assert len(levels) == 1000 and levels[17].name == "hard_000/17"
    for lv in levels:
        flat = [x for row in lv.room for x in row]
        assert len(lv.room) == 10 and all(len(r) == 10 for r in lv.room) and sum(x in (3, 4) for x in flat) == 4
    env = ragen.make_env("sokoban-boxoban", boxoban_files=str(BOXOBAN))  # a folder: its files sorted by name
    obs, info = env.reset(seed=1003)
    assert info["task_id"] == "sokoban/boxoban/hard_001/3" and obs.count("\n") == 9
    assert env.reset(seed=1003 + len(env._levels))[1]["task_id"] == info["task_id"]  # seed mod total
    assert env.reset(seed=0, options={"task_index": 5})[1]["task_id"] == "sokoban/boxoban/hard_000/5"


@needs_boxoban
def test_boxoban_expert_solves_hard_levels():
    env = ragen.make_env("sokoban-boxoban", boxoban_files=[str(BOXOBAN / "hard_000.txt")])
    for seed in (0, 1, 2):
        ep = Episode(env)
        ep.reset(seed=seed)
        while not ep.done:
            plan = env.expert.next_actions(env, env.config.max_actions_per_turn)
            ep.step_turn(" || ".join(plan) if plan else None)
        assert ep.success, seed


# ---- state diagnostics: optimal actions and the potential ---------------------------------------------
def _moves_left(env) -> int | None:
    """Fewest moves to solve from the env's state, by the plain move-level BFS (independent of the judge's search)."""
    moves = solve_moves(env.board, env.player, env.boxes)
    return None if moves is None else len(moves)


def _brute_force_optimal(env) -> set[str]:
    """The moves after which the fewest moves left drop by exactly one: the definition, checked by stepping a copy."""
    here = _moves_left(env)
    out = set()
    for name in env.action_names:
        saved = env.player, env.boxes
        nxt = env.board.move(env.player, name)
        if nxt is not None and nxt in env.boxes:
            dest = env.board.move(nxt, name)
            if dest is not None and dest not in env.boxes:
                env.boxes = (env.boxes - {nxt}) | {dest}
                env.player = nxt
        elif nxt is not None:
            env.player = nxt
        if (env.player, env.boxes) != saved:
            left = _moves_left(env)
            if here is not None and left is not None and left == here - 1:
                out.add(name)
        env.player, env.boxes = saved
    return out


@pytest.mark.parametrize("name", ["sokoban", "sokoban-large"])
def test_optimal_actions_are_every_move_that_starts_a_shortest_solution(name):
    """On states along random walks (deadlocks included), the judge's set equals the brute-force definition; the
    potential is minus the fewest moves left, capped at the episode's action budget + 1 (also when unsolvable)."""
    env = ragen.make_env(name)
    rng = np.random.default_rng(0)
    seen = ties = dead = 0
    for seed in range(40):
        env.reset(seed=seed)
        for _ in range(12):
            if env.solved():
                break
            expected, left = _brute_force_optimal(env), _moves_left(env)
            got = env.expert.optimal_actions(env)
            assert got == (expected if left else None), (seed, env.render())
            cap = env.config.action_budget + 1
            assert env.potential() == -float(cap if left is None else min(left, cap))
            seen, ties, dead = seen + 1, ties + (len(expected) > 1), dead + (left is None)
            env.step(env.action_names[rng.integers(4)])
            if env._done:
                break
    assert seen > 300 and ties > 20 and dead > 5, (seen, ties, dead)


def test_judging_leaves_the_expert_plan_and_the_env_alone():
    env = ragen.make_env("sokoban")
    env.reset(seed=5)
    plan = env.expert.next_actions(env, 10)
    before = (env.render(), env.state(), env.steps)
    env.expert.optimal_actions(env), env.potential()
    assert (env.render(), env.state(), env.steps) == before and env.expert.next_actions(env, 10) == plan
    assert plan[0] in env.expert.optimal_actions(env)


def test_solved_and_too_big_states_are_not_judged(monkeypatch):
    env = ragen.make_env("sokoban-grid")
    env.reset(seed=0)
    env.load_room(room(SPEC_LEVEL))
    for a in ("Left", "Up", "Up"):  # the spec example's solution
        env.step(a)
    assert env.solved() and env.potential() == 0.0 and env.expert.optimal_actions(env) is None
    import ragen_sokoban.env as sokoban_env

    monkeypatch.setattr(sokoban_env, "JUDGE_STATE_LIMIT", 3)
    env.reset(seed=1)  # a fresh level: the search meets the limit, so nothing is known
    assert env.expert.optimal_actions(env) is None and env.potential() is None


# ---- contract ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["sokoban", "sokoban-grid", "sokoban-large", "sokoban-vocab"])
def test_ragen_env_checks(name):
    checks = check_env(name)
    assert checks and all(c.ok for c in checks), [c for c in checks if not c.ok]


@pytest.mark.filterwarnings("ignore:.*alternative render modes")
@pytest.mark.parametrize("name", ["sokoban", "sokoban-grid", "sokoban-large", "sokoban-vocab"])
def test_gymnasium_env_checker(name):
    gymnasium.utils.env_checker.check_env(ragen.make_env(name))


@needs_boxoban
def test_boxoban_env_checks():
    checks = check_env("sokoban-boxoban", expert_episodes=3, boxoban_files=[str(BOXOBAN / "hard_000.txt")])
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
