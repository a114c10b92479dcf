"""ragen-frozenlake: map generation, gymnasium dynamics, renderer, experts and the env contract (spec section 3)."""

import collections

import numpy as np
import pytest
from ragen_frozenlake.env import FrozenLakeConfig, FrozenLakeEnv, render_coord, render_grid, render_observation
from ragen_frozenlake.mapgen import MOVES, LakeMap, connected, generate_map
from ragen_frozenlake.solver import horizon_values

import ragen
from ragen.envs.episode import Episode
from ragen.testing import env_contract_tests

VARIANTS = ["frozenlake", "frozenlake-slippery"]
SPEC_EXAMPLE = """Coordinates: 
Board size: 4 rows x 4 cols (zero-indexed).
Start: (3, 1)
Goal: (3, 0)
Player: (3, 1)
Grid Map: 
____
____
____
GP__"""


def make(success_rate=1.0, **kw):
    return FrozenLakeEnv(FrozenLakeConfig(success_rate=success_rate, **kw))


def run_actions(env, actions):
    out = []
    for a in actions:
        step = env.step(a)
        out.append(step)
        if step[2] or step[3]:
            break
    return out


# ---- registration and config --------------------------------------------------------------------------------------
def test_variants_registered_with_budget():
    listed = {c.name: c.dist for c in ragen.list_envs()}
    assert all(listed.get(name) == "ragen-frozenlake" for name in VARIANTS)
    for name, rate in (("frozenlake", 1.0), ("frozenlake-slippery", 0.8)):
        env = ragen.make_env(name)
        cfg = env.config
        assert (cfg.size, cfg.p, cfg.success_rate, cfg.observation_format) == (4, 0.9, rate, "grid_coord")
        assert (cfg.max_turns, cfg.max_actions_per_turn, cfg.max_actions_per_episode, cfg.max_tokens) == (5, 2, 10, 120)
        assert cfg.max_steps is None
        assert env.deterministic is (rate == 1.0)
        env.close()


@pytest.mark.parametrize(
    "options",
    [{"size": 1}, {"p": 0.0}, {"p": 1.5}, {"success_rate": 1.2}, {"observation_format": "ansi"}, {"max_steps": 0}],
)
def test_bad_config_is_a_config_error(options):
    with pytest.raises(ragen.ConfigError):
        ragen.make_env("frozenlake", **options)


# ---- map generator ------------------------------------------------------------------------------------------------
def test_spec_example_seed_10000():
    env = ragen.make_env("frozenlake")
    obs, info = env.reset(seed=10000)
    assert obs == SPEC_EXAMPLE
    assert info["task_id"] == "frozenlake/4x4/p0.9/s10000"
    assert env.expert.next_actions(env, 2) == ["Left"]
    obs, reward, terminated, truncated, info = env.step("Left")
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)
    assert obs.endswith("√___") and "Player on goal: (3, 0)" in obs


def test_maps_are_valid_and_seeded():
    for seed in range(200):
        lake = generate_map(4, 0.9, seed)
        assert lake == generate_map(4, 0.9, seed)
        flat = "".join(lake.desc)
        assert flat.count("S") == flat.count("G") == 1 and set(flat) <= set("SFHG")
        assert lake.desc[lake.start[0]][lake.start[1]] == "S" and lake.desc[lake.goal[0]][lake.goal[1]] == "G"
        assert connected(lake.desc, lake.start, lake.goal)
    assert len({generate_map(4, 0.9, s).desc for s in range(20)}) > 10


def test_sizes_and_hole_density():
    lakes = [generate_map(6, 0.8, s) for s in range(100)]
    assert all(len(lake.desc) == 6 and all(len(r) == 6 for r in lake.desc) for lake in lakes)
    holes = sum(len(lake.holes) for lake in lakes) / (100 * 34)  # 36 cells minus start and goal
    assert 0.12 < holes < 0.22  # about 1 - p = 0.2, a bit fewer since unconnected boards are redrawn


