"""A third-party component that breaks its contract is named in one line: the trainer checks every
estimator's, shaper's and filter's output where it receives it (ragen/train/boundary.py)."""

import pytest
import torch
from click.testing import CliRunner

import ragen
from ragen import hookimpl
from ragen.errors import PluginError
from ragen.plugins.components import make_component
from ragen.plugins.loader import register_plugin, unregister_plugin
from ragen.train import boundary


class _Broken:
    @hookimpl
    def register_advantage_estimators(self, register):
        register("bad-shape", lambda config: (lambda inp: ragen.AdvantageOutput(advantages=inp.mask[:, :-1])))
        register("nan-adv", lambda config: (lambda inp: ragen.AdvantageOutput(advantages=inp.mask * float("nan"))))

    @hookimpl
    def register_reward_shapers(self, register):
        register("too-few", lambda config: (lambda inp: list(inp.scores)[:-1]))

    @hookimpl
    def register_rollout_filters(self, register):
        register("ghost-groups", lambda config: (lambda inp: ragen.FilterResult([999])))
        register("nan-metric", lambda config: (lambda inp: ragen.FilterResult(sorted(set(inp.group_ids)),
                                                                            {"spread": float("nan")})))

    @hookimpl
    def register_algorithms(self, register):
        register("bad-grpo", ragen.AlgorithmPreset(estimator="bad-shape"))


@pytest.fixture
def broken(fresh_plugins):
    register_plugin(_Broken(), "broken-components", dist="ragen-brokencomponents")
    yield
    unregister_plugin("broken-components")


def _one_line(exc, *parts):
    text = str(exc.value)
    assert "\n" not in text, text
    for part in parts:
        assert part in text, text


def test_each_breach_names_the_component_and_its_distribution(broken):
    mask = torch.ones(2, 5)
    inputs = dict(token_rewards=mask, mask=mask, scores=torch.zeros(2), group_ids=torch.tensor([0, 0]))
    with pytest.raises(PluginError) as exc:
        boundary.call_estimator(make_component("estimator", "bad-shape"), False, **inputs)
    _one_line(exc, "estimator 'bad-shape' of ragen-brokencomponents", "shape [2, 4], expected [2, 5]")
    with pytest.raises(PluginError) as exc:
        boundary.call_estimator(make_component("estimator", "nan-adv"), False, **inputs)
    _one_line(exc, "estimator 'nan-adv' of ragen-brokencomponents", "10 non-finite values")
    with pytest.raises(PluginError) as exc:
        boundary.call_shaper(make_component("shaper", "too-few"), scores=[1.0, 2.0, 3.0], group_ids=[0, 0, 1])
    _one_line(exc, "shaper 'too-few' of ragen-brokencomponents", "returned 2 scores for 3 trajectories")
    shown = dict(raw_rewards=[1.0, 0.0], group_ids=[4, 5], successes=[True, False], lengths=[3, 3])
    with pytest.raises(PluginError) as exc:
        boundary.call_filter(make_component("filter", "ghost-groups"), **shown)
    _one_line(exc, "filter 'ghost-groups' of ragen-brokencomponents", "kept unknown group ids [999]")
    with pytest.raises(PluginError) as exc:
        boundary.call_filter(make_component("filter", "nan-metric"), **shown)
    _one_line(exc, "filter 'nan-metric' of ragen-brokencomponents", "metric 'spread' is nan")
    # the repository's own components pass the same checks
    ok = boundary.call_estimator(make_component("estimator", "grpo"), False, **inputs)
    assert ok.advantages.shape == (2, 5)


def test_a_run_with_a_broken_estimator_ends_in_one_line(broken, tmp_path):
    from ragen.cli import cli

    res = CliRunner().invoke(
        cli,
        [
            "run",
            "--env",
            "bandit",
            "--algo",
            "bad-grpo",
            "--model",
            "tiny",
            "--no-warmstart",
            "trainer.steps=1",
            "rollout.n_groups=2",
            "rollout.group_size=2",
            "rollout.n_val_groups=2",
            "rollout.n_paired_levels=2",
            "trainer.short_run_steps=0",
            "trainer.test_freq=0",
            "logging.progress=false",
            "collapse.enabled=false",
            f"logging.run_dir={tmp_path}",
        ],
    )
    assert res.exit_code == 1, res.output
    last = res.output.strip().splitlines()[-1]
    assert last.startswith("Error: estimator 'bad-shape' of ragen-brokencomponents broke its contract: advantages has "
                           "shape"), last
    assert "Traceback" not in res.output


class _Talkative:
    @hookimpl
    def register_reward_shapers(self, register):
        def make(config):
            def shape(inp):
                inp.metrics["clipped"] = float(sum(s > 1 for s in inp.scores))
                return [min(s, 1.0) for s in inp.scores]
            return shape

        register("clip-one", make)


def test_a_component_reports_its_own_metrics(fresh_plugins):
    register_plugin(_Talkative(), "talkative", dist="ragen-talkative")
    try:
        logged = {}
        out, turns = boundary.call_shaper(make_component("shaper", "clip-one"), logged, scores=[0.5, 2.0, 3.0],
                                          group_ids=[0, 0, 1])
        assert out == [0.5, 1.0, 1.0] and turns is None and logged == {"shaper/clip-one/clipped": 2.0}
    finally:
        unregister_plugin("talkative")


class _BadTurns:
    @hookimpl
    def register_reward_shapers(self, register):
        register("short-turns", lambda config: (lambda inp: ragen.ShapeOutput(
            scores=list(inp.scores), turn_scores=[row[:-1] for row in inp.turn_scores])))


def test_a_shaper_dropping_a_turn_reward_is_named(fresh_plugins):
    register_plugin(_BadTurns(), "bad-turns", dist="ragen-badturns")
    try:
        with pytest.raises(PluginError) as exc:
            boundary.call_shaper(make_component("shaper", "short-turns"), {}, scores=[1.0, 2.0], group_ids=[0, 0],
                                 turn_scores=[[0.1, 0.2], [0.3]])
        _one_line(exc, "shaper 'short-turns' of ragen-badturns", "turn_scores has [1, 0]")
    finally:
        unregister_plugin("bad-turns")
