"""ragen.testing: the contract checks a plugin's tests call pass on well-behaved components and name the
property each broken one violates; it is registered as a pytest plugin, and importing it loads neither pytest nor
torch."""

import json
import math
import subprocess
import sys
import time

import pytest
import torch
from conftest import ROOT

import ragen
from ragen import AdvantageOutput, FilterResult, Parsed, hookimpl
from ragen.plugins.loader import register_plugin, unregister_plugin
from ragen.testing import (
    KINDS,
    assert_checks_pass,
    check_component,
    check_env,
    check_estimator,
    check_filter,
    check_parser,
    check_shaper,
    component_contract_tests,
)
from ragen.testing import checks as checks_module
from ragen.testing.batches import SCENARIOS, advantage_input, sample_trajectories, scenarios


# ---- broken components: each violates one property --------------------------------------------------------------
def _parse_ok(text):
    return ragen.parse_response(text)


BROKEN = {
    "parser": {
        "raises": lambda text: _parse_ok(text) if text.strip() else [][0],  # IndexError on an empty response
        "tuple": lambda text: (True, "", text),
        "int-matched": lambda text: Parsed(int(_parse_ok(text).matched), "", _parse_ok(text).answer),
        "random": lambda text: Parsed(
            _parse_ok(text).matched, str(__import__("random").random()), _parse_ok(text).answer
        ),
        "shout": lambda text: Parsed(True, "", text.upper()),  # reads no format: the prompted answer is lost
        "slow": lambda text: (time.sleep(0.6 * (len(text) > 10_000)), _parse_ok(text))[1],
    },
    "shaper": {
        "drops-one": lambda inp: list(inp.scores)[1:],
        "nan": lambda inp: [math.nan for _ in inp.scores],
        "strings": lambda inp: [str(s) for s in inp.scores],
        "in-place": lambda inp: [inp.scores.__setitem__(i, s + 1) or s + 1 for i, s in enumerate(inp.scores)],
        "positional": lambda inp: [s + i for i, s in enumerate(inp.scores)],
        "random": lambda inp: [s + __import__("random").random() for s in inp.scores],
    },
    "estimator": {
        "tuple": lambda b: (b.mask, None),
        "no-mask": lambda b: AdvantageOutput(b.scores[:, None].expand(b.mask.shape).clone()),
        "wrong-shape": lambda b: AdvantageOutput(b.scores.clone()),
        "in-place": lambda b: AdvantageOutput(b.token_rewards.mul_(2) * b.mask),
        "by-position": lambda b: AdvantageOutput(torch.arange(len(b.scores), dtype=torch.float32)[:, None] * b.mask),
        "mean-over-mask": lambda b: AdvantageOutput(b.mask * (b.token_rewards * b.mask).sum() / b.mask.sum()),
        "critic-no-returns": lambda b: AdvantageOutput((b.values - b.values.mean()) * b.mask),
        "random": lambda b: AdvantageOutput(torch.rand(b.mask.shape) * b.mask),
    },
    "filter": {
        "unknown-group": lambda inp: FilterResult([max(inp.group_ids) + 1]),
        "nan-metric": lambda inp: FilterResult(sorted(set(inp.group_ids)), {"rollout/x": math.nan}),
        "first-row": lambda inp: FilterResult([inp.group_ids[0]]),
        "in-place": lambda inp: FilterResult([inp.group_ids[0]] if inp.raw_rewards.sort() is None else []),
        "dict": lambda inp: {"kept_groups": list(inp.group_ids)},
        "random": lambda inp: FilterResult(sorted(set(inp.group_ids)), {"rollout/r": __import__("random").random()}),
    },
}

