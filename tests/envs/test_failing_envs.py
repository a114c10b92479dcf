"""Robust env failures: an env that raises for some seeds while the tiny tokenizer's corpus is built is
skipped and counted, not a start-up crash; an env registered without config= gets its EnvConfig."""

import sys

import attrs
import pytest
import structlog.testing
from conftest import ROOT

from ragen import EnvConfig, hookimpl, option
from ragen.errors import RegistrationError
from ragen.plugins.components import component_config, make_env
from ragen.plugins.loader import broken_plugins, get_registry, register_plugin

FIXTURE = ROOT / "tests" / "fixture_plugins" / "ragen-tinyenv"
sys.path.insert(0, str(FIXTURE))
from ragen_tinyenv import CoinEnv  # noqa: E402  (the fixture plugin's env, not installed in the test venv)


class FlakyCoin(CoinEnv):
    """tiny-coin whose reset raises on seeds = 1 mod 3 and whose step raises on seeds = 2 mod 3."""

    def _reset(self, seed, options):
        if seed % 3 == 1:
            raise RuntimeError(f"reset exploded on seed {seed}")
        self.seed_ = seed
        return super()._reset(seed, options)

    def _step(self, action):
        if self.seed_ % 3 == 2:
            raise ValueError("step exploded")
        return super()._step(action)


def test_corpus_skips_and_counts_episodes_that_raise():
    from ragen.models.builtin import env_corpus

    with structlog.testing.capture_logs() as events:
        texts = list(env_corpus(FlakyCoin(), seeds=9))
    assert sum("The coin shows" in t for t in texts) == 3  # seeds 0, 3, 6 are whole episodes
    assert not any("exploded" in t for t in texts)
    [record] = [e for e in events if e["event"] == "tokenizer_corpus_episodes_skipped"]
    assert record["log_level"] == "warning" and (record["raised"], record["episodes"]) == (6, 9)
    assert record["first"] == "seed 1: RuntimeError: reset exploded on seed 1"


class _Flaky:
    @hookimpl
    def register_envs(self, register):
        register("flaky-coin", FlakyCoin)  # no config=: gets FlakyCoin.config_cls (EnvConfig)


def test_an_env_registered_without_config_gets_its_env_config(fresh_plugins):
    register_plugin(_Flaky(), "flaky", dist="ragen-flaky")
    item = get_registry("env").get("flaky-coin")
    assert item.config is EnvConfig
    assert component_config(item, {"max_turns": 3}).max_turns == 3  # the trainer reads the budget from this
    assert make_env("flaky-coin", max_turns=2).config.max_turns == 2


@attrs.frozen
class NotAnEnvConfig:
    size: int = option(3, "A size.")


class _BadConfig:
    @hookimpl
    def register_envs(self, register):
        register("bad-config-coin", FlakyCoin, config=NotAnEnvConfig)


def test_an_env_config_that_is_not_an_env_config_is_refused_at_registration(fresh_plugins):
    register_plugin(_BadConfig(), "badcfg", dist="ragen-badcfg")
    with pytest.warns(Warning, match="ragen-badcfg"):
        assert "bad-config-coin" not in get_registry("env")
    [bad] = [b for b in broken_plugins() if b.dist == "ragen-badcfg"]
    assert "must subclass ragen.EnvConfig" in bad.error
    with pytest.raises(RegistrationError, match="must subclass ragen.EnvConfig"):
        from ragen.plugins.registry import Registry

        Registry("env").register("x", FlakyCoin, dist="d", config=NotAnEnvConfig)


def test_the_fixture_plugin_registers_tiny_coin_with_a_config(fresh_plugins):
    import ragen_tinyenv

    if "tiny-coin" not in get_registry("env"):  # discovery finds it already when a pip build left metadata beside it
        register_plugin(ragen_tinyenv, "tinyenv", dist="ragen-tinyenv")
    assert get_registry("env").get("tiny-coin").config is EnvConfig


class _FlakyWithConfig:
    @hookimpl
    def register_envs(self, register):
        register("flaky-coin", FlakyCoin, config=EnvConfig)


def test_a_run_starts_and_steps_with_an_env_that_raises_for_some_seeds(fresh_plugins, tmp_path):
    """The tiny model's tokenizer corpus is built from the env at start-up (the old crash); then train seeds that raise
    at reset or in step are dropped and counted in rollout/failed_envs."""
    from ragen.config import load_config
    from ragen.train.trainer import Trainer

    register_plugin(_FlakyWithConfig(), "flaky", dist="ragen-flaky")
    cfg = load_config(
        overrides=[
            "env.name=flaky-coin",
            "model.name=tiny",
            "rollout.engine=expert",
            "rollout.n_groups=3",
            "rollout.group_size=2",
            "trainer.ppo_mini_batch_size=2",
            "logging.progress=false",
            "collapse.enabled=false",
            f"logging.run_dir={tmp_path}",
        ]
    )
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        m = trainer.step().metrics
        assert m["rollout/failed_envs"] == 4.0 and m["rollout/num_trajectories"] == 2.0  # seeds 10000..10002
    finally:
        trainer.close()
