"""A run resolved once: everything the layers below the CLI derive from a ``RunConfig``, made at the start and handed
down, so no layer re-derives it (and none can derive it differently).

``resolve_run(cfg)`` checks the env lists (``check_plan``) and builds a frozen ``ResolvedRun``: the training and
validation plans, the envs' configs, the algorithm preset, the action parser and whether it thinks, the prompt style
and the seed rules (``SeedRule``: which level each env group plays). The CLI resolves before it imports torch, so
this module stays free of it; it sits in ``envs``, the lowest layer that can read the env lists and the registries.

The seed rules (environments.md §1.5): training group g at step s plays ``10000 + s·n_groups + g`` (or, with
``rollout.train_levels`` > 0, one of the first ``train_levels`` levels in turn); validation group g plays ``123 + g``;
the warm start's expert demonstrations play ``900000 + g``, disjoint from both.
"""

from __future__ import annotations

from typing import Any

import attrs

from ragen.contract.algorithm import AlgorithmPreset
from ragen.envs.env_lists import Planned, check_plan

TRAIN_SEED_BASE = 10_000
VAL_SEED_BASE = 123
DEMO_SEED_BASE = 900_000


@attrs.frozen
class SeedRule:
    """The level seed group ``g`` plays at step ``s``: ``base + i`` with ``i = s·stride + g``, or ``i mod cycle`` when
    ``cycle`` > 0. ``stride`` 0: the same levels at every step (validation, evaluation, demonstrations)."""

    base: int
    stride: int = 0  #: the pool's groups for training, so every step plays fresh levels
    cycle: int = 0  #: > 0: only the first ``cycle`` levels, in turn (``rollout.train_levels``; an eval's seeds per env)

    def __call__(self, step: int, group: int) -> int:
        index = step * self.stride + group
        return self.base + (index % self.cycle if self.cycle > 0 else index)


def train_seeds(n_groups: int, levels: int = 0) -> SeedRule:
    """Training: a fresh level for every group of every step (``n_groups``: all groups of a step, across ranks), or
    with ``levels`` > 0 one of the first ``levels`` training levels in turn."""
    return SeedRule(TRAIN_SEED_BASE, stride=int(n_groups), cycle=int(levels))


def val_seeds(per_env: int = 0) -> SeedRule:
    """Validation: group g plays ``123 + g``; with ``per_env`` > 0, ``123 + g mod per_env``, so each env of a pool laid
    out env by env with ``per_env`` groups plays the same levels 123.. (``ragen eval``)."""
    return SeedRule(VAL_SEED_BASE, cycle=int(per_env))


@attrs.frozen
class ResolvedRun:
    """A ``RunConfig`` with what the run derives from it, made once by ``resolve_run``."""

    cfg: Any  #: the ``RunConfig`` it was resolved from
    train_plan: tuple[Planned, ...]  #: the training envs with their groups per step, in list order
    val_plan: tuple[Planned, ...]  #: the validation envs with their groups
    env_names: tuple[str, ...]  #: every env of the run, training first, each once (the built-in tokenizer's corpus)
    label: str  #: the env part of a run folder's name: the training envs joined by '+'
    envs: dict[str, Any]  #: training env name -> its registry item
    env_configs: tuple[Any, ...]  #: each training env's config, options applied (plan order)
    preset: AlgorithmPreset  #: ``algo.name`` with ``algo.options`` applied
    parser: Any  #: the ``rollout.parser`` instance the run's rollouts use
    thinks: bool  #: whether that parser expects ``<think>`` (the prompt frame and its prefill)
    env_parsers: dict[str, tuple[Any, bool]]  #: env name -> (parser, thinks) for the envs naming their own parser
    prompt: str  #: the prompt frame's style (``rollout.prompt``)
    train_seeds: SeedRule
    val_seeds: SeedRule  #: the validation pass and the greedy before/after pass
    demo_seeds: SeedRule  #: the warm start's expert demonstrations

    @property
    def validates(self) -> bool:
        """Whether the run validates (before RL, every ``trainer.test_freq`` steps, after RL): not a short run."""
        return not is_short(self.cfg)


