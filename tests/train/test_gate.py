"""RL cannot farm Sokoban's step cost (docs/algorithms.md, "The step cost cannot be farmed").

Episodes are played on the real sokoban env; the run config is built the way ``ragen run --env sokoban --algo NAME``
builds it, and the trainer's own filter step and the preset's estimator decide what the update sees."""

from types import SimpleNamespace

import pytest
import torch

import ragen
from ragen import AdvantageInput, Trajectory
from ragen.cli.train import run_config
from ragen.train import setup
from ragen.train.gate import gated_envs
from ragen.train.trainer import Trainer

MOVES = ("Up", "Down", "Left", "Right")


def blocked_move(env) -> str | None:
    """A move into a wall from the current state (it costs a step and changes nothing), or None."""
    for move in MOVES:
        if env.board.move(env.player, move) is None:
            return move
    return None


def play(env, seed: int, turns: list[list[str]]) -> tuple[float, bool, int]:
    """(return, success, actions) of a scripted episode on ``seed``."""
    env.reset(seed=seed)
    total, success, n = 0.0, False, 0
    for moves in turns:
        for move in moves:
            _, reward, terminated, truncated, info = env.step(move)
            total, success, n = total + reward, info["success"], n + 1
            if terminated or truncated:
                return total, success, n
    return total, success, n


@pytest.fixture(scope="module")
def episodes():
    """One seed's episodes: a no-op per turn, two no-ops per turn (both fail), the expert's solve and the same solve
    after a wasted move."""
    env = ragen.make_env("sokoban")
    for seed in range(50):
        env.reset(seed=seed)
        wall = blocked_move(env)
        plan = []
        while not env.solved():
            plan.append(env.expert.next_actions(env, 1)[0])
            env.step(plan[-1])
        if wall is None or len(plan) + 1 > env.config.action_budget:
            continue
        out = {"noop1": play(env, seed, [[wall]] * 5), "noop2": play(env, seed, [[wall, wall]] * 5),
               "solve": play(env, seed, [plan]), "solve_late": play(env, seed, [[wall], plan])}
        assert [out[k][1] for k in out] == [False, False, True, True]
        assert out["noop1"][2] == 5 and out["noop2"][2] == 10  # they differ only in how many actions they took
        return out
    pytest.fail("no seed with a wall next to the player and a short solution")


def traj(name: str, episode: tuple[float, bool, int], group: int, index: int) -> Trajectory:
    reward, success, actions = episode
    n = 4 * actions  # more actions, more sampled tokens
    return Trajectory(env_name=name, seed=group, group_id=group, rollout_index=index, split="train", policy_version=0,
                      input_ids=list(range(n)), loss_mask=[1] * n, rollout_logprobs=[0.0] * n, segments=[],
                      reward=reward, success=success)


def components(algo: str, *overrides: str):
    """The preset, filters, estimator and success gate of ``ragen run --env sokoban --algo ALGO [overrides]``."""
    cfg = run_config(None, list(overrides), env_name="sokoban", algo_name=algo)
    preset, _, estimator, filters, _, _, gate = setup._components(cfg)
    return preset, estimator, filters, gate


def update_advantages(algo: str, trajs: list[Trajectory], *overrides: str) -> tuple[list[float], dict]:
    """Each trajectory's advantage in the update (0.0 for rows the trainer's filter step leaves out) and the metrics."""
    _, estimator, filters, gate = components(algo, *overrides)
    trainer = SimpleNamespace(filters=filters, gate=gate)
    trainer._gate = lambda ts, n, m: Trainer._gate(trainer, ts, n, m)
    metrics: dict = {}
    rows, _ = Trainer._filter(trainer, trajs, metrics)
    adv = [0.0] * len(trajs)
    if rows:
        width = max(len(trajs[i].input_ids) for i in rows)
        mask = torch.tensor([[1.0] * len(trajs[i].input_ids) + [0.0] * (width - len(trajs[i].input_ids)) for i in rows])
        out = estimator(AdvantageInput(token_rewards=torch.zeros_like(mask), mask=mask,
                                       scores=torch.tensor([trajs[i].score for i in rows]),
                                       group_ids=torch.tensor([trajs[i].group_id for i in rows])))
        for k, i in enumerate(rows):  # every estimator here puts one value on each sampled token of a row
            adv[i] = float(out.advantages[k, 0])
    return adv, metrics


def all_fail_group(episodes, group=0):
    return [traj("sokoban", episodes["noop1" if i % 2 else "noop2"], group, i) for i in range(4)]


