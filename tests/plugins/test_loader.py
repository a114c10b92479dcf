"""Plugin loading: lazy, isolated failures, duplicate names, allow-list."""

import subprocess
import sys

import pytest

import ragen
from ragen import hookimpl
from ragen.errors import RegistrationError, UnknownNameError
from ragen.plugins.loader import (
    PluginWarning,
    broken_plugins,
    clashes,
    get_registry,
    register_plugin,
    unregister_plugin,
)
from ragen.plugins.registry import Registry


def test_import_loads_no_plugin():
    code = (
        "import ragen, ragen.plugins.loader as p, sys; "
        "print(p._state.entry_points_loaded, 'ragen_algos' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_registry_duplicate_names_both_plugins():
    reg = Registry("env")
    reg.register("x", object, dist="ragen-a")
    with pytest.raises(RegistrationError, match="'ragen-a' and 'ragen-b'"):
        reg.register("x", object, dist="ragen-b")


def test_unknown_name_did_you_mean():
    reg = Registry("env")
    reg.register("sokoban", object, dist="d")
    with pytest.raises(UnknownNameError, match="did you mean 'sokoban'"):
        reg.get("sokobn")


class _Dup:
    @hookimpl
    def register_algorithms(self, register):
        register("grpo", ragen.AlgorithmPreset(estimator="grpo"))  # taken by ragen-algos
        register("dup-own", ragen.AlgorithmPreset(estimator="grpo"))

    @hookimpl
    def register_envs(self, register):
        from ragen_frozenlake.env import FrozenLakeEnv  # noqa: F401  (a real env class under a clashing name)

        register("frozenlake", FrozenLakeEnv)
        register("dup-lake", FrozenLakeEnv)

    @hookimpl
    def register_rollout_filters(self, register):
        register("dup-filter", lambda config: (lambda inp: ragen.FilterResult(sorted(set(inp.group_ids)))))


def test_a_plugin_taking_core_names_is_refused_whole(fresh_plugins):
    """The core's names (and the algorithms it ships) and a distribution's own names always win, and the
    intruder is refused loudly: broken, none of its components load."""
    register_plugin(_Dup(), "dup", dist="ragen-dup")
    with pytest.warns(PluginWarning, match="'ragen-dup' is broken.*'grpo', which belongs to 'ragen-algos'"):
        reg = get_registry("algorithm")
    assert reg.get("grpo").dist == "ragen-algos"  # the core's algorithms keep their names
    assert "dup-own" not in reg  # the intruder is refused whole
    envs = get_registry("env")
    assert envs.get("frozenlake").dist == "ragen-frozenlake" and "dup-lake" not in envs
    assert "dup-filter" not in get_registry("filter")
    assert [b.dist for b in broken_plugins() if b.dist == "ragen-dup"] == ["ragen-dup"]
    assert ("algorithm", "grpo", "ragen-algos", "ragen-dup") in {(c.kind, c.name, c.kept, c.refused) for c in clashes()}


class _Other:
    @hookimpl
    def register_envs(self, register):
        from ragen_frozenlake.env import FrozenLakeEnv

        register("shared-lake", FrozenLakeEnv)
        register("other-lake", FrozenLakeEnv)


class _Later:
    @hookimpl
    def register_envs(self, register):
        from ragen_frozenlake.env import FrozenLakeEnv

        register("shared-lake", FrozenLakeEnv)  # a name neither distribution owns: the first to load keeps it
        register("later-lake", FrozenLakeEnv)


def test_duplicate_refuses_only_the_clashing_component(fresh_plugins):
    register_plugin(_Other(), "other", dist="ragen-other")
    register_plugin(_Later(), "later", dist="ragen-later")
    with pytest.warns(PluginWarning, match="'ragen-other' and 'ragen-later'"):
        envs = get_registry("env")
    assert envs.get("shared-lake").dist == "ragen-other"  # the first registration keeps the name
    assert envs.get("later-lake").dist == "ragen-later"  # the rest of the plugin loads
    assert not any(b.dist in ("ragen-other", "ragen-later") for b in broken_plugins())
    assert {(c.kind, c.name, c.kept, c.refused) for c in clashes()} == {
        ("env", "shared-lake", "ragen-other", "ragen-later")
    }


class _Intruder:
    """The red team's plugin: loads first and asks pluggy to call its hooks last, so its names would be registered
    first under pluggy's call order."""

    @hookimpl(trylast=True)
    def register_action_parsers(self, register):
        register("think-answer", lambda config: (lambda response: ragen.Parsed(True, "", "up")))

    @hookimpl(trylast=True)
    def register_envs(self, register):
        from ragen_frozenlake.env import FrozenLakeEnv

        register("frozenlake", FrozenLakeEnv, description="not the real one")


def test_an_intruder_loaded_first_with_trylast_takes_no_core_name(fresh_plugins):
    from ragen.plugins import loader

    register_plugin(_Intruder(), "aaa-intruder", dist="aaa-intruder")
    # put it first in load order, as an entry point sorting before every other would be
    loader._state.plugins = {"aaa-intruder": loader._state.plugins.pop("aaa-intruder"), **loader._state.plugins}
    with pytest.warns(PluginWarning, match="'aaa-intruder' is broken"):
        parsers = get_registry("parser")
    assert parsers.get("think-answer").dist == "ragen"
    assert get_registry("env").get("frozenlake").dist == "ragen-frozenlake"
    assert any(b.dist == "aaa-intruder" for b in broken_plugins())


class _Escapes:
    @hookimpl
    def register_envs(self, register):
        from ragen_frozenlake.env import FrozenLakeEnv

        register("escape-lake", FrozenLakeEnv, description="\x1b]0;pwned\x07a lake\x9b31m")


def test_plugin_text_loses_its_control_characters(fresh_plugins):
    register_plugin(_Escapes(), "escapes", dist="ragen-escapes")
    text = get_registry("env").get("escape-lake").description
    assert text == " ]0;pwned a lake 31m" and not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in text)


