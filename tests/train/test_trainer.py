"""The StarPO trainer end to end on the tiny model: weights change, losses are finite, resume is exact."""

import json

import pytest
import torch
from conftest import TINY

import ragen
from ragen.config import load_config
from ragen.runs.loop import train
from ragen.train.trainer import Trainer

SMALL = [
    *TINY,
    "env.name=frozenlake",
    "env.options.response_length=24",
    "rollout.n_groups=2",
    "rollout.group_size=2",
    "rollout.n_val_groups=2",
    "trainer.ppo_mini_batch_size=2",
    "trainer.micro_batch_size=2",
    "trainer.actor_lr=1e-3",
    "logging.progress=false",
]


def small_cfg(tmp_path, *extra):
    return load_config(overrides=[*SMALL, f"logging.run_dir={tmp_path}", *extra])


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_two_steps_change_weights_and_losses_are_finite(tmp_path, algo):
    cfg = small_cfg(tmp_path, f"algo.name={algo}", "logging.name=run")
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        before = {k: v.detach().clone() for k, v in trainer.actor.module.named_parameters()}
        for _ in range(2):
            m = trainer.step().metrics
            assert all(
                torch.isfinite(torch.tensor(float(m[k]))) for k in ("actor/pg_loss", "actor/entropy", "actor/grad_norm")
            )
            assert (
                m["rollout/num_trajectories"] == 4 and m.get("rollout/logprob_abs_diff_max", 0.0) < 1e-3
            )  # absent when reused
            if algo == "ppo":
                assert torch.isfinite(torch.tensor(m["critic/vf_loss"]))
        changed = [k for k, v in trainer.actor.module.named_parameters() if not torch.equal(v, before[k])]
        assert changed, "no actor weight changed after two steps"
    finally:
        trainer.close()


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_an_update_moves_the_policy_towards_the_better_trajectory(tmp_path, algo):
    """End to end through collate, estimator, loss and optimizer: after one step the sampled tokens of the trajectory
    scored +1 in each group are more likely and those scored -1 less likely (a sign error anywhere fails this)."""
    from ragen.train.batch import collate

    cfg = small_cfg(tmp_path, f"algo.name={algo}", "logging.name=run", "trainer.ppo_mini_batch_size=4",
                    "trainer.micro_batch_size=4", "trainer.actor_lr=1e-4")
    trainer = Trainer(cfg, tmp_path / "run")
    seen = {}
    train_batch = trainer._rollout.train_batch

    def capture(*args, **kwargs):
        seen["result"] = train_batch(*args, **kwargs)
        return seen["result"]

    def logp_sums(trajs):
        batch = collate(trajs, trainer.tokenizer.pad_token_id, [0.0] * len(trajs)).to(trainer.device)
        with torch.no_grad():
            lp, _ = trainer.policy.logprobs(batch, with_entropy=False)
        return (lp * batch.loss_mask).sum(-1)

    def favour_first_member(inp):  # a shaper: +1 for each group's first member, -1 for the others
        seen["before"] = logp_sums(seen["result"].trajectories)
        first = {}
        return [1.0 if first.setdefault(g, i) == i else -1.0 for i, g in enumerate(inp.group_ids)]

    trainer._rollout.train_batch = capture
    trainer.shapers = [favour_first_member]
    try:
        trainer.step()
        trajs = seen["result"].trajectories
        delta = logp_sums(trajs) - seen["before"]
        sign = favour_first_member(ragen.ShapeInput(scores=[0.0] * len(trajs), group_ids=[t.group_id for t in trajs]))
        assert len(trajs) == 4
        for d, s in zip(delta.tolist(), sign):
            assert d * s > 0, (delta, sign)
    finally:
        trainer.close()


