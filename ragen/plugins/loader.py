"""Plugin discovery: entry points of group ``ragen``, loaded lazily, broken ones reported, not fatal.

Nothing here runs at ``import ragen``. The first call to ``get_registry(kind)`` loads every allowed entry
point (once), then calls every registration hook on every plugin (once per kind, all kinds at once, so a refusal is
the same in every command). A plugin that fails to import, whose hook implementations match no hook spec, or whose
``register`` calls are bad, is recorded in ``broken_plugins()`` and announced with a ``PluginWarning`` naming its
distribution; its names are simply absent and the other plugins keep working.

``RAGEN_LOAD_PLUGINS`` (comma-separated distribution or entry-point names) restricts which entry points load;
set it to the empty string to load none. A list that names plugins also loads ``ragen-algos`` (the algorithms the
core ships, which its default config names); the core's own components always load.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
import threading
import warnings
from typing import Any

import attrs
import pluggy

from ragen.contract import hookspecs
from ragen.errors import DuplicateNameError, UnknownNameError
from ragen.plugins.registry import Registry, printable

ENTRY_POINT_GROUP = "ragen"
#: the core's own components, registered as plugins by module name so this loader imports none of them itself
#: (simonw/llm's pattern): the default action parsers and the ``remote`` env
DEFAULT_PLUGINS = ("ragen.plugins.builtin", "ragen.serve.remote")
ALLOW_ENV_VAR = "RAGEN_LOAD_PLUGINS"

#: registry kind -> the hook that fills it
KINDS = {
    "env": "register_envs",
    "parser": "register_action_parsers",
    "shaper": "register_reward_shapers",
    "estimator": "register_advantage_estimators",
    "filter": "register_rollout_filters",
    "algorithm": "register_algorithms",
}


class PluginWarning(UserWarning):
    """A plugin could not be loaded or registered badly; the others keep working."""


@attrs.frozen
class PluginInfo:
    name: str  # the plugin's name in the plugin manager (the entry point name)
    dist: str
    version: str
    module: str


@attrs.frozen
class BrokenPlugin:
    name: str
    dist: str
    version: str
    error: str


@attrs.frozen
class Clash:
    """A component name two distributions registered: ``kept`` keeps it (the core, then the name's own distribution,
    then load order: entry points in name order); ``refused``'s component of that name is absent. The rest of
    ``refused`` loads, unless the name was the core's or another distribution's own: then ``refused`` is broken."""

    kind: str
    name: str
    kept: str
    refused: str


class _State:
    def __init__(self) -> None:
        self.pm = pluggy.PluginManager("ragen")
        self.pm.add_hookspecs(hookspecs)
        self.plugins: dict[str, PluginInfo] = {}
        self.broken: dict[str, BrokenPlugin] = {}
        self.clashes: list[Clash] = []
        self.registries: dict[str, Registry] = {}
        self.entry_points_loaded = False


_state = _State()


def _allowed(ep: importlib.metadata.EntryPoint) -> bool:
    allow = os.environ.get(ALLOW_ENV_VAR)
    if allow is None:
        return True
    names = {n.strip() for n in allow.split(",") if n.strip()}
    if names and ep.dist is not None and ep.dist.name in CORE_DISTS:
        return True  # a list naming plugins keeps the algorithms the core ships (its default config names them)
    return ep.name in names or (ep.dist is not None and ep.dist.name in names)


def _load_entry_points() -> None:
    if _state.entry_points_loaded:
        return
    _state.entry_points_loaded = True
    for module_name in DEFAULT_PLUGINS:  # the core's own components, always present, before any entry point
        module = importlib.import_module(module_name)
        # "0+unknown": a PEP 440 version that sorts below every release, so listings still show a version
        version = distribution_version("ragen") or "0+unknown"
        _add_plugin(module, PluginInfo(module_name, "ragen", version, module_name))
    seen: set[str] = set()
    for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if ep.name in seen or not _allowed(ep):
            continue  # the same distribution can be visible twice on sys.path (editable + site)
        seen.add(ep.name)
        dist = ep.dist.name if ep.dist else ep.name
        version = ep.dist.version if ep.dist else "?"
        try:
            module = _load_timed(ep, dist)
        except Exception as exc:  # a broken plugin must not take the others down
            _mark_broken(ep.name, dist, version, f"import failed: {type(exc).__name__}: {exc}")
            continue
        _add_plugin(module, PluginInfo(ep.name, dist, version, getattr(module, "__name__", repr(module))))


#: seconds a plugin's import may take before ragen says which plugin it is waiting for ($RAGEN_SLOW_IMPORT_S: a test
#: suite on a loaded machine raises it, so the notice does not land in the stderr its tests compare). The notice is a
#: hang detector, and wall time: every plugin shipped here imports in 5-80 ms on an idle machine (none loads torch at
#: import), but on a machine busy with other work (a training run, served envs, coqtop swapping) the first import
#: took over 5 s, and at 5 s every command and each serve-env worker printed the notice about ragen-algos, a plugin
#: that was not hanging. 30 s leaves a slowdown of several hundred times before it speaks, and still names a plugin
#: that waits on a network or a lock long before a user gives up.
SLOW_IMPORT_S = 30.0


def _slow_import_s() -> float:
    try:
        return float(os.environ.get("RAGEN_SLOW_IMPORT_S", SLOW_IMPORT_S))
    except ValueError:
        return SLOW_IMPORT_S


def _load_timed(ep: importlib.metadata.EntryPoint, dist: str) -> Any:
    """``ep.load()``, naming the plugin on stderr if its import takes longer than ``SLOW_IMPORT_S`` (a plugin that
    hangs at import would otherwise hang every ragen command without a word)."""
    wait = _slow_import_s()

    def say() -> None:
        sys.stderr.write(f"ragen: still importing plugin {printable(dist)!r} (entry point {printable(ep.name)!r}) "
                         f"after {wait:g} s; RAGEN_LOAD_PLUGINS selects which plugins load\n")

    timer = threading.Timer(wait, say)
    timer.daemon = True
    timer.start()
    try:
        return ep.load()
    finally:
        timer.cancel()


def _add_plugin(obj: Any, info: PluginInfo) -> bool:
    try:
        _state.pm.register(obj, name=info.name)
        _state.pm.check_pending()  # hookimpls that match no hook spec fail loudly here
    except Exception as exc:
        if _state.pm.is_registered(obj):
            _state.pm.unregister(obj)
        _mark_broken(info.name, info.dist, info.version, f"bad hook implementation: {exc}")
        return False
    _state.plugins[info.name] = info
    return True


def _mark_broken(name: str, dist: str, version: str, error: str) -> None:
    error = printable(error)
    _state.broken[name] = BrokenPlugin(name, dist, version, error)
    _state.plugins.pop(name, None)
    for reg in _state.registries.values():
        reg.unregister_dist(dist)
    plugin = _state.pm.get_plugin(name)
    if plugin is not None:
        _state.pm.unregister(plugin)
    warnings.warn(f"ragen plugin {dist!r} is broken and was skipped: {error}", PluginWarning, stacklevel=3)


def distribution_version(dist: str) -> str | None:
    """The installed version of the distribution ``dist``, or None when it is not installed (a source checkout on
    ``PYTHONPATH``); each caller says what stands for a missing version in what it writes."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


