"""One test per hook: a throwaway plugin registers through it, the component is usable, then it is removed."""

import attrs
import pytest
import torch

import ragen
from ragen import AdvantageInput, AlgorithmPreset, FilterResult, hookimpl, option
from ragen.plugins.loader import get_registry, register_plugin, unregister_plugin


@attrs.frozen(kw_only=True)
class ScaleConfig:
    factor: float = option(2.0, "Scale factor.")


class Throwaway:
    """A plugin implementing every hook, each with one component named `throwaway-*`."""

    @hookimpl
    def register_envs(self, register):

        register("throwaway-env", CorridorEnv, config=CorridorConfig, defaults={"length": 5})

    @hookimpl
    def register_action_parsers(self, register):
        register("throwaway-parser", lambda cfg: (lambda text: ragen.Parsed(True, "", text.upper())))

    @hookimpl
    def register_reward_shapers(self, register):
        register("throwaway-shaper", lambda cfg: (lambda inp: [s * cfg.factor for s in inp.scores]), config=ScaleConfig)

    @hookimpl
    def register_advantage_estimators(self, register):
        register("throwaway-estimator", lambda cfg: (lambda b: ragen.AdvantageOutput(b.mask * 7.0)))

    @hookimpl
    def register_rollout_filters(self, register):
        register("throwaway-filter", lambda cfg: (lambda inp: FilterResult([min(inp.group_ids)])))

    @hookimpl
    def register_algorithms(self, register):
        register("throwaway-algo", AlgorithmPreset(estimator="throwaway-estimator", filter="throwaway-filter"))


@attrs.frozen(kw_only=True)
class CorridorConfig(ragen.EnvConfig):
    length: int = option(7, "Cells.")


class CorridorEnv(ragen.Env):
    config_cls = CorridorConfig

    def __init__(self, config=None, render_mode="ansi"):
        super().__init__(config, render_mode)
        self.action_names = ["Left", "Right"]

    def _reset(self, seed, options):
        self.pos = seed % self.config.length
        self.task_id = f"corridor/s{seed}"
        return str(self.pos), {}

    def _step(self, action):
        ok = self.canonical_action(action) is not None
        return str(self.pos), 0.0, False, False, {"success": False, "action_is_valid": ok, "action_is_effective": False}


@pytest.fixture
def throwaway(fresh_plugins):
    register_plugin(Throwaway(), "throwaway", dist="ragen-throwaway")
    yield
    unregister_plugin("throwaway")
    assert "throwaway-env" not in get_registry("env")


def test_hook_register_envs(throwaway):
    item = get_registry("env").get("throwaway-env")
    assert item.dist == "ragen-throwaway"
    env = ragen.make_env("throwaway-env")
    assert env.config.length == 5 and env.name == "throwaway-env"
    assert ragen.make_env("throwaway-env", length=9).config.length == 9
    obs, info = env.reset(seed=3)
    assert obs == "3" and info["task_id"] == "corridor/s3"


def test_hook_register_action_parsers(throwaway):
    parse = ragen.make_component("parser", "throwaway-parser")
    assert parse("up").answer == "UP"


def test_hook_register_reward_shapers(throwaway):
    shape = ragen.make_component("shaper", "throwaway-shaper", factor=3.0)
    assert shape(ragen.ShapeInput(scores=[1.0, -2.0], group_ids=[0, 0])) == [3.0, -6.0]
    with pytest.raises(ragen.ConfigError, match="factr"):
        ragen.make_component("shaper", "throwaway-shaper", factr=3.0)


def test_hook_register_advantage_estimators(throwaway):
    est = ragen.make_component("estimator", "throwaway-estimator")
    mask = torch.tensor([[0.0, 1.0]])
    out = est(AdvantageInput(token_rewards=mask, mask=mask, scores=torch.tensor([1.0]), group_ids=torch.tensor([0])))
    assert out.advantages.tolist() == [[0.0, 7.0]]


def test_hook_register_rollout_filters(throwaway):
    flt = ragen.make_component("filter", "throwaway-filter")
    assert flt(ragen.FilterInput(raw_rewards=[1.0, 2.0], group_ids=[4, 5])).kept_groups == [4]


def test_hook_register_algorithms(throwaway):
    preset = get_registry("algorithm").get("throwaway-algo").factory
    assert preset.estimator == "throwaway-estimator" and not preset.use_critic
