"""Every registered algorithm preset runs two real trainer steps on sokoban with the tiny model."""

import math

import pytest
import torch
from conftest import TINY

import ragen
from ragen.config import load_config
from ragen.train.trainer import Trainer

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
    # the success gate would drop an untrained model's all-fail sokoban groups before any update
    # (tests/train/test_gate.py tests it); here every preset's update must run
    gate = ["algo.options.success_gate=never"]
    cfg = load_config(
        overrides=[*SMALL, f"algo.name={algo}", f"logging.run_dir={tmp_path}", "logging.name=r", *gate, *extra]
    )
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
            assert m["rollout/filter_kept_count"] == 2  # top 25% of 2 groups, at least min(4, 2): both
        if trainer.preset.kl_coef > 0:
            assert math.isfinite(m["actor/kl_loss"])
        if trainer.preset.kl_reward_coef > 0:
            assert math.isfinite(m["actor/kl_reward"]) and m["actor/kl_reward_beta"] == pytest.approx(0.001)
        changed = [k for k, v in trainer.actor.module.named_parameters() if not torch.equal(v, before[k])]
        assert changed, f"{algo}: no actor weight changed"
    finally:
        trainer.close()


# ---- per-key overrides of a preset's nested options merge; options for an unused shaper fail ---------------


def test_one_nested_option_keeps_the_presets_others():
    from ragen.plugins.components import preset_with
    from ragen.plugins.loader import get_registry

    starpo = get_registry("algorithm").get("starpo-s").factory
    out = preset_with(starpo, {"filter_options": {"value": 0.5}})
    assert out.filter_options == {**starpo.filter_options, "value": 0.5} and len(out.filter_options) > 1
    # naming another filter starts from that filter's defaults, not the old filter's options
    assert preset_with(starpo, {"filter": "top-p", "filter_options": {"value": 0.9}}).filter_options == {"value": 0.9}


def test_options_for_a_shaper_the_preset_does_not_apply_are_an_error():
    from ragen.config import load_config
    from ragen.errors import ConfigError
    from ragen.train.provenance import resolved_config

    cfg = load_config(overrides=["algo.name=grpo", "algo.options.shaper_options.reward-norm.method=mean_std"])
    with pytest.raises(ConfigError, match=r"algo.options.shaper_options.reward-norm: the preset applies no shaper"):
        resolved_config(cfg)
    ok = load_config(overrides=["algo.name=grpo", "algo.options.shapers=[reward-norm]",
                                "algo.options.shaper_options.reward-norm.method=mean_std"])
    assert resolved_config(ok)["algo"]["options"]["shaper_options"]["reward-norm"]["method"] == "mean_std"