#: distributions whose names no plugin may take: the core's own (its default plugins) and the algorithms it depends on
CORE_DISTS = ("ragen", "ragen-algos")


def owner_dist(name: str) -> str:
    """The distribution a component name belongs to by convention: ``sokoban-large`` -> ``ragen-sokoban``."""
    return "ragen-" + name.split("-", 1)[0]


def _rank(dist: str, name: str) -> int:
    """Who wins a name: the core (0), the algorithms it ships (1), the name's own distribution (2), anyone else (3)."""
    if dist in CORE_DISTS:
        return CORE_DISTS.index(dist)
    return 2 if dist == owner_dist(name) else 3


@attrs.frozen
class _Registration:
    plugin: PluginInfo
    order: int  # the plugin's load order: the core's defaults, then entry points by name, then in-process plugins
    name: Any
    factory: Any
    kwargs: dict


def _collect(kind: str) -> list[_Registration]:
    """Every ``register`` call of every plugin's hook for ``kind``, recorded, not applied: the order in which names
    are claimed is decided here, never by pluggy's call order (``tryfirst``/``trylast``)."""
    order = {name: i for i, name in enumerate(_state.plugins)}
    calls: list[_Registration] = []
    for impl in getattr(_state.pm.hook, KINDS[kind]).get_hookimpls():
        info = _state.plugins.get(impl.plugin_name)
        if info is None:
            continue
        mine: list[_Registration] = []

        def register(name, factory, _info=info, _mine=mine, **kwargs):
            _mine.append(_Registration(_info, order[_info.name], name, factory, kwargs))

        try:
            impl.function(**{arg: register for arg in impl.argnames})
        except Exception as exc:
            _mark_broken(info.name, info.dist, info.version, f"{KINDS[kind]} failed: {type(exc).__name__}: {exc}")
            continue
        calls += mine
    return calls