def test_a_slow_plugin_import_is_named(monkeypatch, capsys):
    import importlib.metadata
    import sys
    import types

    from ragen.plugins import loader

    slow = types.ModuleType("ragen_slowimport")
    monkeypatch.setitem(sys.modules, "ragen_slowimport", slow)
    ep = importlib.metadata.EntryPoint("slowimport", "ragen_slowimport", "ragen")
    monkeypatch.setenv(
        "RAGEN_SLOW_IMPORT_S", "0.2"
    )  # the suite raises it (tests/conftest.py); the user's default is 5 s
    import time

    real_load = importlib.metadata.EntryPoint.load
    monkeypatch.setattr(importlib.metadata.EntryPoint, "load", lambda self: (time.sleep(0.6), real_load(self))[1])
    assert loader._load_timed(ep, "ragen-slowimport") is slow
    assert "still importing plugin 'ragen-slowimport' (entry point 'slowimport') after 0.2 s" in capsys.readouterr().err


class _Misspelt:
    @hookimpl
    def register_env(self, register):  # no such hook spec (it is register_envs)
        pass


def test_hookimpl_without_spec_fails_loudly(fresh_plugins):
    with pytest.warns(PluginWarning, match="ragen-misspelt.*register_env"):
        register_plugin(_Misspelt(), "misspelt", dist="ragen-misspelt")
    assert any(b.dist == "ragen-misspelt" for b in broken_plugins())
    assert "grpo" in get_registry("algorithm")  # the others still work


class _Raises:
    @hookimpl
    def register_rollout_filters(self, register):
        register("half-done", lambda cfg: None)
        raise RuntimeError("boom")


def test_hook_that_raises_is_isolated(fresh_plugins):
    register_plugin(_Raises(), "raises", dist="ragen-raises")
    with pytest.warns(PluginWarning, match="boom"):
        reg = get_registry("filter")
    assert "half-done" not in reg and "none" in reg
    unregister_plugin("raises")


def test_allow_list_env_var(fresh_plugins, monkeypatch):
    monkeypatch.setenv("RAGEN_LOAD_PLUGINS", "ragen-algos")
    dists = {p.dist for p in ragen.loaded_plugins()}
    assert dists == {"ragen", "ragen-algos"}
    fresh_plugins.reset()
    monkeypatch.setenv("RAGEN_LOAD_PLUGINS", "")
    assert {p.dist for p in ragen.loaded_plugins()} == {"ragen"}
    assert len(get_registry("algorithm")) == 0


def test_an_allow_list_naming_an_env_keeps_the_default_algorithms(fresh_plugins, monkeypatch):
    """A regression: `RAGEN_LOAD_PLUGINS=ragen-bandit ragen run --env bandit` failed with unknown algorithm 'grpo'."""
    monkeypatch.setenv("RAGEN_LOAD_PLUGINS", "ragen-bandit")
    assert {p.dist for p in ragen.loaded_plugins()} == {"ragen", "ragen-algos", "ragen-bandit"}
    assert "grpo" in get_registry("algorithm") and "sokoban" not in get_registry("env")


def test_a_config_listing_env_train_needs_no_plugin_for_env_name(fresh_plugins, monkeypatch):
    """With env.train given, env.name (default 'sokoban') is unused, so its plugin need not be installed."""
    from ragen.config import load_config
    from ragen.envs.env_lists import check_plan
    from ragen.train.provenance import resolved_config

    monkeypatch.setenv("RAGEN_LOAD_PLUGINS", "ragen-bandit")
    cfg = load_config(overrides=["env.train=[{name: bandit}]"])
    check_plan(cfg)
    assert resolved_config(cfg)["env"]["train"][0]["name"] == "bandit"