def _metrics(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    drop = ("timing/", "timing_s/", "perf/", "/time/")
    return [{k: v for k, v in row.items() if not any(d in k for d in drop)} for row in rows]


@pytest.mark.slow
def test_resume_after_interruption_matches_uninterrupted(tmp_path, monkeypatch):
    common = ["trainer.steps=4", "trainer.save_freq=2", "trainer.test_freq=2"]
    full = train(small_cfg(tmp_path, *common, "logging.name=full"))

    real_step = Trainer.step

    def interrupted(self):
        if self.step_idx == 3:
            raise KeyboardInterrupt  # killed after step 3; the last checkpoint is step 2
        return real_step(self)

    monkeypatch.setattr(Trainer, "step", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train(small_cfg(tmp_path, *common, "logging.name=cut"))
    monkeypatch.setattr(Trainer, "step", real_step)
    resumed = train(None, resume=tmp_path / "cut")

    a, b = _metrics(full), _metrics(resumed)
    assert [r["step"] for r in b] == [0, 1, 2, 3, 4]
    assert a == b
    final_a = torch.load(next((full / "checkpoints" / "actor" / "step4").glob("*model_states.pt")), weights_only=False)
    final_b = torch.load(
        next((resumed / "checkpoints" / "actor" / "step4").glob("*model_states.pt")), weights_only=False
    )
    for k, v in final_a["module"].items():
        assert torch.equal(v, final_b["module"][k]), k


def test_run_folder_contents(tmp_path):
    run = train(small_cfg(tmp_path, "trainer.steps=1", "logging.name=r"))
    assert (run / "config.yaml").is_file() and (run / "final" / "config.json").is_file()
    assert (run / "final" / "tokenizer.json").is_file()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["step"] == 0 and "val/success" in rows[0]
    for key in (
        "rollout/success",
        "reward/mean",
        "reward/group_std",
        "actor/pg_loss",
        "actor/entropy",
        "actor/grad_norm",
        "perf/tokens_per_s",
        "timing/step_s",
        "perf/cpu_step_s",
        "perf/cpu_update_s",
        "perf/rss_mb",
        "perf/peak_rss_mb",
    ):
        assert key in rows[1], key
    traj = json.loads((run / "trajectories.jsonl").read_text().splitlines()[0])
    for key in (
        "env_name",
        "seed",
        "group_id",
        "turns",
        "input_ids",
        "loss_mask",
        "policy_version",
        "success",
        "truncated",
    ):
        assert key in traj
    assert list((run / "checkpoints" / "actor").glob("step1"))


def test_default_format_penalty_is_below_every_valid_sokoban_turn():
    """A malformed turn executes nothing; if its penalty were above the cost of a valid turn's moves, RL would learn to
    break the format (it did with RAGEN's -0.1 on sokoban: docs/models.md)."""
    from ragen_sokoban.env import STEP_PENALTY

    import ragen

    env = ragen.make_env("sokoban")
    worst_valid_turn = env.config.max_actions_per_turn * STEP_PENALTY  # moves that push nothing
    assert load_config().trainer.format_penalty < worst_valid_turn


def test_turn_placement_puts_each_reward_on_its_turns_last_sampled_token():
    """collate(placement='turn'): a turn's reward + penalty on the last sampled (loss-masked) position inside its span,
    a turn without sampled tokens skipped (no reward, no turn score), the trajectory's score on its last sampled
    token otherwise."""
    from types import SimpleNamespace as NS

    from ragen.train.batch import collate

    mask = [0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0]  # turn 1: positions 2-3; turn 2: none sampled; turn 3: 8-10
    traj = NS(input_ids=list(range(12)), loss_mask=mask, rollout_logprobs=[0.0] * 12, group_id=0, blocks=None,
              turns=[NS(span=(2, 4), reward=1.0, penalty=0.0), NS(span=(4, 6), reward=5.0, penalty=0.0),
                     NS(span=(6, 12), reward=0.5, penalty=-1.0)])
    turn = collate([traj], 0, [0.5], placement="turn")
    assert {j: float(v) for j, v in enumerate(turn.token_rewards[0]) if v} == {3: 1.0, 10: -0.5}
    assert turn.turn_scores[0].tolist() == [1.0, -0.5, 0.0]
    assert turn.turn_ids[0].tolist() == [-1, -1, 0, 0, -1, -1, -1, -1, 2, 2, 2, -1]
    whole = collate([traj], 0, [0.5])
    assert {j: float(v) for j, v in enumerate(whole.token_rewards[0]) if v} == {10: 0.5}
