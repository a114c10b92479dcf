"""Several envs in one run: env.train / env.val lists, group counts, per-env parsers and metrics, a group
never mixing envs, token-exact mixed batches, `ragen run --config configs/generalisation.yaml`, `ragen eval` over
several envs."""

import json
import os
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import ragen_cmd
from rollout import test_runner as tr

import ragen
from ragen.config import load_config
from ragen.envs.env_lists import apportion, check_plan, env_names, train_plan, val_plan
from ragen.errors import ConfigError
from ragen.rollout import HFEngine, Rollout

tiny, fmt = tr.tiny, tr.fmt
ROOT = Path(__file__).resolve().parents[2]
TINY = ["model.name=tiny", "warmstart.mode=never", "collapse.enabled=false", "logging.progress=false",
        "rollout.n_paired_levels=2", "trainer.short_run_steps=0"]


def test_apportion_by_weight_sums_to_the_total():
    assert apportion([1, 1], 4) == [2, 2]
    assert apportion([3, 1], 4) == [3, 1]
    assert apportion([1, 1, 1], 4) == [2, 1, 1]  # the remainder goes to the earlier entry on a tie
    assert sum(apportion([0.2, 0.5, 0.3], 7)) == 7


def test_plans_from_both_forms():
    one = load_config(overrides=["env.name=frozenlake", "env.options={max_turns: 3}", "rollout.n_groups=3"])
    assert [(p.name, p.options, p.n_groups) for p in train_plan(one)] == [("frozenlake", {"max_turns": 3}, 3)]
    assert [(p.name, p.n_groups) for p in val_plan(one)] == [("frozenlake", 64)]
    many = load_config(
        overrides=[
            "env.train=[{name: sokoban, weight: 3}, {name: frozenlake, parser: answer}]",
            "env.val=[{name: sokoban-large, n_groups: 5}, {name: frozenlake}]",
            "rollout.n_groups=4",
            "rollout.n_val_groups=7",
        ]
    )
    assert [(p.name, p.n_groups, p.parser) for p in train_plan(many)] == [
        ("sokoban", 3, ""),
        ("frozenlake", 1, "answer"),
    ]
    assert [(p.name, p.n_groups) for p in val_plan(many)] == [("sokoban-large", 5), ("frozenlake", 7)]
    assert env_names(many) == ["sokoban", "frozenlake", "sokoban-large"]  # the tokenizer corpus covers val envs too
    counts = load_config(overrides=["env.train=[{name: sokoban, n_groups: 2}, {name: frozenlake, n_groups: 5}]"])
    assert [p.n_groups for p in train_plan(counts)] == [2, 5]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["env.train=[{name: sokoban, n_groups: 2}, {name: frozenlake}]"], "n_groups for every entry or for none"),
        (
            ["env.train=[{name: sokoban, weight: 9}, {name: frozenlake}]", "rollout.n_groups=2"],
            "env.train[1] (frozenlake)",
        ),
        (["env.train=[{name: sokoban}, {name: sokoban}]"], "env.train[1].name: 'sokoban' is listed twice"),
        (
            ["env.train=[{name: sokoban}, {name: frozenlak}]"],
            "env.train[1].name: unknown env 'frozenlak'; did you mean 'frozenlake'",
        ),
        (["env.val=[{name: sokoban, options: {max_turnz: 3}}]"], "env.val[0].options.max_turnz: unknown key"),
        (["env.val=[{name: sokoban, parser: thinkanswer}]"], "env.val[0].parser: unknown parser"),
        (["env.train=[{options: {}}]"], "env.train[0].name: required"),
    ],
)
def test_bad_lists_get_one_line(overrides, message):
    with pytest.raises(ConfigError) as exc:
        check_plan(load_config(overrides=overrides))
    assert message in str(exc.value) and "\n" not in str(exc.value)


def _toy_cfg(*overrides):
    cfg = load_config(overrides=[
        "env.train=[{name: count, weight: 2, options: {response_length: 32, max_tokens: 16, max_turns: 2}},"
        " {name: guess, options: {response_length: 12, max_tokens: 12, max_turns: 2}, parser: answer}]",
        "env.val=[{name: guess, options: {response_length: 12, max_tokens: 12}, n_groups: 2},"
        " {name: count, options: {response_length: 32, max_tokens: 16, max_turns: 2}}]",
        "rollout.n_groups=3", "rollout.group_size=2", "rollout.n_val_groups=3", "rollout.n_paired_levels=3",
        "model.name=tiny", *overrides])  # the tests roll out the tiny model (and its think-answer default)
    return cfg


def test_train_groups_never_mix_envs_and_metrics_are_per_env(tiny):
    model, tok = tiny
    handle = Rollout(
        HFEngine(model, tok), tok, _toy_cfg(), ragen.make_component("parser", "think-answer"), factory=tr.factory
    )
    try:
        res = handle.train_batch(0, seed=3)
        by_group = defaultdict(set)
        for t in res.trajectories:
            by_group[t.group_id].add(t.env_name)
        assert all(len(v) == 1 for v in by_group.values())  # a group never mixes envs
        assert [sorted(v)[0] for _, v in sorted(by_group.items())] == ["count", "count", "guess"]  # weights 2:1 of 3
        for name in ("count", "guess"):
            assert f"{name}/success" in res.metrics and f"{name}/score" in res.metrics
        assert "success" in res.metrics  # and overall
        guess = next(t for t in res.trajectories if t.env_name == "guess")
        prompt = tok.decode(guess.input_ids[:guess.segments[0][2]])
        assert prompt.endswith("assistant\n<answer>")  # its own parser ('answer') and prompt frame
        count = next(t for t in res.trajectories if t.env_name == "count")
        assert tok.decode(count.input_ids[:count.segments[0][2]]).endswith("assistant\n<think>")
        val = handle.val_batch(seed=3)
        names = [(t.env_name, t.split) for t in val.trajectories]
        assert names == [("guess", "val")] * 2 + [("count", "val")] * 3
        assert "guess/success" in val.metrics and "count/success" in val.metrics
    finally:
        handle.close()