# ---- dynamics: gymnasium's P table and sampled transitions --------------------------------------------------------
def _expected(lake, r, c, a, rate):
    """Next-state distribution from (r, c) under action a: intended `rate`, each perpendicular (1 - rate) / 2."""
    n, dist = lake.size, collections.defaultdict(float)
    for b, prob in ((a, rate), ((a - 1) % 4, (1 - rate) / 2), ((a + 1) % 4, (1 - rate) / 2)):
        if prob == 0:
            continue
        dr, dc = MOVES[b]
        nr, nc = min(max(r + dr, 0), n - 1), min(max(c + dc, 0), n - 1)
        dist[nr * n + nc] += prob
    return dict(dist)


@pytest.mark.parametrize("rate", [1.0, 0.8, 1 / 3])
def test_transition_table_matches_success_rate(rate):
    env = make(rate)
    for seed in (0, 1, 10000):
        env.reset(seed=seed)
        lake, gym = env.lake, env.gym_env
        assert gym.desc.tolist() == [[ch.encode() for ch in row] for row in lake.desc]
        T = env.transition_matrix
        for s in range(lake.size**2):
            r, c = divmod(s, lake.size)
            for a in range(4):
                table = collections.defaultdict(float)
                for prob, nxt, _, _ in gym.P[s][a]:
                    table[nxt] += prob
                table = {k: v for k, v in table.items() if v > 0}
                if lake.desc[r][c] in "GH":
                    assert table == {s: 1.0}
                    continue
                want = _expected(lake, r, c, a, rate)
                assert table.keys() == want.keys(), (seed, s, a)
                assert all(abs(table[k] - want[k]) < 1e-12 for k in want)
                assert np.allclose(T[s, a][list(want)], list(want.values())) and abs(T[s, a].sum() - 1) < 1e-12
    env.close()


@pytest.mark.parametrize("rate", [0.8, 1 / 3])
def test_sampled_transitions_match_table(rate):
    # a map whose start is not on the edge, so the three outcomes are distinct cells
    seed = next(
        s for s in range(1000) if 0 < generate_map(4, 0.9, s).start[0] < 3 and 0 < generate_map(4, 0.9, s).start[1] < 3
    )
    env = make(rate)
    n = 1500
    counts = collections.Counter()
    for i in range(n):
        env.reset(seed=seed, options={"rollout_index": i})
        env.step("Up")
        counts[env.state] += 1
    env.reset(seed=seed)
    r, c = env.lake.start
    want = _expected(env.lake, r, c, 3, rate)
    assert set(counts) == set(want)
    for s, prob in want.items():
        assert abs(counts[s] / n - prob) < 0.05, (s, counts[s] / n, prob)
    env.close()


@pytest.mark.parametrize("rate", [1.0, 0.8, 1 / 3])
def test_steps_match_gymnasiums_own_step(rate):
    """Our step (P table + the env's np_random) gives exactly the states, rewards and ends of gymnasium's step on the
    same map and noise seed."""
    from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymFrozenLake

    env = make(rate)
    moves = ["Left", "Down", "Right", "Up"]
    for seed in range(40):
        for rollout in range(3):
            env.reset(seed=seed, options={"rollout_index": rollout})
            gym = GymFrozenLake(desc=list(env.lake.desc), is_slippery=rate < 1, success_rate=rate)
            gym.reset(seed=int(env.noise_rng().integers(2**63 - 1)))
            for i in range(10):
                action = moves[(seed * 7 + rollout * 3 + i * (i + 1)) % 4]
                _, reward, term, _, _ = env.step(action)
                s, gym_reward, gym_term, _, _ = gym.step(moves.index(action))
                assert (env.state, reward, term) == (int(s), float(gym_reward), bool(gym_term)), (seed, rollout, i)
                if term:
                    break
    env.close()


def test_deterministic_moves_and_effectiveness():
    env = make(1.0)
    env.reset(seed=10000)  # open 4x4 lake, start (3, 1), goal (3, 0)
    obs, reward, term, trunc, info = env.step("DOWN")  # into the bottom edge: valid, not effective
    assert (reward, term, trunc) == (0.0, False, False)
    assert info == {"success": False, "action_is_valid": True, "action_is_effective": False}
    _, _, _, _, info = env.step("up")
    assert info["action_is_effective"] and env.position == (2, 1)
    assert "Player: (2, 1)" in env.render()