#: broken component -> the check that must fail (and no other, unless listed in ALSO)
EXPECT = {
    ("parser", "raises"): "returns Parsed", ("parser", "tuple"): "returns Parsed",
    ("parser", "int-matched"): "returns Parsed", ("parser", "random"): "deterministic",
    ("parser", "shout"): "prompted format", ("parser", "slow"): "linear time",
    ("shaper", "drops-one"): "scores", ("shaper", "nan"): "scores", ("shaper", "strings"): "scores",
    ("shaper", "in-place"): "input unchanged", ("shaper", "positional"): "order", ("shaper", "random"): "deterministic",
    ("estimator", "tuple"): "advantages", ("estimator", "no-mask"): "advantages",
    ("estimator", "wrong-shape"): "advantages", ("estimator", "in-place"): "input unchanged",
    ("estimator", "by-position"): "order", ("estimator", "mean-over-mask"): "masked-out row",
    ("estimator", "critic-no-returns"): "critic values", ("estimator", "random"): "deterministic",
    ("filter", "unknown-group"): "result", ("filter", "nan-metric"): "result", ("filter", "first-row"): "order",
    ("filter", "in-place"): "input unchanged", ("filter", "dict"): "result", ("filter", "random"): "deterministic",
}
#: the other checks that fail too: they validate the same result on their way (scores, advantages, kept groups) or
#: call the component on inputs it breaks on
ALSO = {
    ("parser", "raises"): {"deterministic"},
    ("parser", "tuple"): {"prompted format"},
    ("shaper", "drops-one"): {"deterministic", "order"}, ("shaper", "nan"): {"deterministic", "order"},
    ("shaper", "strings"): {"deterministic", "order"}, ("shaper", "random"): {"order"},
    ("estimator", "tuple"): {"critic values", "deterministic", "order", "masked-out row"},
    ("estimator", "no-mask"): {"critic values", "masked-out row"},
    ("estimator", "wrong-shape"): {"critic values", "masked-out row"},
    ("estimator", "in-place"): {"deterministic", "order"},  # the rewards it doubles in place feed its next calls
    ("estimator", "random"): {"order"},
    ("filter", "unknown-group"): {"deterministic", "order"}, ("filter", "nan-metric"): {"deterministic", "order"},
    ("filter", "in-place"): {"order"}, ("filter", "dict"): {"deterministic", "order"}, ("filter", "random"): {"order"},
}


class BrokenComponents:
    @hookimpl
    def register_action_parsers(self, register):
        for name, fn in BROKEN["parser"].items():
            register(f"broken-{name}", lambda cfg, fn=fn: fn)

    @hookimpl
    def register_reward_shapers(self, register):
        for name, fn in BROKEN["shaper"].items():
            register(f"broken-{name}", lambda cfg, fn=fn: fn)

    @hookimpl
    def register_advantage_estimators(self, register):
        for name, fn in BROKEN["estimator"].items():
            register(f"broken-{name}", lambda cfg, fn=fn: fn)

    @hookimpl
    def register_rollout_filters(self, register):
        for name, fn in BROKEN["filter"].items():
            register(f"broken-{name}", lambda cfg, fn=fn: fn)


@pytest.fixture
def broken(fresh_plugins, monkeypatch):
    monkeypatch.setattr(checks_module, "PARSE_SECONDS", 0.5)  # the slow parser sleeps 0.6 s on a long response
    register_plugin(BrokenComponents(), "broken-components", dist="ragen-broken-components")
    yield
    unregister_plugin("broken-components")


@pytest.mark.parametrize("kind, name", sorted(EXPECT), ids=[f"{k}-{n}" for k, n in sorted(EXPECT)])
def test_each_broken_component_fails_the_check_it_violates(broken, kind, name):
    checks = check_component(kind, f"broken-{name}")
    failed = {c.name for c in checks if not c.ok}
    assert failed == {EXPECT[kind, name]} | ALSO.get((kind, name), set()), checks
    with pytest.raises(AssertionError, match=rf"{kind} 'broken-{name}': \d+ of {len(checks)} checks failed:\n"
                                             rf"(.|\n)*  {EXPECT[kind, name]}: "):
        assert_checks_pass(checks, f"{kind} 'broken-{name}'")


def test_every_check_has_a_broken_component_that_fails_it():
    for kind in KINDS:
        labels = {label for label, _ in checks_module._CHECKS[kind]}
        assert labels == {EXPECT[k, n] for k, n in EXPECT if k == kind}, kind


# ---- the shipped components pass, with their options ------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_every_shipped_component_passes(kind):
    names = [c.name for c in ragen.list_components(kind)]
    assert names
    for name in names:
        assert_checks_pass(check_component(kind, name), f"{kind} {name!r}")


