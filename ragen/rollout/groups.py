"""Env groups and seeding (environments.md §1.5).

Train: step s, group g (0-based over all groups, variants in configured order): ``seed = 10000 + s·n_groups + g``.
Validation: ``seed = 123 + g``, split ``val``. The rules are ``SeedRule``s (ragen/envs/resolved.py); a pool takes
another as ``seeds`` (an eval's levels per env, the warm start's demonstrations). Every member of a group resets
with the group's seed and its ``rollout_index`` 0..group_size−1, so members share the initial state. Env instances
are a pool created once and reused at every step; ``close()`` releases them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ragen.contract.env import SPLITS, Env
from ragen.envs.resolved import TRAIN_SEED_BASE, VAL_SEED_BASE, train_seeds, val_seeds  # noqa: F401 (the bases: re-exported)
from ragen.errors import ConfigError


def train_seed(step: int, group: int, n_groups: int, levels: int = 0) -> int:
    """Seed of training group ``group`` at ``step``: a fresh level every time, or with ``levels`` > 0 one of the
    first ``levels`` training levels in turn (``levels=1`` pins every group to one level: the overfitting check)."""
    return train_seeds(n_groups, levels)(step, group)


def val_seed(group: int) -> int:
    return val_seeds()(0, group)


@attrs.frozen
class GroupSpec:
    """``n_groups`` groups of one env variant (with config overrides)."""

    env_name: str
    n_groups: int
    options: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class EnvSlot:
    """One env instance with the episode it must play next."""

    env: Env
    env_name: str
    seed: int
    group_id: int
    rollout_index: int
    split: str

    @property
    def reset_options(self) -> dict[str, Any]:
        return {"split": self.split, "rollout_index": self.rollout_index}


def default_factory(name: str, options: dict) -> Env:
    """Build a registered env (``make_env``): the factory a pool uses unless given another."""
    from ragen.plugins.components import make_env

    return make_env(name, **options)


class EnvGroups:
    """A pool of ``n_groups × group_size`` env instances; ``slots(step)`` assigns this step's seeds."""

    def __init__(
        self,
        specs: Sequence[GroupSpec] | str,
        group_size: int,
        split: str = "train",
        n_groups: int | None = None,
        options: dict | None = None,
        factory: Callable[[str, dict], Env] = default_factory,
        shard: tuple[int, int] = (0, 1),
        levels: int = 0,
        seeds: Callable[[int, int], int] | None = None,
    ):
        """``seeds(step, group)``: the level each group plays (default: the split's rule, ``levels`` for training)."""
        if isinstance(specs, str):
            specs = [GroupSpec(specs, int(n_groups or 1), dict(options or {}))]
        if split not in SPLITS:
            raise ConfigError(f"split: expected one of {', '.join(SPLITS)}, got {split!r}")
        if group_size < 1 or any(s.n_groups < 1 for s in specs) or not specs:
            raise ConfigError("rollout: n_groups and group_size must be >= 1")
        self.specs = list(specs)
        self.group_size = int(group_size)
        self.split = split
        self.levels = int(levels)
        rank, world = shard
        self._total = sum(s.n_groups for s in self.specs)
        self.seeds = seeds or (train_seeds(self._total, self.levels) if split == "train" else val_seeds())
        # data-parallel ranks own whole groups: group g belongs to rank g mod world (groups are never split)
        self._envs: dict[int, list[Env]] = {}  # global group index -> members
        self._names: dict[int, str] = {}
        try:
            g = 0
            for spec in self.specs:
                for _ in range(spec.n_groups):
                    if g % world == rank:
                        self._envs[g] = [factory(spec.env_name, dict(spec.options)) for _ in range(self.group_size)]
                        self._names[g] = spec.env_name
                    g += 1
        except BaseException:
            self.close()
            raise
        self._closed = False

    @classmethod
    def validation(cls, specs: Sequence[GroupSpec] | str, n_val_groups: int | None = None, **kw: Any) -> EnvGroups:
        """Validation pool: groups of one member each (RAGEN: 512 × 1), split ``val``."""
        return cls(specs, group_size=1, split="val", n_groups=n_val_groups, **kw)

    @property
    def n_groups(self) -> int:
        """All groups of the step, across data-parallel ranks (the seeds depend on it)."""
        return self._total

    @property
    def env_names(self) -> list[str]:
        return list(dict.fromkeys(s.env_name for s in self.specs))

    def envs(self) -> list[Env]:
        return [e for group in self._envs.values() for e in group]

    def seed_of(self, step: int, group: int) -> int:
        return self.seeds(step, group)

    def slots(self, step: int = 0) -> list[EnvSlot]:
        """This step's episodes, group by group, members in order (validation seeds do not depend on ``step``)."""
        if self._closed:
            raise RuntimeError("EnvGroups is closed")
        return [
            EnvSlot(env, self._names[g], self.seed_of(step, g), g, i, self.split)
            for g, group in self._envs.items()
            for i, env in enumerate(group)
        ]

    def close(self) -> None:
        """Close every env (idempotent; one failing close does not keep the others open)."""
        errors = []
        for group in self._envs.values():
            for env in group:
                try:
                    env.close()
                except Exception as exc:  # noqa: PERF203
                    errors.append(exc)
        self._closed = True
        if errors:
            raise errors[0]

    def __enter__(self) -> EnvGroups:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