def test_invalid_action_is_a_noop():
    env = make(0.8)
    obs0, _ = env.reset(seed=3)
    for text in ("jump", "", "Left Left", "0", "√"):
        obs, reward, term, trunc, info = env.step(text)
        assert (obs, reward, term, trunc) == (obs0, 0.0, False, False)
        assert info == {"success": False, "action_is_valid": False, "action_is_effective": False}
    assert not env.validate_action("jump") and env.validate_action(" right ")


def test_hole_ends_the_episode():
    env = make(1.0)
    seed = next(s for s in range(1000) if generate_map(4, 0.9, s).holes)
    env.reset(seed=seed)
    hole = env.lake.holes[0]
    # put the player next to the hole through gymnasium's state (oracle access), then step into it
    nr, nc = next((hole[0] - dr, hole[1] - dc) for dr, dc in MOVES if 0 <= hole[0] - dr < 4 and 0 <= hole[1] - dc < 4
                  and env.lake.desc[hole[0] - dr][hole[1] - dc] in "FS")
    env.state = nr * 4 + nc
    action = ["Left", "Down", "Right", "Up"][MOVES.index((hole[0] - nr, hole[1] - nc))]
    obs, reward, term, trunc, info = env.step(action)
    assert (reward, term, trunc, info["success"]) == (0.0, True, False, False)
    assert f"Player in hole: ({hole[0]}, {hole[1]})" in obs and "X" in obs
    with pytest.raises(RuntimeError):
        env.step("Left")
    assert env.expert.next_actions(env, 2) == []


def test_max_steps_truncates():
    env = make(1.0, max_steps=2)
    env.reset(seed=10000)
    assert env.step("Down")[3] is False
    obs, reward, term, trunc, info = env.step("Right")
    assert (term, trunc) == (False, True)


# ---- determinism and noise seeding --------------------------------------------------------------------------------
def test_same_seed_same_episode():
    a, b = make(0.5), make(0.5)
    actions = ["Left", "Up", "Right", "Down", "Up", "Up", "Left", "Down"] * 2
    for seed in range(20):
        assert a.reset(seed=seed) == b.reset(seed=seed)
        assert repr(run_actions(a, actions)) == repr(run_actions(b, actions))
    # the initial state never depends on rollout_index
    assert a.reset(seed=7, options={"rollout_index": 0})[0] == a.reset(seed=7, options={"rollout_index": 5})[0]


def _trajectories(noise, rollout_index, seeds=range(30)):
    env = make(0.5, noise=noise)
    out = []
    for seed in seeds:
        env.reset(seed=seed, options={"rollout_index": rollout_index})
        out.append([s[0] for s in run_actions(env, ["Up", "Left", "Down", "Right"] * 2)])
    env.close()
    return out


def test_noise_per_rollout_vs_shared():
    assert _trajectories("shared", 0) == _trajectories("shared", 1)
    per0, per1 = _trajectories("per_rollout", 0), _trajectories("per_rollout", 1)
    assert per0 != per1
    assert per0 == _trajectories("per_rollout", 0)


# ---- renderer -----------------------------------------------------------------------------------------------------
HAND = LakeMap(desc=("FHFF", "SFFH", "FFFF", "HFGF"), start=(1, 0), goal=(3, 2))


