"""Building registered components from names and options: ``make_env``, ``make_component``, listings."""

from __future__ import annotations

from typing import Any

import attrs

from ragen.config import structure
from ragen.contract.env import Env
from ragen.errors import ConfigError
from ragen.plugins.loader import get_registry
from ragen.plugins.registry import Component


def component_config(item: Component, options: dict | None = None, path: str | None = None) -> Any:
    """The component's config: its registered defaults, then ``options``, structured into its attrs class."""
    if item.config is None:
        if options:
            raise ConfigError(f"{path or item.name}: {item.kind} {item.name!r} takes no options, got {sorted(options)}")
        return None
    return structure(item.config, {**item.defaults, **(options or {})}, path=path or item.name)


def make_env(name: str, **options: Any) -> Env:
    """A ready env of the registered variant ``name``, its config fields overridden by ``options``."""
    item = get_registry("env").get(name)
    config = component_config(item, options, path=name)
    env = item.factory(config)
    env.name = name
    try:  # so a contract breach can name the env and its distribution in one line
        env.component_name = f"env {name!r} of {item.dist}"
    except (AttributeError, TypeError):  # an object without a __dict__ keeps its own name
        pass
    return env


def make_component(kind: str, name: str, **options: Any) -> Any:
    """Call a registered component's factory with its structured config (parsers, estimators, filters...).

    An algorithm preset is not called: ``make_component("algorithm", "grpo", kl_coef=0.01)`` returns the registered
    ``AlgorithmPreset`` with ``options`` applied (checked like ``algo.options``)."""
    item = get_registry(kind).get(name)
    if kind == "algorithm":
        return preset_with(item.factory, options, path=name)
    component = item.factory(component_config(item, options, path=name))
    try:  # so a contract breach can name the component and its distribution in one line
        component.component_name = f"{kind} {name!r} of {item.dist}"
        component.component_key = f"{kind}/{name}"  # where its own metrics go in metrics.jsonl
    except (AttributeError, TypeError):  # objects without a __dict__ (builtins, slots) keep their own repr
        pass
    return component


#: a preset's nested option dicts and the field naming the component they configure
_NESTED_OPTIONS = {"filter_options": "filter", "pre_filter_options": "pre_filter", "estimator_options": "estimator"}


def preset_with(preset: Any, options: dict, path: str = "algo.options") -> Any:
    """An ``AlgorithmPreset`` with some fields replaced, validated like a config file's ``algo.options``.

    Nested options merge key by key into the preset's (``algo.options.filter_options.value=0.5`` keeps the preset's
    other filter options) as long as the component they configure is the preset's; naming another component starts
    from that component's defaults. Options for a shaper the preset does not apply are an error, not dropped."""
    if not options:
        return preset
    from ragen.config import converter

    base = converter.unstructure(preset)
    merged = {**base, **options}
    for key, component in _NESTED_OPTIONS.items():
        if isinstance(options.get(key), dict) and merged.get(component) == base.get(component):
            merged[key] = {**(base.get(key) or {}), **options[key]}
    if isinstance(options.get("shaper_options"), dict):
        merged["shaper_options"] = {name: {**(base["shaper_options"].get(name) or {}), **(opts or {})}
                                    if isinstance(opts, dict) else opts for name, opts in
                                    {**base["shaper_options"], **options["shaper_options"]}.items()}
    out = structure(type(preset), merged, path=path)
    unused = sorted(set(out.shaper_options) - set(out.shapers))
    if unused:
        raise ConfigError(
            f"{path}.shaper_options.{unused[0]}: the preset applies no shaper {unused[0]!r} (its shapers: "
            f"{', '.join(out.shapers) or 'none'}); add it to {path}.shapers or drop its options"
        )
    return out


def missing_parts(preset: Any) -> list[str]:
    """The components an ``AlgorithmPreset`` names that no loaded plugin registered, each as ``estimator 'x'`` (with
    the closest registered name, when one is close): all of them, so one fix covers every part."""
    import difflib

    named = [("estimator", "estimator", preset.estimator), ("filter", "filter", preset.filter)]
    if preset.pre_filter:
        named.append(("pre_filter", "filter", preset.pre_filter))
    named += [("shaper", "shaper", name) for name in preset.shapers]
    out = []
    for label, kind, name in named:
        known = get_registry(kind).names()
        if name not in known:
            close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.6)
            out.append(f"{label} {name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return out


def check_preset(name: str, preset: Any, dist: str) -> None:
    """A ``ConfigError`` naming the preset and every component it names that is not registered."""
    missing = missing_parts(preset)
    if missing:
        raise ConfigError(f"algo.name: the preset {name!r} of {dist} names components that are not registered: "
                          f"{', '.join(missing)} (`ragen algos` lists the registered ones; a plugin that provides "
                          "them may be missing or broken: `ragen plugins`)")


def list_components(kind: str) -> list[Component]:
    """Registered components of ``kind`` with their providing distribution."""
    return list(get_registry(kind))


def list_envs() -> list[Component]:
    return list_components("env")


def env_config_fields(name: str) -> dict[str, tuple[Any, str]]:
    """Field name -> (effective default for this variant, doc) of an env variant's config."""
    item = get_registry("env").get(name)
    cfg = component_config(item, {}, path=name)
    return {f.name: (getattr(cfg, f.name), f.metadata.get("doc", "")) for f in attrs.fields(type(cfg))}


def parser_thinks(name: str, options: dict | None = None) -> bool:
    """Whether the registered parser ``name`` with ``options`` expects ``<think>``: its config's ``enable_think``
    (default True). This decides the prompt: the format line asks for ``<think>...</think>`` and the core prefills
    ``<think>`` after the assistant header only when it is True (the parser contract, docs/plugin-hooks.md)."""
    try:
        config = component_config(get_registry("parser").get(name), dict(options or {}), path=name)
    except Exception:
        return True
    return bool(getattr(config, "enable_think", True))
