"""Meta-tests: every hook has a docs section and a test; every config field has a default and a doc string."""

import ast
import re

import attrs
import pytest
from conftest import ROOT

from ragen import Env
from ragen.config import RunConfig
from ragen.contract import hookspecs

HOOKS = sorted(name for name in dir(hookspecs) if name.startswith("register_"))


def test_there_are_hooks():
    assert {"register_envs", "register_action_parsers", "register_reward_shapers", "register_advantage_estimators",
            "register_rollout_filters", "register_algorithms"} <= set(HOOKS)


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_has_docs_section(hook):
    docs = (ROOT / "docs" / "plugin-hooks.md").read_text()
    assert re.search(rf"^## {hook}\(register\)$", docs, re.M), f"docs/plugin-hooks.md lacks '## {hook}(register)'"


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_has_test(hook):
    names = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        names |= {n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)}
    assert f"test_hook_{hook}" in names, f"no test_hook_{hook} in tests/"


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_has_docstring(hook):
    doc = getattr(hookspecs, hook).__doc__ or ""
    assert "Called" in doc, f"{hook}'s docstring must say when it is called"


def _config_classes(cls, seen=None):
    seen = seen if seen is not None else set()
    if cls in seen or not attrs.has(cls):
        return seen
    seen.add(cls)
    for f in attrs.fields(attrs.resolve_types(cls)):
        if isinstance(f.type, type):
            _config_classes(f.type, seen)
    return seen


def _all_config_classes():
    import ragen
    from ragen.plugins.loader import KINDS, get_registry

    classes = _config_classes(RunConfig) | {ragen.AlgorithmPreset}
    for kind in KINDS:
        for item in get_registry(kind):
            if item.config is not None:
                classes.add(item.config)
    return sorted(classes, key=lambda c: c.__qualname__)


@pytest.mark.parametrize("cls", _all_config_classes(), ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_config_fields_documented(cls):
    for f in attrs.fields(cls):
        assert f.metadata.get("doc"), f"{cls.__qualname__}.{f.name} has no doc string"
        if cls.__name__ != "AlgorithmPreset" or f.name != "estimator":
            assert f.default is not attrs.NOTHING, f"{cls.__qualname__}.{f.name} has no default"


# ---- the plugin API reference (docs/api.md) and the preset fields of docs/algorithms.md, generated from the code ----
from ragen.plugins import api_docs  # noqa: E402

API_CLASSES = [cls for _, _, classes in api_docs.SECTIONS for cls in classes if isinstance(cls, type)]
API_FUNCTIONS = [fn for _, _, items in api_docs.SECTIONS for fn in items if not isinstance(fn, type)]


def undocumented(cls) -> list[str]:
    """The members of ``cls`` that docs/api.md would list without a meaning."""
    return [name for name, _, doc in api_docs.members(cls) if not doc.strip()]


@pytest.mark.parametrize("cls", API_CLASSES, ids=lambda c: c.__name__)
def test_api_class_public_and_every_member_documented(cls):
    import ragen

    assert getattr(ragen, cls.__name__, None) is cls and cls.__name__ in ragen.__all__, (
        f"ragen does not export {cls.__name__}"
    )
    check_documented(cls)


def check_documented(cls) -> None:
    assert (cls.__doc__ or "").strip(), f"{cls.__name__} has no docstring"
    assert api_docs.members(cls), f"{cls.__name__}: nothing to document"
    assert not undocumented(cls), (
        f"{cls.__name__}: {undocumented(cls)} have no docstring (attrs fields: ragen.option(default, 'doc'); Env "
        "attributes: a '#:' comment above the assignment)"
    )


#: the Env members plugin authors asked about, each a row of docs/api.md's Env table
ENV_MEMBERS = ("action_names", "instructions", "symbol_legend", "action_separator", "procedural", "deterministic",
               "step_cost", "reset_options", "episode_weight", "concurrency", "canonical_action", "validate_action",
               "split_actions", "potential", "noise_rng", "expert", "task_id", "_reset", "_step", "_close")


def test_the_env_table_lists_every_member_a_plugin_may_use():
    """Every public member of an Env instance that gymnasium.Env does not have, the methods to implement, and the
    members authors asked about are rows of the generated table, each with a meaning."""
    import gymnasium

    import ragen

    listed = {name for name, _, _ in api_docs.members(ragen.Env)}
    public = {n for n in dir(ragen.Env()) if not n.startswith("_")} - set(dir(gymnasium.Env))
    assert public <= listed, f"Env members missing from docs/api.md: {sorted(public - listed)}"
    assert set(ENV_MEMBERS) <= listed
    text = (ROOT / "docs" / "api.md").read_text()
    for name in ENV_MEMBERS:
        assert f"| `{name}` |" in text, f"docs/api.md has no row for Env.{name}"


class _Probe(Env):
    """An Env subclass with a documented attribute and undocumented members of every kind."""

    #: a member with its meaning
    documented_flag: bool = True
    undocumented_flag: bool = False

    def __init__(self, config=None, render_mode="ansi"):
        super().__init__(config, render_mode)
        self.undocumented_dial = 0.5
        self._private = 1  # not a plugin's concern: never listed

    def undocumented_method(self):
        return 1


def test_an_undocumented_env_member_fails_the_meta_test():
    """The check above on an Env subclass: its undocumented class attribute, attribute set in __init__ and method
    are named (and Env's own members stay documented), so a member added to Env without a doc fails it."""
    names = {name for name, _, _ in api_docs.members(_Probe)}
    assert {"documented_flag", "undocumented_flag", "undocumented_dial", "undocumented_method", "action_names"} <= names
    assert "_private" not in names
    assert sorted(undocumented(_Probe)) == ["undocumented_dial", "undocumented_flag", "undocumented_method"]
    with pytest.raises(AssertionError, match="'undocumented_flag'"):
        check_documented(_Probe)


@pytest.mark.parametrize("fn", API_FUNCTIONS, ids=lambda f: f.__name__)
def test_api_function_public_and_documented(fn):
    import ragen

    assert getattr(ragen, fn.__name__, None) is fn and fn.__name__ in ragen.__all__, (
        f"ragen does not export {fn.__name__}"
    )
    assert (fn.__doc__ or "").strip(), f"{fn.__name__} has no docstring"
    assert f"### `ragen.{fn.__name__}(" in (ROOT / "docs" / "api.md").read_text()


def test_api_docs_current():
    assert (ROOT / "docs" / "api.md").read_text() == api_docs.api_markdown(), "run: python -m ragen.plugins.api_docs"


def test_algorithms_md_lists_every_preset_field():
    text = (ROOT / "docs" / "algorithms.md").read_text()
    assert text == api_docs.algorithms_markdown(text) and api_docs.BEGIN in text, (
        "run: python -m ragen.plugins.api_docs"
    )
    for f in attrs.fields(ragen_preset()):
        assert f"| `{f.name}` |" in text, f"docs/algorithms.md does not list algo.options.{f.name}"
    assert "docs/algorithms.md" in (ROOT / "docs" / "config.md").read_text()


def ragen_preset():
    import ragen

    return ragen.AlgorithmPreset