@pytest.mark.parametrize("window", [0, 1])
def test_mixed_sokoban_frozenlake_batch_is_token_exact(tiny, fmt, window):
    if not {"sokoban", "frozenlake"} <= {c.name for c in ragen.list_envs()}:
        pytest.skip("sokoban and frozenlake plugins are not installed")
    from rollout import test_context_window as hw

    model, tok = tiny
    engine = tr.Recording(HFEngine(tr.eos_biased(model, fmt.eos_id), tok))
    cfg = load_config(overrides=[
        "env.train=[{name: sokoban, options: {max_turns: 3, response_length: 16, max_tokens: 16}},"
        " {name: frozenlake, options: {max_turns: 4, response_length: 24, max_tokens: 24}}]",
        "rollout.n_groups=4", "rollout.group_size=2", f"rollout.max_context_window={window}"])
    handle = Rollout(engine, tok, cfg, ragen.make_component("parser", "think-answer"))
    try:
        res = handle.train_batch(0, seed=11)
    finally:
        handle.close()
    assert res.failed_envs == 0 and {t.env_name for t in res.trajectories} == {"sokoban", "frozenlake"}
    assert len({len(t.input_ids) for t in res.trajectories}) > 1  # mixed lengths in one batch
    (tr.assert_token_exact if window == 0 else hw.assert_token_exact_blocks)(res.trajectories, engine.calls)
    groups = defaultdict(set)
    for t in res.trajectories:
        groups[t.group_id].add(t.env_name)
    assert all(len(v) == 1 for v in groups.values())


def _run(tmp_path, *args):
    proc = subprocess.run(ragen_cmd("run", *args, f"logging.run_dir={tmp_path}", "logging.name=r"),
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "r"
    return run, [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_generalisation_config_trains_on_sokoban_and_validates_on_four_envs(tmp_path):
    run, rows = _run(
        tmp_path,
        "--config",
        str(ROOT / "configs" / "generalisation.yaml"),
        *TINY,
        "trainer.steps=2",
        "rollout.n_groups=2",
        "rollout.group_size=2",
        "rollout.n_val_groups=2",
        "rollout.n_paired_levels=2",
        "rollout.response_length=24",
        "trainer.ppo_mini_batch_size=4",
        "trainer.micro_batch_size=4",
        "trainer.threads=1",
    )
    vals = [r for r in rows if "val/success" in r]
    assert [r["step"] for r in vals] == [0, 2]
    for row in vals:
        for name in ("sokoban", "sokoban-large", "sokoban-vocab", "frozenlake"):
            assert f"val/{name}/success" in row and f"val/{name}/score" in row
    train = [r for r in rows if "rollout/success" in r]
    assert train and all("rollout/sokoban/success" in r and "rollout/frozenlake/success" not in r for r in train)
    trajs = [json.loads(line) for line in (run / "trajectories.jsonl").read_text().splitlines()]
    assert trajs and {t["env_name"] for t in trajs} == {"sokoban"}
    val_trajs = [json.loads(line) for line in (run / "val_trajectories.jsonl").read_text().splitlines()]
    assert {t["env_name"] for t in val_trajs} == {"sokoban", "sokoban-large", "sokoban-vocab", "frozenlake"}
    groups = defaultdict(set)
    for t in val_trajs:
        groups[(t["step"], t["group_id"])].add(t["env_name"])
    assert all(len(v) == 1 for v in groups.values())


@pytest.mark.slow
def test_eval_several_envs_one_table(tmp_path):
    out = tmp_path / "ev"
    # response_length=48: the random tiny model writes its whole cap (400 tokens) every turn; the table is checked
    proc = subprocess.run(ragen_cmd("eval", "--env", "sokoban,frozenlake", "--model", "tiny", "--seeds", "2",
                                    "-o", "frozenlake:max_turns=2", "-o", "max_tokens=20", "-o", "response_length=48",
                                    "--out", str(out)),
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["envs"]) == {"sokoban", "frozenlake"} and "overall" in metrics
    table = [
        line for line in proc.stdout.splitlines() if line.startswith(("env ", "sokoban ", "frozenlake ", "overall "))
    ]
    assert len(table) == 4
    trajs = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert sorted((t["env_name"], t["seed"]) for t in trajs) == [("frozenlake", 123), ("frozenlake", 124),
                                                                  ("sokoban", 123), ("sokoban", 124)]
    assert all(t["num_turns"] <= 2 for t in trajs if t["env_name"] == "frozenlake")
    bad = subprocess.run(ragen_cmd("eval", "--env", "sokoban,frozenlake", "-o", "frozenlak:max_turns=2"),
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "did you mean 'frozenlake'" in bad.stderr and "Traceback" not in bad.stderr