def test_the_kind_helpers_and_options():
    assert [c.ok for c in check_parser("think-answer", enable_think=False)] == [True] * 4
    assert all(c.ok for c in check_shaper("reward-norm", grouping="variant", method="asym_clip"))
    assert all(c.ok for c in check_estimator("gae", whiten=False))
    critic = {c.name: c for c in check_estimator("gae")}["critic values"]
    assert critic.ok and critic.detail.startswith("a critic estimator: needs values (ValueError")
    assert all(c.ok for c in check_filter("v2", metric="entropy"))  # needs_entropy: the input carries entropies
    with pytest.raises(ragen.ConfigError, match="enable_thnk"):
        check_parser("think-answer", enable_thnk=False)
    with pytest.raises(ragen.UnknownNameError):
        check_filter("no-such-filter")
    with pytest.raises(ValueError, match="kind"):
        check_component("env", "sokoban")


test_parser_contract_from_the_helper = component_contract_tests(
    "parser", ["answer", ("think-answer", {"enable_think": False})]
)


def test_component_contract_tests_builds_a_parametrised_test():
    marks = test_parser_contract_from_the_helper.pytestmark
    (param,) = [m for m in marks if m.name == "parametrize"]
    assert param.args[1] == [("answer", {}), ("think-answer", {"enable_think": False})]
    assert param.kwargs["ids"] == ["answer", "think-answer-enable_think=False"]
    assert test_parser_contract_from_the_helper.__name__ == "test_parser_contract"


def test_env_checks_are_the_checkers():
    from ragen.envs import checker

    assert check_env is checker.check_env


# ---- the synthetic batches are what the trainer builds -----------------------------------------------------------
def test_sample_trajectories_are_consistent():
    for name, trajs in scenarios().items():
        groups = [t.group_id for t in trajs]
        assert sorted({groups.count(g) for g in groups}) == sorted(set(SCENARIOS[name]["groups"])), name
        for t in trajs:
            assert len(t.input_ids) == len(t.loss_mask) == len(t.rollout_logprobs)
            assert t.response_length == sum(end - start for start, end in (turn.span for turn in t.turns))
            assert t.score == pytest.approx(sum(turn.reward + turn.penalty for turn in t.turns))
    equal = scenarios()["equal scores in every group"]
    assert len({(t.group_id, t.score) for t in equal}) == 2
    assert sample_trajectories(5) == sample_trajectories(5) != sample_trajectories(6)


def test_advantage_input_places_rewards_like_the_trainer():
    trajs = sample_trajectories(1, (2, 3))
    traj = advantage_input(trajs)
    for i, t in enumerate(trajs):
        assert traj.token_rewards[i].sum().item() == pytest.approx(t.score, abs=1e-6)
        assert traj.token_rewards[i, t.last_token_index].item() == pytest.approx(t.score, abs=1e-6)
    turn = advantage_input(trajs, placement="turn")
    assert turn.token_rewards.sum().item() == pytest.approx(sum(t.score for t in trajs), abs=1e-5)
    assert (turn.turn_ids >= 0).sum().item() == turn.mask.sum().item()
    dummy = advantage_input(trajs[:1], dummy=True)
    assert dummy.mask.sum().item() == 0 and advantage_input(trajs, critic=False).values is None


# ---- packaging: a pytest plugin that imports nothing heavy ---------------------------------------------------------
def test_importing_ragen_testing_loads_neither_pytest_nor_torch():
    code = (
        "import sys, ragen.testing; print(json.dumps([m for m in ('pytest', 'torch', '_pytest') if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True, text=True, check=True,
                         cwd=ROOT.parent)
    assert json.loads(out.stdout) == []


def test_ragen_testing_is_the_pytest11_entry_point_and_provides_the_fixtures(request):
    import ragen.testing
    import ragen.testing.fixtures

    # pytest loaded it from the installed entry point (registered under the entry point's name), not from a conftest
    assert request.config.pluginmanager.get_plugin("ragen") is ragen.testing
    assert request.config.pluginmanager.is_registered(ragen.testing.fixtures)
    assert "fresh_plugins" in request.fixturenames or request.getfixturevalue("fresh_plugins")
    train = request.getfixturevalue("train_two_steps")
    assert callable(train)
    text = (ROOT / "pyproject.toml").read_text()
    assert '[project.entry-points.pytest11]\nragen = "ragen.testing"' in text
    assert "pytest" not in text.split("[project.optional-dependencies]")[0]  # not a dependency of ragen itself
