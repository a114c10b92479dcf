"""Plugin loading: lazy, isolated failures, duplicate names, allow-list."""

import subprocess
import sys

import pytest

import ragen
from ragen import hookimpl
from ragen.errors import RegistrationError, UnknownNameError
from ragen.plugins.loader import PluginWarning, broken_plugins, clashes, get_registry, register_plugin, unregister_plugin
from ragen.plugins.registry import Registry


def test_import_loads_no_plugin():
    code = "import ragen, ragen.plugins.loader as p, sys; print(p._state.entry_points_loaded, 'ragen_algos' in sys.modules)"
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


def test_duplicate_refuses_only_the_clashing_component(fresh_plugins):
    register_plugin(_Dup(), "dup", dist="ragen-dup")
    with pytest.warns(PluginWarning, match="'ragen-algos' and 'ragen-dup'"):
        reg = get_registry("algorithm")
    assert reg.get("grpo").dist == "ragen-algos"  # the first registration keeps the name
    assert reg.get("dup-own").dist == "ragen-dup"  # the rest of the plugin loads
    with pytest.warns(PluginWarning, match="'ragen-frozenlake' and 'ragen-dup'"):
        envs = get_registry("env")
    assert envs.get("frozenlake").dist == "ragen-frozenlake" and envs.get("dup-lake").dist == "ragen-dup"
    assert get_registry("filter").get("dup-filter").dist == "ragen-dup"
    assert not any(b.dist == "ragen-dup" for b in broken_plugins())
    assert {(c.kind, c.name, c.kept, c.refused) for c in clashes()} == {
        ("algorithm", "grpo", "ragen-algos", "ragen-dup"), ("env", "frozenlake", "ragen-frozenlake", "ragen-dup")}


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