@pytest.mark.parametrize("algo", ["grpo", "dr-grpo", "rloo"])
def test_an_all_fail_group_differing_only_in_action_count_gives_no_push_towards_fewer_actions(episodes, algo):
    trajs = all_fail_group(episodes) + [traj("sokoban", episodes[k], 1, i)
                                        for i, k in enumerate(["solve", "noop1", "noop2", "solve_late"])]
    adv, metrics = update_advantages(algo, trajs)
    assert adv[:4] == [0.0] * 4
    assert metrics["rollout/success_gate_groups"] == 1.0 and metrics["rollout/success_gate_ratio"] == 0.5
    assert metrics["rollout/empty_after_filter"] == 0.0
    # the bias the gate removes: RAGEN's behaviour (never) pushes the no-op-per-turn members up, by a unit under GRPO
    raw, _ = update_advantages(algo, trajs, "algo.options.success_gate=never")
    assert raw[1] > 0 > raw[0] and (algo != "grpo" or raw[1] > 0.8)


def test_inside_a_group_with_a_success_fewer_moves_still_rank_first(episodes):
    """The step cost keeps RAGEN's meaning where there is a success: the faster solve above the slower one, and a
    policy taking one no-op action per turn below both (farming does not pay)."""
    names = ["solve", "solve_late", "noop1", "noop2"]
    adv, _ = update_advantages("grpo", [traj("sokoban", episodes[k], 0, i) for i, k in enumerate(names)])
    solve, solve_late, noop1, noop2 = adv
    assert solve > solve_late > 0 > noop1 and noop1 > noop2  # the step cost ranks failures beside a success too
    assert episodes["noop1"][0] < 0 < episodes["solve_late"][0] < episodes["solve"][0]


def test_a_batch_with_no_success_trains_nothing_and_does_not_count_as_an_empty_filter(episodes):
    trajs = all_fail_group(episodes, 0) + all_fail_group(episodes, 1)
    adv, metrics = update_advantages("grpo", trajs)
    assert adv == [0.0] * 8
    assert metrics["rollout/success_gate_empty"] == 1.0 and metrics["rollout/empty_after_filter"] == 0.0


def test_starpo_s_does_not_select_all_fail_step_cost_groups(episodes):
    """StarPO-S keeps the top 25% of groups by raw reward std: 8 groups, 2 kept. The all-fail groups' step-cost spread
    (std 0.29) is above the spread of an all-success group (0.06); without the gate one of them is trained on."""
    trajs = [traj("sokoban", episodes[k], 0, i) for i, k in enumerate(["solve", "noop1", "noop1", "noop1"])]
    trajs += [traj("sokoban", episodes[k], 1, i) for i, k in enumerate(["solve", "solve_late", "solve", "solve"])]
    for g in range(2, 8):
        trajs += all_fail_group(episodes, g)
    preset, _, _, gate = components("starpo-s")
    assert preset.filter == "top-k" and gate is not None
    kept = lambda *o: {trajs[i].group_id for i in _rows("starpo-s", trajs, *o)}  # noqa: E731
    plain = "algo.options.filter_options.min_groups=0"  # RAGEN's plain 25%, without the preset's floor of 4 groups
    assert kept(plain) == {0, 1}
    assert kept(plain, "algo.options.success_gate=never") == {
        0,
        2,
    }  # RAGEN's: an all-fail group beats the all-success one
    assert kept() == {0, 1}  # the floor of 4 cannot bring gated groups back: only 2 remain
    assert len(kept("algo.options.success_gate=never")) == 4


def _rows(algo, trajs, *overrides):
    _, _, filters, gate = components(algo, *overrides)
    trainer = SimpleNamespace(filters=filters, gate=gate)
    trainer._gate = lambda ts, n, m: Trainer._gate(trainer, ts, n, m)
    return Trainer._filter(trainer, trajs, {})[0]


def test_auto_gates_group_comparisons_of_step_cost_envs_only():
    preset = lambda algo, **o: ragen.make_component("algorithm", algo, **o)  # noqa: E731
    envs = {"sokoban": type(ragen.make_env("sokoban")), "frozenlake": type(ragen.make_env("frozenlake"))}
    for algo in ("grpo", "dr-grpo", "rloo", "reinforce++-baseline", "dapo", "gspo", "starpo-s"):
        assert gated_envs(preset(algo), envs) == {"sokoban"}, algo
    # a critic with batch whitening and no group selection sees the step cost as the per-action reward it is
    assert gated_envs(preset("ppo"), envs) == frozenset()
    assert gated_envs(preset("ppo", success_gate="always"), envs) == {"sokoban", "frozenlake"}
    assert gated_envs(preset("grpo", success_gate="never"), envs) == frozenset()
    assert components("grpo", "algo.options.success_gate=never")[3] is None
    assert components("ppo")[3] is None
