"""The ragen CLI as a user drives it: listings, one-line errors, playing an env from piped input."""

import json
import subprocess

import pytest
from conftest import ragen_cmd


def ragen(*args, input=None):
    return subprocess.run(ragen_cmd(*args), capture_output=True, text=True, input=input, timeout=300)


def test_plugins_json_and_table():
    res = ragen("plugins", "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    dists = {p["distribution"]: p for p in data["plugins"]}
    for dist in ("ragen-algos", "ragen-frozenlake", "ragen-sokoban"):
        assert dist in dists and dists[dist]["version"] == "0.1.0" and dists[dist]["components"]
    assert "grpo" in dists["ragen-algos"]["components"]["algorithm"]
    table = ragen("plugins").stdout
    assert "ragen-sokoban" in table and "env: frozenlake, frozenlake-slippery" in table


def test_envs_lists_the_shipped_variants():
    out = ragen("envs").stdout
    for name in ("sokoban", "sokoban-large", "sokoban-vocab", "frozenlake", "frozenlake-slippery"):
        assert f"\n{name} " in out
    detail = ragen("envs", "frozenlake-slippery")
    assert "success_rate" in detail.stdout and "0.8" in detail.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["check-env", "sokobn"], "Error: unknown env 'sokobn'; did you mean 'sokoban'?"),
        (["envs", "frozenlak"], "Error: unknown env 'frozenlak'; did you mean 'frozenlake'?"),
        (["play", "frozenlake", "-o", "sise=5"], "Error: frozenlake.sise: unknown key; did you mean 'size'?"),
        (["run", "--algo", "grop"], "Error: unknown algorithm 'grop'; did you mean 'grpo'?"),
        (["run", "trainer.stepz=3"], "Error: trainer.stepz: unknown key; did you mean 'steps'?"),
        (["envz"], "Error: no such command 'envz'; did you mean 'envs'?"),
    ],
)
def test_errors_are_one_line(args, message):
    res = ragen(*args)
    assert res.returncode != 0
    assert res.stderr.strip() == message
    assert "Traceback" not in res.stderr


def test_debug_shows_traceback():
    res = ragen("--debug", "check-env", "sokobn")
    assert res.returncode != 0 and "Traceback" in res.stderr


def test_play_frozenlake_from_piped_input():
    # seed 10000 is the spec's example: the goal is one step Left
    res = ragen("play", "frozenlake", "--seed", "10000", input="Left\n")
    assert res.returncode == 0, res.stderr
    assert "Turn 1:\nState:\nCoordinates: " in res.stdout
    assert "executed: Left | reward: 1.0" in res.stdout
    assert "episode over: success=True" in res.stdout


def test_play_penalises_bad_input_and_quits():
    res = ragen("play", "frozenlake", "--seed", "3", input="jump\n<think>x</think><answer>Up</answer>\nq\n")
    assert res.returncode == 0, res.stderr
    assert "invalid: jump" in res.stdout and "format penalty: -1.0" in res.stdout  # a run's penalty
    assert "Turn 2:" in res.stdout and "No valid action provided previously" in res.stdout
    assert "bye" in res.stdout


def test_play_sokoban_with_expert_moves():
    import ragen as api

    env = api.make_env("sokoban")
    env.reset(seed=5)
    plan = []
    while len(plan) < env.config.max_actions_per_episode:
        step = env.expert.next_actions(env, 1)
        if not step:
            break
        plan.append(step[0])
        if env.step(step[0])[2]:
            break
    lines = "".join(" || ".join(plan[i : i + 2]) + "\n" for i in range(0, len(plan), 2))
    res = ragen("play", "sokoban", "--seed", "5", input=lines)
    assert res.returncode == 0, res.stderr
    assert "Grid Map:" in res.stdout and "episode over: success=True" in res.stdout
