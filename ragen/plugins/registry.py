"""Named components, each with its providing distribution and optional attrs config class."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import attrs

from ragen.errors import DuplicateNameError, RegistrationError, UnknownNameError


@attrs.frozen
class Component:
    """One registered component: what a ``register(...)`` call handed over, plus who handed it."""

    kind: str
    name: str
    factory: Any
    config: type | None
    dist: str
    description: str
    defaults: dict = attrs.field(factory=dict)
    #: an estimator that reads ``AdvantageInput.values``: a preset without a critic is refused before the run builds
    needs_critic: bool = False


class Registry:
    """Components of one kind (``env``, ``estimator``...) by name.

    Names are unique across plugins: registering a name twice raises a ``DuplicateNameError`` naming both
    distributions; the loader refuses only that component and records the clash (``ragen.plugins.loader.clashes()``).
    """

    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, Component] = {}

    def register(
        self,
        name: str,
        factory: Any,
        *,
        dist: str,
        config: type | None = None,
        description: str | None = None,
        defaults: dict | None = None,
        needs_critic: bool = False,
    ) -> Component:
        if not isinstance(name, str) or not name or name != name.strip():
            raise RegistrationError(f"{dist}: {self.kind} name must be a non-empty string, got {name!r}")
        if not isinstance(needs_critic, bool):
            raise RegistrationError(f"{dist}: needs_critic of {self.kind} {name!r} must be True or False, "
                                    f"got {needs_critic!r}")
        if needs_critic and self.kind != "estimator":
            raise RegistrationError(f"{dist}: needs_critic is declared by advantage estimators, not by the "
                                    f"{self.kind} {name!r}")
        if config is not None and not attrs.has(config):
            raise RegistrationError(f"{dist}: config of {self.kind} {name!r} must be an attrs class, got {config!r}")
        if self.kind == "env":
            config = _env_config(name, factory, config, dist)
        if name in self._items:
            raise DuplicateNameError(self.kind, name, self._items[name].dist, dist)
        if description is None:
            description = _first_line(getattr(factory, "__doc__", None))
        item = Component(self.kind, name, factory, config, dist, printable(description or ""), dict(defaults or {}),
                         needs_critic=needs_critic)
        self._items[name] = item
        return item

    def unregister_dist(self, dist: str) -> None:
        """Drop everything ``dist`` registered (used when a plugin turns out to be broken half-way)."""
        self._items = {k: v for k, v in self._items.items() if v.dist != dist}

    def get(self, name: str) -> Component:
        try:
            return self._items[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, self._items) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[Component]:
        return iter(sorted(self._items.values(), key=lambda c: c.name))

    def __len__(self) -> int:
        return len(self._items)


def _env_config(name: str, factory: Any, config: type | None, dist: str) -> type:
    """An env's config class: the one registered, else the env class's ``config_cls`` (``EnvConfig`` unless the class
    names its own). The core reads every env's episode budget (``max_turns``, ...) from it, so a registration without
    ``config=`` gets one instead of failing at the first update, and a config that is not an ``EnvConfig`` is
    refused."""
    from ragen.contract.env import EnvConfig

    if config is None:
        config = getattr(factory, "config_cls", EnvConfig)
    if not (isinstance(config, type) and issubclass(config, EnvConfig)):
        raise RegistrationError(
            f"{dist}: config of env {name!r} must subclass ragen.EnvConfig (the core reads the episode "
            f"budget from it), got {config!r}"
        )
    return config


def printable(text: str) -> str:
    """Plugin-supplied text as listings print it: control characters (terminal escapes such as an OSC title) become
    spaces, so a plugin's description cannot drive the user's terminal."""
    return "".join(" " if (ord(c) < 32 or 127 <= ord(c) < 160) else c for c in str(text))


def _first_line(doc: str | None) -> str:
    return doc.strip().splitlines()[0].strip() if doc and doc.strip() else ""


RegisterFn = Callable[..., Component]