def _fill(kind: str, reg: Registry) -> None:
    """Apply the plugins' registrations, highest claim first (``_rank``), then in load order. A name taken again is
    refused for the later plugin (its other components load); a plugin that tries to take a name of the core, of the
    algorithms the core ships, or of another distribution's own namespace is refused whole, loudly."""
    calls = _collect(kind)
    ranked = sorted(calls, key=lambda c: (_rank(c.plugin.dist, c.name) if isinstance(c.name, str) else 3, c.order))
    for call in ranked:
        info = call.plugin
        if info.name not in _state.plugins:  # refused whole earlier in this loop
            continue
        try:
            reg.register(call.name, call.factory, dist=info.dist, **call.kwargs)
        except DuplicateNameError as exc:
            kept = reg.get(exc.name).dist
            _state.clashes.append(Clash(exc.kind, exc.name, exc.first, exc.second))
            if _rank(kept, exc.name) < 3:
                _mark_broken(info.name, info.dist, info.version,
                             f"it registers the {exc.kind} {exc.name!r}, which belongs to {kept!r}: a plugin may not "
                             "take a core component's name or another distribution's own")
            else:  # refuse this one name; the plugin's other components still load
                warnings.warn(f"ragen plugin {exc.second!r}: {exc}", PluginWarning, stacklevel=2)
        except Exception as exc:  # a bad name or config class: the plugin breaks its contract
            _mark_broken(info.name, info.dist, info.version, f"{KINDS[kind]} failed: {type(exc).__name__}: {exc}")


def get_registry(kind: str) -> Registry:
    """The registry of ``kind`` (one of ``KINDS``), filling every registry from the plugins on first use: a plugin
    refused whole by one hook (a name clash in its algorithms) is then refused in every command, whichever kinds that
    command reads (``ragen envs`` and ``check-env`` read only envs)."""
    if kind not in KINDS:
        raise UnknownNameError("component kind", kind, KINDS)
    _load_entry_points()
    if kind not in _state.registries:
        # the kind asked for first (its refusals are the ones reported), then every other; registration is cheap (no
        # component is built), and a hook that reads a registry re-enters here
        for each in (kind, *(k for k in KINDS if k != kind)):
            if each not in _state.registries:
                _fill(each, _state.registries.setdefault(each, Registry(each)))
    return _state.registries[kind]


def loaded_plugins() -> list[PluginInfo]:
    """Plugins that loaded (the core's built-in one included)."""
    _load_entry_points()
    return sorted(_state.plugins.values(), key=lambda p: p.name)


def broken_plugins() -> list[BrokenPlugin]:
    """Plugins that failed to import or to register, with their errors. Fills every registry first."""
    for kind in KINDS:
        get_registry(kind)
    return sorted(_state.broken.values(), key=lambda p: p.name)


def clashes() -> list[Clash]:
    """Component names registered by two distributions (the first keeps the name). Fills every registry first."""
    for kind in KINDS:
        get_registry(kind)
    return list(_state.clashes)


def register_plugin(obj: Any, name: str, dist: str | None = None, version: str = "0") -> None:
    """Register an in-process plugin object (tests, notebooks). Registries are rebuilt on next use."""
    _load_entry_points()
    _add_plugin(obj, PluginInfo(name, dist or name, version, getattr(obj, "__name__", repr(obj))))
    _state.registries.clear()
    _state.clashes.clear()


def unregister_plugin(name: str) -> None:
    """Undo ``register_plugin`` (or drop an entry-point plugin) and rebuild registries on next use."""
    plugin = _state.pm.get_plugin(name)
    if plugin is not None:
        _state.pm.unregister(plugin)
    _state.plugins.pop(name, None)
    _state.broken.pop(name, None)
    _state.registries.clear()
    _state.clashes.clear()


def reset() -> None:
    """Forget everything loaded; the next registry access rediscovers entry points (tests use this)."""
    global _state
    _state = _State()


def plugin_manager() -> pluggy.PluginManager:
    _load_entry_points()
    return _state.pm
