"""RunConfig: files, overrides, and errors that name the key."""

import pytest

from ragen import make_env
from ragen.config import RunConfig, apply_overrides, load_config, structure
from ragen.errors import ConfigError


def test_defaults():
    cfg = load_config()
    assert cfg == RunConfig()
    assert cfg.env.name == "sokoban" and cfg.algo.name == "grpo" and cfg.model.name == "small"


def test_an_integer_too_big_for_any_field_is_refused_naming_key_value_and_bound(tmp_path):
    t = tmp_path / "big.toml"
    t.write_text("[trainer]\nsteps = 99999999999999999999\n")
    with pytest.raises(ConfigError) as exc:
        load_config(t)
    assert str(exc.value) == ("trainer.steps: expected int within -(2**53 - 1) .. 2**53 - 1 (the integers a float64 "
                              "holds exactly), got 99999999999999999999")
    # a plugin's config fields are structured the same way
    with pytest.raises(ConfigError, match=r"^sokoban\.max_turns: expected int within -\(2\*\*53 - 1\) \.\. "
                                          r"2\*\*53 - 1 .*, got -99999999999999999999$"):
        make_env("sokoban", max_turns=-99999999999999999999)


def test_yaml_and_toml_files_and_overrides(tmp_path):
    y = tmp_path / "c.yaml"
    y.write_text("trainer:\n  steps: 7\nenv:\n  name: frozenlake\n  options:\n    max_turns: 3\n")
    t = tmp_path / "c.toml"
    t.write_text("[trainer]\nsteps = 9\n[rollout]\ntop_p = 0.9\n")
    cfg = load_config(y, ["trainer.steps=11", "env.options.max_actions_per_turn=1"])
    assert cfg.trainer.steps == 11 and cfg.env.name == "frozenlake"
    assert cfg.env.options == {"max_turns": 3, "max_actions_per_turn": 1}
    assert load_config(t).trainer.steps == 9 and load_config(t).rollout.top_p == 0.9


@pytest.mark.parametrize(
    "override, message",
    [
        (["trainer.stepz=3"], "trainer.stepz: unknown key; did you mean 'steps'?"),
        (["trainer.steps=many"], "trainer.steps: expected int, got 'many'"),
        (["modle.name=x"], "modle: unknown key; did you mean 'model'?"),
        (["rollout"], "expected section.key=value"),
        (["trainer.steps.x=1"], "trainer.steps: expected int, got {'x': 1}"),
        # a section's own validator: the message keeps its words and gains the section path
        (["trainer.zero_stage=3"], "trainer.zero_stage: must be 0, 1 or 2, got 3"),
        (["collapse.num_samples=1"], "collapse.num_samples: must be >= 2"),
    ],
)
def test_errors_name_the_key(override, message):
    with pytest.raises(ConfigError) as exc:
        load_config(overrides=override)
    assert message in str(exc.value)


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid yaml"):
        load_config(bad)


def test_override_values_are_yaml():
    assert apply_overrides({}, ["a.b=[8, 8]", "a.c=true", "d=0.5"]) == {"a": {"b": [8, 8], "c": True}, "d": 0.5}


def test_structure_rejects_non_mapping():
    with pytest.raises(ConfigError, match="trainer: expected TrainerSection, got 3"):
        structure(RunConfig, {"trainer": 3})


def test_docs_config_is_current():
    from conftest import ROOT

    from ragen.config import config_markdown

    assert (ROOT / "docs" / "config.md").read_text() == config_markdown(), (
        "run: python -m ragen.config > docs/config.md"
    )


def test_ragen_reference_config_loads():
    from conftest import ROOT

    cfg = load_config(ROOT / "configs" / "ragen.yaml")
    assert cfg.rollout.n_groups * cfg.rollout.group_size == 128 and cfg.trainer.actor_lr == 1e-6
    # RAGEN's first-match parse: text after </answer> is ignored there (ragen's parsers reject it by default)
    from ragen.plugins.components import make_component

    parse = make_component("parser", "think-answer", **cfg.rollout.parser_options)
    assert parse("I go up.</think><answer>Up</answer> and more").matched
