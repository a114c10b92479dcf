"""What a ``Trainer`` is built from, in order: the runtime (device, threads, dtype, seeds), the components the config
names (from the registries), the models and their DeepSpeed engines, and what runs on them (forward passes, update,
rollout, run writer).

Everything comes from the registries by the names in the config: the env variants, the algorithm preset (estimator,
filters, shapers, loss settings, critic or not) and the action parser.
"""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import torch

from ragen.config import RunConfig
from ragen.contract.algorithm import AlgorithmPreset
from ragen.envs.resolved import ResolvedRun, as_resolved
from ragen.errors import ConfigError
from ragen.log import log
from ragen.models import distributed as dp
from ragen.plugins.components import make_component
from ragen.plugins.loader import get_registry
from ragen.rollout.engines import make_rollout_engine
from ragen.train import provenance
from ragen.train.early_stop import EarlyStopper
from ragen.train.gate import make_gate
from ragen.train.policy import Policy
from ragen.train.runlog import NullWriter, RunWriter
from ragen.train.update import Updater

BUILTIN_ACTOR_LR = 1e-4  #: docs/models.md: the RL rate measured for the warm-started built-in models


def actor_lr(cfg: RunConfig) -> float:
    """``trainer.actor_lr``, or its default for the model: 1e-4 for the built-in random-init sizes, 1e-5 otherwise."""
    from ragen.models.builtin import BUILTIN_MODELS

    if cfg.trainer.actor_lr is not None:
        return cfg.trainer.actor_lr
    return BUILTIN_ACTOR_LR if cfg.model.name in BUILTIN_MODELS else 1e-5


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@attrs.define
class Parts:
    """Everything a ``Trainer`` runs, built by ``build``."""

    run: ResolvedRun  #: the run, resolved once (``ragen.envs.resolved``)
    device: torch.device
    dtype: torch.dtype
    rank: int
    world: int
    preset: AlgorithmPreset
    estimator: Any
    filters: list  #: pre-filter, then filter (the preset's, where named)
    gate: Any  #: trajectories -> the group ids the success gate leaves out (``ragen.train.gate``); None: off
    shapers: list
    tokenizer: Any
    model_source: Any  #: where the policy's weights come from (``ragen.models.load.resolve_model``)
    lora: bool
    actor: Any  #: the policy's DeepSpeed engine
    critic: Any  #: the value model's DeepSpeed engine; None without a critic
    reference: Any  #: a frozen copy of the initial policy; None without KL, or with LoRA (the base model is it)
    engine: Any  #: the rollout engine (HF, vLLM or the scripted expert)
    policy: Policy
    updater: Updater
    rollout: Any  #: ``ragen.rollout.Rollout`` over this rank's share of the groups
    early_stop: EarlyStopper
    collapse: Any  #: V2 collapse diagnostics; None when off
    writer: Any  #: the run folder's writer (rank 0), else a NullWriter


def build(run: ResolvedRun | RunConfig, run_dir: Path, resume: bool = False, init_model: Path | None = None) -> Parts:
    """A run's parts; ``init_model`` (a warm-started folder) replaces ``model.name``."""
    from ragen.models.load import resolve_dtype

    run = as_resolved(run)
    cfg = run.cfg
    device = dp.pick_device(cfg.trainer.device)
    dp.set_threads(cfg.trainer.threads)  # before any torch work: rollout and update share it
    dtype = resolve_dtype(cfg.model.dtype, str(device))
    seed_everything(cfg.trainer.seed)
    preset, env_configs, estimator, filters, shapers, parser, gate = _components(run)
    dp.init_distributed(device)
    rank, world = dp.rank(), dp.world_size()
    model, tokenizer, source = _policy_model(run, run_dir, device, dtype, init_model)
    lora = cfg.model.lora_rank > 0
    actor = dp.make_engine(model, lr=actor_lr(cfg), **_engine_options(cfg, dtype))
    critic = _critic(cfg, source, device, dtype, lora) if preset.use_critic else None
    engine = make_rollout_engine(cfg, actor.module, tokenizer, source.path, dtype, thinks=run.thinks)
    reference = copy.deepcopy(model).eval().requires_grad_(False) if preset.needs_reference and not lora else None
    policy = Policy(cfg, preset, actor, critic, reference, lora)
    updater = Updater(cfg, preset, policy, env_configs, run_dir, world, actor_lr(cfg))
    early_stop, collapse = EarlyStopper(cfg.early_stop), _collapse(run, tokenizer)
    writer = _writer(cfg, run_dir, resume, device)
    return Parts(run=run, device=device, dtype=dtype, rank=rank, world=world, preset=preset, estimator=estimator,
                 filters=filters, gate=gate, shapers=shapers, tokenizer=tokenizer, model_source=source,
                 lora=lora, actor=actor,
                 critic=critic, reference=reference, engine=engine, policy=policy, updater=updater,
                 rollout=_rollout(run, engine, tokenizer, parser, rank, world), early_stop=early_stop,
                 collapse=collapse, writer=writer)


