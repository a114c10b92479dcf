"""Meta-tests: every hook has a docs section and a test; every config field has a default and a doc string."""

import ast
import re

import attrs
import pytest
from conftest import ROOT

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


@pytest.mark.parametrize("cls", API_CLASSES, ids=lambda c: c.__name__)
def test_api_class_public_and_every_member_documented(cls):
    import ragen

    assert getattr(ragen, cls.__name__, None) is cls and cls.__name__ in ragen.__all__, (
        f"ragen does not export {cls.__name__}"
    )
    assert (cls.__doc__ or "").strip(), f"{cls.__name__} has no docstring"
    members = api_docs.members(cls)
    assert members, f"{cls.__name__}: nothing to document"
    for name, _, doc in members:
        assert doc.strip(), f"{cls.__name__}.{name} has no docstring (attrs fields: ragen.option(default, 'doc'))"


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
