"""Every registered algorithm preset runs two real trainer steps on sokoban with the tiny model (issue 6)."""

import math

import pytest
import torch

import ragen
from ragen.config import load_config
from ragen.train.trainer import Trainer
from conftest import TINY

PRESETS = ["ppo", "grpo", "dr-grpo", "rloo", "reinforce++", "reinforce++-baseline", "starpo", "starpo-s", "dapo",
           "dapo-ragen", "gspo"]

SMALL = [
    *TINY,
    "env.name=sokoban",
    "env.options.response_length=16",
    "env.options.max_turns=2",
    "rollout.n_groups=2",
    "rollout.group_size=3",
    "rollout.n_val_groups=1",
    "trainer.ppo_mini_batch_size=6",
    "trainer.micro_batch_size=3",
    "trainer.actor_lr=1e-3",
    "logging.progress=false",
]


def test_every_registered_preset_is_covered():
    assert set(PRESETS) <= {c.name for c in ragen.list_components("algorithm")}


@pytest.mark.slow
@pytest.mark.parametrize("algo", PRESETS)
def test_preset_two_steps_on_sokoban(tmp_path, algo):
    # DAPO drops groups whose members all score the same; an untrained tiny model's groups all do, so its rollouts come
    # from the scripted expert with noise (off-policy, but the filter, advantages and update run for real)
    extra = ["rollout.engine=expert", "warmstart.noise=0.5", "env.options.response_length=256",
             "algo.options.filter_options.outcome=reward"] if algo == "dapo" else []
    cfg = load_config(overrides=[*SMALL, f"algo.name={algo}", f"logging.run_dir={tmp_path}", "logging.name=r", *extra])
    trainer = Trainer(cfg, tmp_path / "r")
    try:
        assert (trainer.critic is not None) == trainer.preset.use_critic
        assert (trainer.reference is not None) == trainer.preset.needs_reference
        before = {k: v.detach().clone() for k, v in trainer.actor.module.named_parameters()}
        for _ in range(2):
            m = trainer.step().metrics
            assert m["rollout/num_trajectories"] == 6
            if not m["rollout/empty_after_filter"]:
                for key in ("actor/pg_loss", "actor/grad_norm", "actor/advantage_mean"):
                    assert math.isfinite(m[key]), (key, m[key])
        if algo == "starpo-s":
            assert m["rollout/filter_kept_count"] == 1  # top 25% of 2 groups -> at least one
        if trainer.preset.kl_coef > 0:
            assert math.isfinite(m["actor/kl_loss"])
        if trainer.preset.kl_reward_coef > 0:
            assert math.isfinite(m["actor/kl_reward"]) and m["actor/kl_reward_beta"] == pytest.approx(0.001)
        changed = [k for k, v in trainer.actor.module.named_parameters() if not torch.equal(v, before[k])]
        assert changed, f"{algo}: no actor weight changed"
    finally:
        trainer.close()