def test_renderer_hand_checked_map():
    assert render_grid(HAND, (2, 1)) == "_O__\n___O\n_P__\nO_G_"
    assert render_coord(HAND, (2, 1)) == (
        "Board size: 4 rows x 4 cols (zero-indexed).\nStart: (1, 0)\nGoal: (3, 2)\nPlayer: (2, 1)\n"
        "Holes: (0, 1), (1, 3), (3, 0)"
    )
    assert render_observation(HAND, (1, 0), "grid_coord") == (
        "Coordinates: \nBoard size: 4 rows x 4 cols (zero-indexed).\nStart: (1, 0)\nGoal: (3, 2)\nPlayer: (1, 0)\n"
        "Holes: (0, 1), (1, 3), (3, 0)\nGrid Map: \n_O__\nP__O\n____\nO_G_"
    )
    assert render_grid(HAND, (0, 1)) == "_X__\n___O\n____\nO_G_"
    assert "Player in hole: (0, 1)" in render_coord(HAND, (0, 1))
    assert render_grid(HAND, (3, 2)) == "_O__\n___O\n____\nO_√_"
    assert "Player on goal: (3, 2)" in render_coord(HAND, (3, 2))
    assert render_observation(HAND, (2, 1), "grid") == render_grid(HAND, (2, 1))
    assert "\x1b" not in render_observation(HAND, (2, 1), "grid_coord")


def test_no_holes_line_without_holes():
    lake = LakeMap(desc=("SF", "FG"), start=(0, 0), goal=(1, 1))
    assert render_coord(lake, (0, 0)).splitlines()[-1] == "Player: (0, 0)"


# ---- prompt text from the live config -----------------------------------------------------------------------------
def test_instructions_follow_live_config():
    det, slip = ragen.make_env("frozenlake"), ragen.make_env("frozenlake-slippery")
    assert "(0, 0) top-left to (3, 3) bottom-right" in det.instructions
    assert "slippery" not in det.instructions and "slippery" in slip.instructions
    assert "<answer>Left || Up || Up</answer>" in det.instructions
    big = ragen.make_env("frozenlake", size=6)
    assert "(0, 0) top-left to (5, 5) bottom-right" in big.instructions and "6x6" in big.instructions
    assert det.action_names == ["Left", "Down", "Right", "Up"]
    assert set(det.symbol_legend) == {"P", "_", "O", "G", "X", "√"}
    assert set(ragen.make_env("frozenlake", p=1.0).symbol_legend) == {"P", "_", "G", "√"}
    assert ragen.make_env("frozenlake", observation_format="coord").symbol_legend is None


# ---- experts ------------------------------------------------------------------------------------------------------
def test_deterministic_expert_solves_every_map_within_budget():
    env = ragen.make_env("frozenlake")
    for i in range(200):
        ep = Episode(env)
        ep.reset(seed=10_000 + i)
        optimal = len(env.expert.plan(env))
        while not ep.done:
            ep.step_turn(" || ".join(env.expert.next_actions(env, env.config.max_actions_per_turn)))
        assert ep.success and ep.actions_used == optimal <= env.config.max_actions_per_episode, i
    env.close()


def test_deterministic_expert_tie_break():
    env = make(1.0)
    env.reset(seed=10000)
    env.state = 0  # (0, 0) -> goal (3, 0): straight down
    assert env.expert.plan(env) == ["Down", "Down", "Down"]
    env.state = 3 * 4 + 3  # (3, 3) -> (3, 0): Left first
    assert env.expert.plan(env) == ["Left", "Left", "Left"]
    env.state = 2 * 4 + 1  # (2, 1): Left then Down beats Down then Left
    assert env.expert.plan(env) == ["Left", "Down"]


def test_slippery_expert_meets_value_bound():
    env = ragen.make_env("frozenlake-slippery")
    horizon = env.config.max_actions_per_episode
    values, wins = [], 0
    for seed in range(500):
        env.reset(seed=seed)
        values.append(horizon_values(env.transition_matrix, env.goal_mask, env.hole_mask, horizon)[horizon][env.state])
        info = {"success": False}
        while plan := env.expert.next_actions(env, env.config.max_actions_per_turn):
            assert len(plan) == 1  # one action per call on slippery ice
            _, _, term, trunc, info = env.step(plan[0])
            if term or trunc:
                break
        assert env.steps <= horizon
        wins += info["success"]
    assert wins / 500 >= np.mean(values) - 0.05, (wins / 500, np.mean(values))
    env.close()