def resolve_preset(cfg: Any) -> AlgorithmPreset:
    """The algorithm preset named by ``algo.name`` with ``algo.options`` applied on top."""
    from ragen import config as config_mod
    from ragen.plugins.components import check_preset
    from ragen.plugins.loader import get_registry

    item = get_registry("algorithm").get(cfg.algo.name)
    preset = item.factory
    if cfg.algo.options:
        data = {**config_mod.converter.unstructure(preset), **cfg.algo.options}
        preset = config_mod.structure(AlgorithmPreset, data, path="algo.options")
    check_preset(cfg.algo.name, preset, item.dist)  # every missing part named now, not the first one at run time
    return preset


def env_parsers(plan: list[Planned] | tuple[Planned, ...]) -> dict[str, tuple[Any, bool]]:
    """(parser, thinks) of the envs of ``plan`` that name their own parser (an env listed twice: its first entry)."""
    from ragen.plugins.components import make_component, parser_thinks

    out = {}
    for p in plan:
        if p.parser and p.name not in out:
            out[p.name] = (make_component("parser", p.parser), parser_thinks(p.parser))
    return out


def is_short_run(steps: int, short_run_steps: int) -> bool:
    """Whether a run of ``steps`` steps is a short run under ``trainer.short_run_steps`` (0: never; the field's doc
    says why), which plays no validation and no greedy pass."""
    return bool(short_run_steps) and steps < short_run_steps


def is_short(cfg: Any) -> bool:
    """``is_short_run`` of a ``RunConfig``."""
    return is_short_run(cfg.trainer.steps, cfg.trainer.short_run_steps)


def scaled_to_run(cfg: Any) -> Any:
    """``cfg`` with a short run's greedy passes off (``rollout.n_paired_levels`` 0, so config.yaml records it; its
    validations are skipped by the loop, ``ResolvedRun.validates``). A config it already cut (a resumed run's
    config.yaml) comes back unchanged."""
    if not is_short(cfg) or not cfg.rollout.n_paired_levels:
        return cfg
    return attrs.evolve(cfg, rollout=attrs.evolve(cfg.rollout, n_paired_levels=0))


def resolve_run(cfg: Any) -> ResolvedRun:
    """Check ``cfg``'s env lists (unknown names with a did-you-mean, each env's options) and resolve the run (a short
    run's greedy passes turned off first, ``scaled_to_run``)."""
    from ragen.plugins.components import component_config, make_component, parser_thinks
    from ragen.plugins.loader import get_registry

    cfg = scaled_to_run(cfg)
    train, val = map(tuple, check_plan(cfg))
    envs = {p.name: get_registry("env").get(p.name) for p in train}
    r = cfg.rollout
    # the parser's options, checked under the config key they came from (before ``make_component`` names only the
    # parser)
    component_config(get_registry("parser").get(r.parser), r.parser_options, path="rollout.parser_options")
    return ResolvedRun(
        cfg=cfg, train_plan=train, val_plan=val, env_names=tuple(dict.fromkeys(p.name for p in (*train, *val))),
        label="+".join(p.name for p in train), envs=envs,
        env_configs=tuple(component_config(envs[p.name], p.options, path="env.options") for p in train),
        preset=resolve_preset(cfg), parser=make_component("parser", r.parser, **r.parser_options),
        thinks=parser_thinks(r.parser, r.parser_options), env_parsers=env_parsers((*train, *val)), prompt=r.prompt,
        train_seeds=train_seeds(sum(p.n_groups for p in train), r.train_levels), val_seeds=val_seeds(),
        demo_seeds=SeedRule(DEMO_SEED_BASE),
    )


def as_resolved(run: ResolvedRun | Any) -> ResolvedRun:
    """``run`` itself, or a ``RunConfig`` resolved here (a caller that starts from a config: a test, a script)."""
    return run if isinstance(run, ResolvedRun) else resolve_run(run)
