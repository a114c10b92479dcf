"""A run's env lists (issue 14): which envs train, in how many groups per step, and which envs validate.

``env.name``/``env.options`` is the one-env form; ``env.train`` and ``env.val`` are lists of ``EnvEntry``. Both forms
resolve here to ``Planned`` entries (name, options, groups, parser), so the rest of the code sees one shape.
Group counts are fixed for the run (the env pool is built once): ``n_groups`` per entry, or ``rollout.n_groups``
shared by ``weight`` with the largest-remainder rule. Groups are laid out env by env, so a group never mixes envs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs

from ragen.errors import ConfigError


@attrs.frozen
class Planned:
    """One env of a run with its group count and parser name ('' = ``rollout.parser``)."""

    name: str
    options: dict[str, Any]
    n_groups: int
    parser: str = ""


def apportion(weights: Sequence[float], total: int) -> list[int]:
    """``total`` split by ``weights`` (largest remainder; ties to the earlier entry); sums to ``total``."""
    s = float(sum(weights))
    exact = [w * total / s for w in weights]
    counts = [math.floor(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts


def train_plan(cfg: Any) -> list[Planned]:
    """The training envs with their groups per step (one entry for the one-env form)."""
    env, r = cfg.env, cfg.rollout
    if not env.train:
        return [Planned(env.name, dict(env.options), int(r.n_groups))]
    entries = list(env.train)
    _check_names(entries, "env.train")
    given = [e.n_groups > 0 for e in entries]
    if any(given) and not all(given):
        raise ConfigError("env.train: give n_groups for every entry or for none (then weight shares rollout.n_groups)")
    if all(given):
        counts = [int(e.n_groups) for e in entries]
    else:
        counts = apportion([e.weight for e in entries], int(r.n_groups))
        for i, (e, n) in enumerate(zip(entries, counts)):
            if n < 1:
                raise ConfigError(f"env.train[{i}] ({e.name}): weight {e.weight:g} gets 0 of rollout.n_groups="
                                  f"{r.n_groups} groups; raise rollout.n_groups or the weight, or give n_groups")
    return [Planned(e.name, dict(e.options), n, e.parser) for e, n in zip(entries, counts)]


def val_plan(cfg: Any) -> list[Planned]:
    """The validation envs, each with its validation groups (default: the training envs, ``rollout.n_val_groups``)."""
    n_val = int(cfg.rollout.n_val_groups)
    if not cfg.env.val:
        return [attrs.evolve(p, n_groups=n_val) for p in train_plan(cfg)]
    entries = list(cfg.env.val)
    _check_names(entries, "env.val")
    return [Planned(e.name, dict(e.options), int(e.n_groups) or n_val, e.parser) for e in entries]


def env_names(cfg: Any) -> list[str]:
    """Every env variant of the run, training first, each once (the built-in tokenizer's corpus covers them all)."""
    return list(dict.fromkeys(p.name for p in [*train_plan(cfg), *val_plan(cfg)]))


def run_label(cfg: Any) -> str:
    """The env part of a default run-folder name: the variant, or the training variants joined by '+'."""
    return "+".join(p.name for p in train_plan(cfg))


def check_plan(cfg: Any) -> None:
    """Every listed variant exists (did-you-mean), its options fit its config class and its parser exists."""
    from ragen.plugins.components import component_config
    from ragen.plugins.loader import get_registry

    if not cfg.env.train:  # the one-env form keeps its errors: an unknown name's did-you-mean, env.options.<key>
        component_config(get_registry("env").get(cfg.env.name), cfg.env.options, path="env.options")
    lists = ([("env.train", train_plan(cfg))] if cfg.env.train else []) + (
        [("env.val", val_plan(cfg))] if cfg.env.val else []
    )
    for where, plan in lists:
        for i, p in enumerate(plan):
            prefix = f"{where}[{i}]"
            try:
                item = get_registry("env").get(p.name)
            except Exception as exc:
                raise ConfigError(f"{prefix}.name: {exc}") from None
            component_config(item, p.options, path=f"{prefix}.options")
            if p.parser:
                try:
                    get_registry("parser").get(p.parser)
                except Exception as exc:
                    raise ConfigError(f"{prefix}.parser: {exc}") from None


def _check_names(entries: Sequence[Any], where: str) -> None:
    """Names are given and distinct: metrics (``<variant>/success``) and trajectories are keyed by them."""
    seen: set[str] = set()
    for i, e in enumerate(entries):
        if not e.name:
            raise ConfigError(f"{where}[{i}].name: required (a registered env variant)")
        if e.name in seen:
            raise ConfigError(
                f"{where}[{i}].name: {e.name!r} is listed twice; metrics are per variant, so list each once"
            )
        seen.add(e.name)