def _components(run: ResolvedRun | RunConfig) -> tuple:
    """The preset, the training envs' configs, the estimator, filters, shapers, parser and the success gate, by
    name."""
    run = as_resolved(run)
    preset, envs, env_configs = run.preset, run.envs, list(run.env_configs)
    estimator = make_component("estimator", preset.estimator, **preset.estimator_options)
    filters = [make_component("filter", name, **opts) for name, opts in
               ((preset.pre_filter, preset.pre_filter_options), (preset.filter, preset.filter_options)) if name]
    shapers = [make_component("shaper", name, **preset.shaper_options.get(name, {})) for name in preset.shapers]
    for shaper in shapers:  # what a shaper needs of the rest of the preset (its estimator), before any model is built
        check = getattr(shaper, "check_preset", None)
        if callable(check):
            check(preset)
    parser = run.parser
    if preset.use_critic is False and get_registry("estimator").get(preset.estimator).needs_critic:
        raise ConfigError(f"algo.options.use_critic: the {preset.estimator} estimator needs a critic")
    gate = make_gate(preset, {name: item.factory for name, item in envs.items()})
    return preset, env_configs, estimator, filters, shapers, parser, gate


def _policy_model(run: ResolvedRun, run_dir: Path, device: torch.device, dtype: torch.dtype, init_model: Path | None):
    """The policy model (LoRA adapters added when asked), its tokenizer and its source; under a launcher rank 0 writes
    the model source first, the other ranks then read it."""
    from ragen.models.load import load_model_and_tokenizer, resolve_model

    cfg, source_dir = run.cfg, run_dir / "model-source"
    if not dp.is_main():
        dp.barrier()
    model_name = str(init_model) if init_model is not None else cfg.model.name  # a warm start replaces the model
    model, tokenizer = load_model_and_tokenizer(model_name, source_dir, list(run.env_names),
                                                dtype=str(dtype).removeprefix("torch."), device=str(device),
                                                attn_implementation=cfg.model.attn_implementation)
    if dp.is_main():
        dp.barrier()
    if cfg.model.lora_rank > 0:
        from ragen.models.lora import add_policy_adapters

        model = add_policy_adapters(model, cfg.model)
    return model, tokenizer, resolve_model(model_name, source_dir, list(run.env_names))


def _engine_options(cfg: RunConfig, dtype: torch.dtype) -> dict:
    """The DeepSpeed settings actor and critic share."""
    tcfg = cfg.trainer
    return dict(weight_decay=tcfg.weight_decay, grad_clip=tcfg.grad_clip, zero_stage=tcfg.zero_stage, dtype=dtype,
                extra_config=dp.user_deepspeed_config(tcfg.deepspeed_config))


def _critic(cfg: RunConfig, source, device: torch.device, dtype: torch.dtype, lora: bool):
    from ragen.models.critic import ValueModel
    from ragen.models.load import plain_source

    source = plain_source(source, str(dtype).removeprefix("torch."))  # a GGUF file: the policy's dequantized copy
    value_model = ValueModel.from_causal_lm(source.path, dtype, **source.from_pretrained_kwargs()).to(device)
    if lora:
        from ragen.models.lora import add_critic_adapters

        value_model = add_critic_adapters(value_model, cfg.model)
    return dp.make_engine(value_model, lr=cfg.trainer.critic_lr, **_engine_options(cfg, dtype))


def _rollout(run: ResolvedRun, engine, tokenizer, parser, rank: int, world: int):
    from ragen.rollout import Rollout

    return Rollout(engine, tokenizer, run.cfg, parser, shard=(rank, world), run=run)


def _collapse(run: ResolvedRun, tokenizer):
    """V2 collapse diagnostics, when enabled, the model reasons in <think> and sees the whole history (§9.1: full
    context mode; a history window packs several prompts per row, which the X/Z extraction does not read)."""
    from ragen.train.collapse import CollapseDiagnostics

    cfg = run.cfg
    if not cfg.collapse.enabled or not run.thinks:
        return None
    if cfg.rollout.max_context_window:
        log.info("collapse_disabled", reason="rollout.max_context_window packs per-turn prompts")
        return None
    return CollapseDiagnostics(cfg.collapse, tokenizer, cfg.trainer.seed)


def _writer(cfg: RunConfig, run_dir: Path, resume: bool, device: torch.device):
    if not dp.is_main():
        return NullWriter()
    return RunWriter(run_dir, provenance.resolved_config(cfg), wandb=cfg.logging.wandb,
                     wandb_project=cfg.logging.wandb_project, resume=resume,
                     info=None if resume else provenance.run_info(cfg, device))
