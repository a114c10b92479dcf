"""``register_variants``: the registration loop every env plugin shares, one ``register`` call per variant."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


def register_variants(register: Callable[..., Any], factory: Any, variants: Mapping[str, tuple[dict, str]], *,
                      config: type | None = None) -> None:
    """Call ``register(name, factory, config=..., defaults=..., description=...)`` once per entry of ``variants``, a
    mapping ``{name: (defaults, description)}``, in its order. ``config`` defaults to ``factory.config_cls`` (an
    ``Env`` subclass's config class); give it for other factories, e.g. a rollout filter's maker and its options class.
    Use it inside a registration hook: ``register_variants(register, SokobanEnv, VARIANTS)``."""
    if config is None:
        config = getattr(factory, "config_cls", None)
        if config is None:
            raise TypeError(f"register_variants: {factory!r} has no config_cls; pass config=")
    for name, (defaults, description) in variants.items():
        register(name, factory, config=config, defaults=defaults, description=description)