def test_value_iteration_small_case():
    env = make(0.8)
    env.reset(seed=10000)  # open 4x4 lake, goal (3, 0)
    V = horizon_values(env.transition_matrix, env.goal_mask, env.hole_mask, 3)
    goal = 3 * 4 + 0
    assert V[0][goal] == 1.0 and V[0].sum() == 1.0
    assert V[1][3 * 4 + 1] == pytest.approx(0.8)  # one step right of the goal: Left succeeds with 0.8
    assert V[1][0] == 0.0 and V[3][0] > 0.0  # (0, 0) is 3 moves away
    assert np.all(np.diff(V, axis=0) >= -1e-12)  # more budget never hurts
    assert env.expert.rationale(env)


# ---- state diagnostics: optimal actions and the potential ---------------------------------------------
def test_deterministic_optimal_actions_are_every_first_move_of_a_shortest_path():
    """Brute force by the expert's own plan length: a move is optimal iff the shortest path from where it lands is
    one shorter; unreachable, hole and goal cells are not judged; Phi = minus the path length (-16 when cut off)."""
    env = make(1.0)
    ties = judged = 0
    for seed in range(60):
        env.reset(seed=seed)
        for s in range(16):
            env.state = s
            cell = env.lake.desc[s // 4][s % 4]
            path = env.expert.plan(env)
            reachable = bool(path) or cell == "G"
            assert env.potential() == (-float(len(path)) if reachable else -16.0), (seed, s)
            got = env.expert.optimal_actions(env)
            if not path:
                assert got is None
                continue
            expected = set()
            for a, name in enumerate(("Left", "Down", "Right", "Up")):
                env.state = int(np.argmax(env.transition_matrix[s, a]))
                landed = env.lake.desc[env.state // 4][env.state % 4]
                if (
                    landed == "G"
                    and len(path) == 1
                    or landed not in "HG"
                    and len(env.expert.plan(env)) == len(path) - 1
                ):
                    expected.add(name)
                env.state = s
            assert got == expected and path[0] in got, (seed, s)
            judged, ties = judged + 1, ties + (len(got) > 1)
    assert judged > 500 and ties > 100, (judged, ties)


def test_slippery_optimal_actions_hold_the_greedy_choice_and_its_ties():
    """On slippery ice the judged set is every action with the greedy action's success probability (within 1e-9):
    it holds the expert's pick, and on the open lake's symmetric diagonal both symmetric moves tie."""
    env = make(0.8)
    for seed in range(40):
        env.reset(seed=seed)
        best = env.expert.optimal_actions(env)
        if best is not None:
            assert env.expert.next_actions(env, 1)[0] in best
            h = env.actions_left
            q = env.transition_matrix[env.state] @ horizon_values(env.transition_matrix, env.goal_mask,
                                                                   env.hole_mask, h)[h - 1]
            if q.max() > 0:
                assert best == {n for n, v in zip(("Left", "Down", "Right", "Up"), q) if v >= q.max() - 1e-9}
    env = make(0.8, p=1.0)
    env.reset(seed=10000)  # open 4x4 lake, goal (3, 0)
    env.state = 2 * 4 + 1  # (2, 1): Left and Down mirror each other across the diagonal to the goal
    assert env.expert.optimal_actions(env) == {"Left", "Down"}


def test_a_hole_ends_judging_and_has_the_lowest_potential():
    env = make(1.0)
    for seed in range(200):
        env.reset(seed=seed)
        if env.lake.holes:
            break
    hole = env.lake.holes[0]
    env.state = hole[0] * 4 + hole[1]
    assert env.potential() == -16.0 and env.expert.optimal_actions(env) is None


# ---- the env contract ---------------------------------------------------------------------------------------------
test_ragen_check_env, test_gymnasium_check_env = env_contract_tests(VARIANTS)


def test_close_releases_gym_env():
    env = make(0.8)
    env.reset(seed=1)
    assert env.gym_env is not None
    env.close()
    env.close()
    assert env.closed and env._gym is None
    with pytest.raises(RuntimeError):
        env.gym_env
