"""The StarPO trainer. One training step reads top to bottom in ``Trainer.step``:

ROLLOUT -> DIAGNOSE -> FILTER -> SHAPE -> ADVANTAGES -> UPDATE -> LOG

Everything a step uses comes from the registries by the names in the config: the env variant, the algorithm
preset (estimator, filter, shapers, loss settings, critic or not) and the action parser.
"""

from __future__ import annotations

import random
import shutil
import time
from datetime import datetime
from pathlib import Path

import attrs
import numpy as np
import torch

from ragen import config as config_mod
from ragen.train import provenance
from ragen.contract.algorithm import AdvantageInput, AlgorithmPreset, FilterInput, ShapeInput
from ragen.train.batch import Batch, collate, micro_batches, model_attention, split_rows, token_micro_batches
from ragen.plugins.components import component_config, make_component
from ragen.config import RunConfig
from ragen.models import distributed as dp
from ragen.models.distributed import init_distributed, make_engine, pick_device, step_with_grad_norm, user_deepspeed_config
from ragen.train import interrupt
from ragen.errors import ConfigError, Interrupted, RagenError
from ragen.train.early_stop import EarlyStopper
from ragen.envs.env_lists import check_plan, env_names, run_label, train_plan
from ragen.train.losses import aggregate, global_norm, kl_penalty, policy_loss, sampled_logprobs, tis_weights, value_loss
from ragen.rollout.engine import old_logprobs_reusable
from ragen.train.shared_prefix import prefix_plan, shareable, shared_prefix_hidden, to_remainder, to_row_positions
from ragen.plugins.loader import get_registry
from ragen.train.runlog import NullWriter, RunWriter
from ragen.log import configure_logging, log, progress

CHECKPOINTS = "checkpoints"
BUILTIN_ACTOR_LR = 1e-4  #: docs/models.md: the RL rate measured for the warm-started built-in models
FINAL = "final"


def resolve_preset(cfg: RunConfig) -> AlgorithmPreset:
    """The algorithm preset named by ``algo.name`` with ``algo.options`` applied on top."""
    item = get_registry("algorithm").get(cfg.algo.name)
    preset = item.factory
    if cfg.algo.options:
        data = {**config_mod.converter.unstructure(preset), **cfg.algo.options}
        preset = config_mod.structure(AlgorithmPreset, data, path="algo.options")
    return preset


def actor_lr(cfg: RunConfig) -> float:
    """``trainer.actor_lr``, or its default for the model: 1e-4 for the built-in random-init sizes, 1e-5 otherwise."""
    from ragen.models.builtin import BUILTIN_MODELS

    if cfg.trainer.actor_lr is not None:
        return cfg.trainer.actor_lr
    return BUILTIN_ACTOR_LR if cfg.model.name in BUILTIN_MODELS else 1e-5


def new_run_dir(cfg: RunConfig) -> Path:
    name = cfg.logging.name or f"{run_label(cfg)}-{cfg.algo.name}-{datetime.now():%Y%m%d-%H%M%S}"
    path = Path(cfg.logging.run_dir) / name
    if path.exists() and any(path.iterdir()):
        raise ConfigError(f"logging.name: run folder {str(path)!r} exists; use `ragen run --resume {path}` or another name")
    return path


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


@attrs.define
class StepResult:
    metrics: dict
    stop_reason: str | None = None


class Trainer:
    """Builds the engines and components of a run, then runs steps, validation and checkpoints."""

    #: a group's shared prompt runs once in the training forward passes (``ragen.train.shared_prefix``); off: every row whole
    share_prefix = True

    def __init__(self, cfg: RunConfig, run_dir: Path, resume: bool = False, init_model: Path | None = None):
        from ragen.models.load import load_model_and_tokenizer, resolve_dtype, resolve_model

        self.cfg, self.run_dir = cfg, Path(run_dir)
        self.device = pick_device(cfg.trainer.device)
        self.threads = dp.set_threads(cfg.trainer.threads)  # before any torch work: rollout and update share it
        self.dtype = resolve_dtype(cfg.model.dtype, str(self.device))
        seed_everything(cfg.trainer.seed)

        # components, by name, from the registries
        self.preset = resolve_preset(cfg)
        check_plan(cfg)  # every train/val env exists and takes its options
        self.env_configs = [component_config(get_registry("env").get(p.name), p.options, path="env.options")
                            for p in train_plan(cfg)]
        self.env_config = self.env_configs[0]
        self.estimator = make_component("estimator", self.preset.estimator, **self.preset.estimator_options)
        self.filters = [make_component("filter", name, **opts) for name, opts in
                        ((self.preset.pre_filter, self.preset.pre_filter_options),
                         (self.preset.filter, self.preset.filter_options)) if name]
        self.shapers = [make_component("shaper", name, **self.preset.shaper_options.get(name, {}))
                        for name in self.preset.shapers]
        self.parser = make_component("parser", cfg.rollout.parser, **cfg.rollout.parser_options)
        if self.preset.use_critic is False and self.preset.estimator == "gae":
            raise ConfigError("algo.options.use_critic: the gae estimator needs a critic")

        # models and DeepSpeed engines (under a launcher, rank 0 writes the model source first)
        init_distributed(self.device)
        self.rank, self.world = dp.rank(), dp.world_size()
        source_dir = self.run_dir / "model-source"
        if not dp.is_main():
            dp.barrier()
        model_name = str(init_model) if init_model is not None else cfg.model.name  # a warm start replaces the model
        model, self.tokenizer = load_model_and_tokenizer(model_name, source_dir, env_names(cfg),
                                                         dtype=str(self.dtype).removeprefix("torch."), device=str(self.device),
                                                         attn_implementation=cfg.model.attn_implementation)
        if dp.is_main():
            dp.barrier()
        self.lora = cfg.model.lora_rank > 0
        if self.lora:
            from ragen.models.lora import add_policy_adapters

            model = add_policy_adapters(model, cfg.model)
        self.model_source = resolve_model(model_name, source_dir, env_names(cfg))
        tcfg = cfg.trainer
        ds_extra = user_deepspeed_config(tcfg.deepspeed_config)
        self.actor = make_engine(model, lr=actor_lr(cfg), weight_decay=tcfg.weight_decay, grad_clip=tcfg.grad_clip,
                                 zero_stage=tcfg.zero_stage, dtype=self.dtype, extra_config=ds_extra)
        self.critic = None
        if self.preset.use_critic:
            from ragen.models.critic import ValueModel

            src = self.model_source
            value_model = ValueModel.from_causal_lm(src.path, self.dtype, **src.from_pretrained_kwargs()).to(self.device)
            if self.lora:
                from ragen.models.lora import add_critic_adapters

                value_model = add_critic_adapters(value_model, cfg.model)
            self.critic = make_engine(value_model, lr=tcfg.critic_lr, weight_decay=tcfg.weight_decay,
                                      grad_clip=tcfg.grad_clip, zero_stage=tcfg.zero_stage, dtype=self.dtype,
                                      extra_config=ds_extra)
        from ragen.rollout.engines import make_rollout_engine

        self.engine = make_rollout_engine(cfg, self.actor.module, self.tokenizer, self.model_source.path, self.dtype)
        # the reference policy: with LoRA the base model with adapters disabled, else a frozen copy
        self.reference = self._make_reference(model) if self.preset.needs_reference and not self.lora else None
        self.kl_beta = self.preset.kl_reward_coef
        self.early_stop = EarlyStopper(cfg.early_stop)
        self.collapse = self._make_collapse()
        self.step_idx = 0
        self.interrupted, self.saved_step = False, None  # Ctrl-C asked to stop (ragen/train/interrupt.py); last checkpoint
        self.skipped_in_a_row, self.fatal = 0, None  # consecutive skipped updates; the error that ends the run
        self.writer = NullWriter() if not dp.is_main() else RunWriter(
            self.run_dir, provenance.resolved_config(cfg), wandb=cfg.logging.wandb, wandb_project=cfg.logging.wandb_project,
            resume=resume, info=None if resume else provenance.run_info(cfg, self.device))
        self._rollout = self._make_rollout()

    def _make_collapse(self):
        """V2 collapse diagnostics, when enabled, the model reasons in <think> and sees the whole history (§9.1: full
        context mode; a history window packs several prompts per row, which the X/Z extraction does not read)."""
        from ragen.train.collapse import CollapseDiagnostics
        from ragen.plugins.components import parser_thinks

        if not self.cfg.collapse.enabled or not parser_thinks(self.cfg.rollout.parser, self.cfg.rollout.parser_options):
            return None
        if self.cfg.rollout.max_context_window:
            log.info("collapse_disabled", reason="rollout.max_context_window packs per-turn prompts")
            return None
        return CollapseDiagnostics(self.cfg.collapse, self.tokenizer, self.cfg.trainer.seed)

    # ------------------------------------------------------------------------------------------------
    def _make_rollout(self):
        from ragen.rollout import Rollout

        return Rollout(self.engine, self.tokenizer, self.cfg, self.parser, shard=(self.rank, self.world))

    def _seed(self, *keys: int) -> int:
        return int(np.random.SeedSequence([self.cfg.trainer.seed, *keys]).generate_state(1)[0])

    # ------------------------------------------------------------------------------------------------
    def step(self) -> StepResult:
        """One StarPO step."""
        cfg, step, p = self.cfg, self.step_idx, self.preset
        t0 = time.perf_counter()
        metrics: dict = {}

        # ==== ROLLOUT: n_groups x group_size envs, one seed per group, multi-turn, token-in/token-out ====
        result = self._gather(self._rollout.train_batch(step, policy_version=step, seed=self._seed(1, step)))
        trajs = result.trajectories  # the global batch: every rank's groups, in group order
        metrics.update({f"rollout/{k}": v for k, v in result.metrics.items()})
        t_rollout = time.perf_counter() - t0
        if not trajs:
            raise RagenError(f"step {step}: every env failed ({result.failed_envs} failures); see the warnings above")
        raw = [t.score for t in trajs]  # R_i = env rewards + format penalties: what filters and early stopping see
        groups = [t.group_id for t in trajs]
        metrics.update(_reward_metrics(raw, groups))

        # ==== DIAGNOSE: collapse metrics on the unfiltered batch, with the pre-update actor ====
        if self.collapse is not None and self.collapse.should_run(step + 1) and dp.is_main():
            metrics.update(self.collapse(self.actor.module, trajs, step + 1, cfg.rollout.temperature))

        # ==== FILTER: keep or drop whole groups, always on raw rewards ====
        rows, kept_ratio = self._filter(trajs, metrics)
        if not rows:
            log.warning("empty_after_filter", step=step)
            return self._finish_step(metrics, trajs, t0, t_rollout, 0.0)

        # ==== SHAPE: training scores of the kept trajectories (normalisation, penalties); raw stays untouched ====
        kept = [trajs[i] for i in rows]
        scores = [t.score for t in kept]
        for shape in self.shapers:
            scores = list(shape(ShapeInput(scores=scores, group_ids=[t.group_id for t in kept],
                                           env_names=[t.env_name for t in kept], trajectories=kept)))
        scores, bad = _finite_scores(scores)  # a shaper's NaN/inf becomes a neutral 0, counted with the env's
        metrics["rollout/nonfinite_rewards"] = metrics.get("rollout/nonfinite_rewards", 0.0) + bad
        # this rank trains its own groups; a rank whose groups were all dropped trains one masked-out row
        mine = [i for i, t in enumerate(kept) if t.group_id % self.world == self.rank]
        dummy = not mine
        n_global = len(kept)
        kept, scores = ([kept[i] for i in mine], [scores[i] for i in mine]) if mine else (self._dummy(trajs), [0.0])

        # ==== ADVANTAGES: old (and reference) log-probs and values on the exact sampled ids, then the estimator ====
        t1 = time.perf_counter()
        batch = collate(kept, self.tokenizer.pad_token_id, scores, placement=p.reward_placement).to(self.device)
        if dummy:
            batch.loss_mask.zero_()
        self._old_logprobs(batch, metrics)
        if self.preset.needs_reference:
            self._reference_kl(batch, metrics)
        values = self._values(batch) if self.critic is not None else None
        out = self.estimator(AdvantageInput(token_rewards=batch.token_rewards, mask=batch.loss_mask, scores=batch.scores,
                                            group_ids=batch.group_ids, values=values, turn_ids=batch.turn_ids,
                                            turn_scores=batch.turn_scores, kl_rewards=batch.kl_rewards))
        scale = {"none": 1.0, "linear": kept_ratio, "sqrt": kept_ratio ** 0.5}[p.filter_loss_scaling]
        batch.advantages = out.advantages.to(self.device).float() * scale
        if values is not None:
            batch.values = values
            batch.returns = out.returns.to(self.device).float()
        sampled = batch.loss_mask.bool()
        adv_sum, adv_n = dp.all_reduce_sum([float(batch.advantages[sampled].sum()), float(sampled.sum())])
        metrics["actor/advantage_mean"] = adv_sum / max(adv_n, 1.0)

        # ==== UPDATE: critic first, then actor; ppo_epochs over near-equal mini-batches ====
        metrics.update(self._update(batch, step, n_global))
        if self.world > 1:
            metrics["dist/replica_max_abs_diff"] = self._replica_diff()
        metrics.update(self.engine.sync_weights(self.actor.module) or {})  # vLLM: loaded, then verified on a probe
        return self._finish_step(metrics, trajs, t0, t_rollout, time.perf_counter() - t1)

    def _gather(self, result):
        """The global batch on every rank: all ranks' trajectories in (group, member) order, metrics recomputed."""
        if self.world == 1:
            return result
        from ragen.rollout.runner import RolloutResult, rollout_metrics

        parts = dp.all_gather_objects((result.trajectories, result.failed_envs))
        trajs = sorted((t for ts, _ in parts for t in ts), key=lambda t: (t.group_id, t.rollout_index))
        failed = sum(f for _, f in parts)
        out = RolloutResult(trajs, failed_envs=failed, errors=list(result.errors))
        out.metrics = rollout_metrics(trajs, failed_envs=failed)
        return out

    def _dummy(self, trajs: list) -> list:
        """One of this rank's trajectories, to be trained with its mask zeroed (no gradient, no statistic)."""
        own = [t for t in trajs if t.group_id % self.world == self.rank]
        return [own[0] if own else trajs[0]]

    def _replica_diff(self) -> float:
        """Largest difference between ranks of per-tensor weight sums (0 when the replicas are identical)."""
        sums = [float(p.detach().double().sum()) for p in self.actor.module.parameters()]
        allr = dp.all_gather_objects(sums)
        return max(abs(a - b) for other in allr[1:] for a, b in zip(allr[0], other)) if len(allr) > 1 else 0.0

    def _filter(self, trajs: list, metrics: dict) -> tuple[list[int], float]:
        """Rows of the kept groups (pre-filter, then filter) and the kept-group ratio; counts empty steps."""
        keep = {t.group_id for t in trajs}
        n_groups = len(keep)
        entropies = self._trajectory_entropies(trajs) if any(getattr(f, "needs_entropy", False) for f in self.filters) else None
        for i, filt in enumerate(self.filters):
            idx = [j for j, t in enumerate(trajs) if t.group_id in keep]
            res = filt(FilterInput(raw_rewards=[trajs[j].score for j in idx], group_ids=[trajs[j].group_id for j in idx],
                                   successes=[trajs[j].success for j in idx],
                                   lengths=[trajs[j].response_length for j in idx],
                                   entropies=None if entropies is None else [entropies[j] for j in idx]))
            pre = "rollout/pre_filter_" if i < len(self.filters) - 1 else "rollout/"
            metrics.update({pre + k.removeprefix("rollout/"): v for k, v in res.metrics.items()})
            keep &= set(res.kept_groups)
        rows = [i for i, t in enumerate(trajs) if t.group_id in keep]
        ratio = len(keep) / max(n_groups, 1)
        metrics["rollout/filter_kept_ratio"] = ratio
        metrics["rollout/empty_after_filter"] = float(not rows)
        return rows, ratio

    @torch.no_grad()
    def _trajectory_entropies(self, trajs: list) -> list[float]:
        """Mean token entropy over each trajectory's sampled tokens (for the entropy filter metrics)."""
        batch = collate(trajs, self.tokenizer.pad_token_id, [0.0] * len(trajs)).to(self.device)
        out = []
        parts = []
        for rows in self._micro_batches(batch, list(range(len(batch)))):
            sub = batch.rows(rows)
            _, ent = self._forward_logprobs(sub, with_entropy=True)
            m = sub.loss_mask
            parts.append((rows, (ent * m).sum(-1) / m.sum(-1).clamp(min=1)))
        return _in_row_order(parts).tolist()

    def _finish_step(self, metrics: dict, trajs: list, t0: float, t_rollout: float, t_update: float) -> StepResult:
        # ==== LOG: one metrics.jsonl line per step, sampled trajectories, console ====
        tokens = sum(len(t.input_ids) for t in trajs)
        metrics["timing/rollout_s"] = t_rollout
        metrics["timing/update_s"] = t_update
        metrics["timing/step_s"] = time.perf_counter() - t0
        metrics["perf/tokens_per_s"] = tokens / max(metrics["timing/step_s"], 1e-9)
        self.step_idx += 1
        keep = self.cfg.logging.save_trajectories
        sample = trajs if keep < 0 else trajs[:keep]
        self.writer.trajectories("trajectories.jsonl", [{"step": self.step_idx, **t.to_dict()} for t in sample])
        stop = self.early_stop.after_step(metrics)
        return StepResult(metrics, stop_reason=self.fatal or stop)

    # ------------------------------------------------------------------------------------------------
    def _forward_logprobs(self, batch: Batch, with_entropy: bool, module: torch.nn.Module | None = None,
                          entropy_grad: bool = True):
        """Log-probs (and entropy) of the sampled tokens (``loss_mask``), 0 elsewhere, as [rows, width] tensors.

        The decoder runs up to the last sampled token of the micro-batch (what follows cannot change a causal
        model's earlier states) and the LM head only where a sampled token is predicted (``sampled_logprobs``). Rows
        that share a prompt (a group's members) run it once (``ragen.train.shared_prefix``) unless ``share_prefix`` is off."""
        module = self.actor.module if module is None else module
        width = batch.input_ids.shape[1]
        sampled = batch.loss_mask.sum(0).nonzero()
        end = int(sampled[-1]) + 1 if len(sampled) else min(2, width)
        ids, lmask = batch.input_ids[:, :end], batch.loss_mask[:, :end]
        plan = None  # packed history-window rows (blocks) restart positions: the plain path
        # ZeRO-2 reduces each gradient in a hook as soon as it is ready: a parameter used by both passes would be
        # reduced twice, once half-accumulated (grad norm 2.4% off stage 0 in test_distributed), so stage 2 runs rows whole
        if (self.share_prefix and self.cfg.trainer.zero_stage < 2 and batch.blocks is None
                and shareable(module)):
            plan = prefix_plan(ids, lmask)
        if plan is None:
            hidden = module.get_decoder()(input_ids=ids, attention_mask=model_attention(batch, module, end),
                                          position_ids=batch.position_ids[:, :end]).last_hidden_state
        else:
            hidden, cols, inside = shared_prefix_hidden(module.get_decoder(), module.config, ids,
                                                        batch.attention_mask[:, :end], *plan)
            ids, lmask = to_remainder(ids, cols, inside), to_remainder(lmask, cols, inside)
        lp, ent = sampled_logprobs(hidden, module.get_output_embeddings(), ids, lmask,
                                   temperature=self.cfg.rollout.temperature, chunk=self.cfg.trainer.logprob_chunk,
                                   with_entropy=with_entropy, entropy_grad=entropy_grad)
        if plan is not None:  # back from remainder columns to row positions
            lp, ent = (None if t is None else to_row_positions(t, cols, end) for t in (lp, ent))
        return _pad_to(lp, width), None if ent is None else _pad_to(ent, width)

    def _micro_batches(self, batch: Batch, rows: list[int]) -> list[list[int]]:
        """``rows`` cut into micro-batches: by token budget over length-sorted rows (``trainer.micro_batch_tokens``),
        else ``trainer.micro_batch_size`` rows at a time."""
        tcfg = self.cfg.trainer
        if tcfg.micro_batch_tokens > 0:
            lengths = batch.attention_mask.sum(-1).tolist()
            return token_micro_batches(rows, [lengths[r] for r in rows], tcfg.micro_batch_tokens)
        # a group's rows side by side, so that they share one prompt pass (the sum of the gradients is the same)
        return micro_batches(sorted(rows, key=lambda r: int(batch.group_ids[r])), tcfg.micro_batch_size)

    @torch.no_grad()
    def _old_logprobs(self, batch: Batch, metrics: dict) -> None:
        """π_old of the sampled tokens: the engine's own sampling log-probs where they are exact for this update (the
        rule: ``old_logprobs_reusable``), else a no-grad forward of the actor, with the entropy and the engine-vs-trainer
        log-prob gap as metrics."""
        tcfg = self.cfg.trainer
        self._reused_old = old_logprobs_reusable(self.engine, ppo_epochs=tcfg.ppo_epochs,
                                                 tis_cap=self.cfg.rollout.tis_cap) is None
        metrics["rollout/old_logprobs_reused"] = float(self._reused_old)
        if self._reused_old:  # actor/entropy then comes from the update's forward passes
            batch.old_logprobs = batch.rollout_logprobs * batch.loss_mask
            return
        old, ent = [], []
        for rows in self._micro_batches(batch, list(range(len(batch)))):
            lp, e = self._forward_logprobs(batch.rows(rows), with_entropy=True)
            old.append((rows, _pad_to(lp, batch.input_ids.shape[1])))
            ent.append(_pad_to(e, batch.input_ids.shape[1]))
        batch.old_logprobs = _in_row_order(old)
        mask = batch.loss_mask.bool()
        entropy = _in_row_order(list(zip((r for r, _ in old), ent)))
        diff = (batch.old_logprobs - batch.rollout_logprobs).abs()[mask]
        # over the global batch: sums and counts reduced across data-parallel ranks
        ent_sum, diff_sum, n = dp.all_reduce_sum([float(entropy[mask].sum()), float(diff.sum()), float(mask.sum())])
        local_max = float(diff.max()) if diff.numel() else 0.0
        metrics["actor/entropy"] = ent_sum / n if n else 0.0
        metrics["rollout/logprob_abs_diff_mean"] = diff_sum / n if n else 0.0
        metrics["rollout/logprob_abs_diff_max"] = max(dp.all_gather_objects(local_max))

    def _make_reference(self, model: torch.nn.Module) -> torch.nn.Module:
        """The frozen reference policy: a copy of the initial model (the warm-started one when the run warm-started)."""
        import copy

        return copy.deepcopy(model).eval().requires_grad_(False)

    def _reference_logprobs(self, batch: Batch) -> torch.Tensor:
        if self.lora:  # the base model is the reference: same module, adapters off
            with self.actor.module.disable_adapter():
                return self._forward_logprobs(batch, with_entropy=False)[0]
        return self._forward_logprobs(batch, with_entropy=False, module=self.reference)[0]

    @torch.no_grad()
    def _reference_kl(self, batch: Batch, metrics: dict) -> None:
        """Reference log-probs; the KL-in-reward term (subtracted from the token rewards) and actor/ref_kl."""
        p, ref = self.preset, []
        for rows in micro_batches(list(range(len(batch))), self.cfg.trainer.micro_batch_size):
            sub = batch.rows(rows)
            ref.append(_pad_to(self._reference_logprobs(sub), batch.input_ids.shape[1]))
        batch.ref_logprobs = torch.cat(ref)
        mask = batch.loss_mask
        d = (batch.old_logprobs - batch.ref_logprobs) * mask
        d_sum, n_tok = dp.all_reduce_sum([float(d.sum()), float(mask.sum())])
        metrics["actor/ref_kl"] = d_sum / max(n_tok, 1.0)
        if p.kl_reward_coef > 0:
            k = kl_penalty(batch.old_logprobs, batch.ref_logprobs, p.kl_reward_type) * mask
            batch.kl_rewards = -self.kl_beta * k
            batch.token_rewards = batch.token_rewards + batch.kl_rewards
            k_sum, n_rows = dp.all_reduce_sum([float(k.sum()), float((mask.sum(-1) > 0).sum())])
            seq_kl = k_sum / max(n_rows, 1.0)  # mean per-trajectory KL over the global batch
            metrics["actor/kl_reward_beta"] = self.kl_beta
            metrics["actor/kl_reward"] = seq_kl
            if p.kl_target:  # adaptive beta (Ziegler et al.; verl's AdaptiveKLController)
                err = max(-0.2, min(0.2, seq_kl / p.kl_target - 1))
                self.kl_beta *= 1 + err * n_rows / p.kl_horizon

    @torch.no_grad()
    def _values(self, batch: Batch) -> torch.Tensor:
        out = []
        for rows in micro_batches(list(range(len(batch))), self.cfg.trainer.micro_batch_size):
            sub = batch.rows(rows)
            out.append(_pad_to(self.critic(sub.input_ids, model_attention(sub, self.critic.module), sub.position_ids),
                               batch.input_ids.shape[1]))
        return torch.cat(out) * batch.loss_mask

    def _update(self, batch: Batch, step: int, n_global: int) -> dict:
        cfg, p = self.cfg.trainer, self.preset
        gen = torch.Generator().manual_seed(self._seed(2, step, self.rank))
        # the longest episode any training env allows (the normaliser of seq-mean-token-sum modes)
        length_norm = float(max(c.max_turns * c.response_length for c in self.env_configs))
        n_minis = max(1, round(n_global / cfg.ppo_mini_batch_size))  # the same count on every rank
        scale = float(self.world)  # DeepSpeed averages gradients over ranks; the normalisers are already global
        sums: dict[str, float] = {}
        counts: dict[str, float] = {}

        def add(key: str, value: float, weight: float = 1.0) -> None:
            sums[key] = sums.get(key, 0.0) + value
            counts[key] = counts.get(key, 0.0) + weight

        # with reused old log-probs no forward pass has measured the entropy yet: the first epoch's passes do
        entropy_metric = getattr(self, "_reused_old", False)
        skipped = critic_skipped = 0
        for epoch in range(cfg.ppo_epochs):
            for mini in split_rows(len(batch), n_minis, gen):
                # every rank runs as many backward passes (ZeRO reduces gradients inside backward), at least one: a
                # rank with fewer micro-batches (or no rows in this mini-batch) pads with a masked row, which adds no
                # gradient and no statistic
                parts = self._micro_batches(batch, mini)
                pad = max(1, *dp.all_gather_objects(len(parts))) - len(parts)
                micros = [batch.rows(r) for r in parts] + [_masked(batch.rows([0])) for _ in range(pad)]
                norm = global_norm([m.loss_mask for m in micros], length_norm)
                share = 1.0 / self.world  # loss shares sum over ranks to the mini-batch loss
                if self.critic is not None:
                    vloss_total, vbad = 0.0, False
                    for m in micros:
                        v = self.critic(m.input_ids, model_attention(m, self.critic.module), m.position_ids)
                        vloss, vm = value_loss(v, m.values, m.returns, m.loss_mask, clip=cfg.value_clip,
                                               agg_mode=p.loss_agg_mode, norm=norm)
                        if not torch.isfinite(vloss):
                            vbad, vloss = True, _zero_loss(self.critic.module)
                        self.critic.backward(vloss * scale)
                        vloss_total += float(vloss.detach())
                        add("critic/vf_clipfrac", vm["critic/vf_clipfrac"], float(m.loss_mask.sum()))
                    critic_norm = self._step_if_finite(self.critic, vbad)
                    critic_skipped += critic_norm is None
                    if critic_norm is not None:
                        add("critic/grad_norm", critic_norm)
                    add("critic/vf_loss", vloss_total, share)
                pg_total, ent_total, kl_total, nonfinite = 0.0, 0.0, 0.0, False
                for m in micros:
                    lp, ent = self._forward_logprobs(m, with_entropy=p.entropy_coef > 0 or entropy_metric,
                                                     entropy_grad=p.entropy_coef > 0)
                    if entropy_metric and epoch == 0:
                        add("actor/entropy", float((ent.detach() * m.loss_mask).sum()), float(m.loss_mask.sum()))
                    adv = m.advantages
                    if self.cfg.rollout.tis_cap > 0:  # truncated importance sampling for the train/rollout gap
                        adv = adv * tis_weights(m.old_logprobs, m.rollout_logprobs, m.loss_mask, self.cfg.rollout.tis_cap)
                    pg, pm = policy_loss(lp, m.old_logprobs, adv, m.loss_mask,
                                         clip_low=p.clip_ratio_low, clip_high=p.clip_ratio_high, clip_c=p.clip_ratio_c,
                                         agg_mode=p.loss_agg_mode, norm=norm, log_ratio_clamp=p.log_ratio_clamp,
                                         ratio_level=p.ratio_level)
                    loss = pg
                    if p.kl_coef > 0:
                        kl = aggregate(kl_penalty(lp, m.ref_logprobs, p.kl_type), m.loss_mask, p.loss_agg_mode, norm)
                        loss = loss + p.kl_coef * kl
                        kl_total += float(kl.detach())
                    if p.entropy_coef > 0:
                        ent_agg = aggregate(ent, m.loss_mask, p.loss_agg_mode, norm)
                        loss = loss - p.entropy_coef * ent_agg
                        ent_total += float(ent_agg.detach())
                    if not torch.isfinite(loss):  # this mini-batch's update is skipped; ranks still backward in step
                        nonfinite, loss = True, _zero_loss(self.actor.module)
                    self.actor.backward(loss * scale)
                    if nonfinite:
                        continue
                    pg_total += float(pg.detach())
                    ntok = float(m.loss_mask.sum())
                    for k, v in pm.items():
                        add(k, v, ntok)
                grad_norm = self._step_if_finite(self.actor, nonfinite)
                if grad_norm is None:
                    skipped += 1
                    self._note_skip(step)
                    continue
                self.skipped_in_a_row = 0
                add("actor/grad_norm", grad_norm)  # the same global norm on every rank: a mean
                add("actor/pg_loss", pg_total, share)
                add("actor/entropy_loss", ent_total, share)
                if p.kl_coef > 0:
                    add("actor/kl_loss", kl_total, share)
        keys = sorted(sums)
        totals = dp.all_reduce_sum([sums[k] for k in keys] + [counts[k] for k in keys])
        n = len(keys)
        self._check_policy_finite(micros[0], step)
        out = {k: totals[i] / max(totals[n + i], 1e-9) for i, k in enumerate(keys)}
        out["actor/skipped_updates"] = float(skipped)
        if self.critic is not None:
            out["critic/skipped_updates"] = float(critic_skipped)
        return out

    # ---- non-finite values: a bad loss or gradient skips one update; K in a row, or broken weights, stop the run ----
    @staticmethod
    def _step_if_finite(engine, nonfinite_loss: bool) -> float | None:
        """``engine.step()`` and its gradient norm; None when a loss or a gradient on any rank was NaN/inf: then the
        gradients are dropped and the optimizer does not step (weights and moments unchanged)."""
        bad = nonfinite_loss or not _grads_finite(engine.module)
        if dp.all_reduce_sum([float(bad)])[0] == 0:
            return step_with_grad_norm(engine)
        engine.zero_grad()
        if not isinstance(engine.optimizer, torch.optim.Optimizer):  # ZeRO / bf16 wrappers keep their own buffers
            engine.optimizer.zero_grad()
        return None

    def _note_skip(self, step: int) -> None:
        """Count a skipped actor update; K in a row end the run (after its checkpoint and export, see ``train``)."""
        self.skipped_in_a_row += 1
        log.warning("update_skipped", step=step, reason="non-finite loss or gradient", in_a_row=self.skipped_in_a_row)
        if self.skipped_in_a_row >= self.cfg.trainer.max_skipped_updates and self.fatal is None:
            self.fatal = (f"step {step + 1}: {self.skipped_in_a_row} consecutive updates skipped for a non-finite loss or "
                          f"gradient (trainer.max_skipped_updates={self.cfg.trainer.max_skipped_updates}); checkpoint and "
                          f"final model saved in {self.run_dir}")
        return None

    @torch.no_grad()
    def _check_policy_finite(self, micro: Batch, step: int) -> None:
        """Stop before the next rollout samples from a policy whose log-probs overflowed (e.g. actor_lr=1e30): its
        weights are not saved, so the last checkpoint stays the last good one."""
        lp, _ = self._forward_logprobs(micro, with_entropy=False)
        if dp.all_reduce_sum([float(not bool(torch.isfinite(lp).all()))])[0]:
            raise RagenError(f"step {step + 1}: the update made the policy's log-probs non-finite (weights overflowed; "
                             f"trainer.actor_lr={actor_lr(self.cfg):g} may be too large); stopped before sampling "
                             f"from it, the last checkpoint under {self.run_dir / CHECKPOINTS} is intact")

    # ------------------------------------------------------------------------------------------------
    def validate(self) -> dict:
        bar = progress(0, 0, self.cfg.logging.progress and dp.is_main(), desc="validation", unit="turn", leave=False)
        with bar:
            result = self._gather(self._rollout.val_batch(policy_version=self.step_idx, seed=self._seed(3, self.step_idx),
                                                          progress=bar))
        self.writer.trajectories("val_trajectories.jsonl", [{"step": self.step_idx, **t.to_dict()} for t in result.trajectories])
        return {f"val/{k}": v for k, v in result.metrics.items()}

    def save_checkpoint(self) -> Path:
        tag = f"step{self.step_idx}"
        state = {"step": self.step_idx, "rng": rng_state(),
                 "early_stop": self.early_stop.state_dict(), "kl_beta": self.kl_beta,
                 "collapse": self.collapse.state_dict() if self.collapse is not None else None}
        ckpt = self.run_dir / CHECKPOINTS
        self.actor.save_checkpoint(str(ckpt / "actor"), tag=tag, client_state=state)
        if self.critic is not None:
            self.critic.save_checkpoint(str(ckpt / "critic"), tag=tag)
        self.saved_step = self.step_idx
        self._prune_checkpoints(ckpt)
        log.info("checkpoint_saved", step=self.step_idx, path=str(ckpt))
        return ckpt

    def _prune_checkpoints(self, ckpt: Path) -> None:
        """Delete all but the newest ``trainer.keep_checkpoints`` tags (DeepSpeed's ``latest`` names the newest)."""
        keep = self.cfg.trainer.keep_checkpoints
        if not keep or not dp.is_main():
            return
        for sub in ("actor", "critic"):
            tags = sorted((p for p in (ckpt / sub).glob("step*") if p.is_dir() and p.name[4:].isdigit()),
                          key=lambda p: int(p.name[4:]))
            for old in tags[:-keep]:
                shutil.rmtree(old, ignore_errors=True)

    def load_checkpoint(self) -> int:
        ckpt = self.run_dir / CHECKPOINTS
        path, state = self.actor.load_checkpoint(str(ckpt / "actor"))
        if path is None:
            raise ConfigError(f"--resume: no checkpoint under {ckpt}")
        if self.critic is not None:
            self.critic.load_checkpoint(str(ckpt / "critic"))
        self.step_idx = int(state["step"])
        self.early_stop.load_state_dict(state["early_stop"])
        self.kl_beta = float(state["kl_beta"])
        if self.collapse is not None and state.get("collapse"):
            self.collapse.load_state_dict(state["collapse"])
        set_rng_state(state["rng"])
        self.engine.sync_weights(self.actor.module)
        return self.step_idx

    def export(self) -> Path:
        out = self.run_dir / FINAL
        if not dp.is_main():
            return out
        if self.lora:
            from ragen.models.lora import export

            export(self.actor.module, out)
        else:
            self.actor.module.save_pretrained(out)
        self.tokenizer.save_pretrained(out)
        return out

    def close(self) -> None:
        getattr(self.engine, "close", lambda: None)()
        self._rollout.close()
        self.writer.close()


def _masked(batch: Batch) -> Batch:
    """``batch`` with its loss mask zeroed."""
    batch.loss_mask = torch.zeros_like(batch.loss_mask)
    return batch


def _in_row_order(parts: list[tuple[list[int], torch.Tensor]]) -> torch.Tensor:
    """Per-micro-batch results (rows, tensor) put back in the batch's row order (token micro-batches sort rows)."""
    rows = [r for idx, _ in parts for r in idx]
    out = torch.cat([t for _, t in parts])
    return out[torch.as_tensor(rows).argsort().to(out.device)]


def _zero_loss(module: torch.nn.Module) -> torch.Tensor:
    """A loss whose gradient is exactly zero for every trainable weight (stands in for a non-finite one, so every rank
    still runs its backward passes)."""
    return sum(p.reshape(-1)[0] * 0.0 for p in module.parameters() if p.requires_grad)


def _grads_finite(module: torch.nn.Module) -> bool:
    """No local gradient is NaN/inf (one norm per tensor, one sync). ZeRO-2 keeps reduced gradients in its own
    buffers, where this check cannot look; the loss check still covers it."""
    norms = [torch.linalg.vector_norm(p.grad.float()) for p in module.parameters() if p.grad is not None]
    return not norms or bool(torch.isfinite(torch.stack(norms).sum()))


def _finite_scores(scores: list[float]) -> tuple[list[float], int]:
    """Scores with NaN/inf replaced by 0.0, and how many were replaced."""
    bad = sum(not np.isfinite(s) for s in scores)
    return ([float(s) if np.isfinite(s) else 0.0 for s in scores], int(bad)) if bad else (scores, 0)


def _pad_to(t: torch.Tensor, width: int) -> torch.Tensor:
    if t.shape[1] == width:
        return t
    return torch.nn.functional.pad(t, (0, width - t.shape[1]))


def _reward_metrics(raw: list[float], groups: list[int]) -> dict:
    by_group: dict[int, list[float]] = {}
    for r, g in zip(raw, groups, strict=True):
        by_group.setdefault(g, []).append(r)
    stds = [float(np.std(v, ddof=1)) if len(v) > 1 else 0.0 for v in by_group.values()]
    return {
        "reward/mean": float(np.mean(raw)),
        "reward/max": float(np.max(raw)),
        "reward/min": float(np.min(raw)),
        "reward/group_std": float(np.mean(stds)),
        "rollout/frac_zero_std_groups": float(np.mean([s <= 1e-10 for s in stds])),
    }


# ----------------------------------------------------------------------------------------------------------
def train(cfg: RunConfig | None, resume: Path | None = None, warmstart: bool | None = None) -> Path:
    """Run (or resume) a training run; returns the run folder. ``warmstart`` True/False overrides ``warmstart.mode``."""
    configure_logging()
    if warmstart is not None and cfg is not None:  # recorded in config.yaml, so a resume or a rerun does the same
        cfg = attrs.evolve(cfg, warmstart=attrs.evolve(cfg.warmstart, mode="always" if warmstart else "never"))
    if resume is not None:
        run_dir = Path(resume)
        if not (run_dir / "config.yaml").is_file():
            raise ConfigError(f"--resume: {str(run_dir)!r} is not a run folder (no config.yaml)")
        cfg = config_mod.load_config(run_dir / "config.yaml")
    else:
        init_distributed(pick_device(cfg.trainer.device))  # under a launcher every rank must agree on the folder
        run_dir = dp.broadcast_object(new_run_dir(cfg) if dp.is_main() else None)
    init_model, warm_metrics = _initial_model(cfg, run_dir, resume is not None)
    trainer = Trainer(cfg, run_dir, resume=resume is not None, init_model=init_model)
    try:
        if resume is not None:
            start = trainer.load_checkpoint()
            trainer.writer.truncate_after(start)
            log.info("run_resumed", run_dir=str(run_dir), step=start)
        else:
            log.info("run_started", run_dir=str(run_dir), env=run_label(cfg), algo=cfg.algo.name, model=cfg.model.name)
            if warm_metrics:
                trainer.writer.metrics(0, warm_metrics)
            val = trainer.validate()
            trainer.early_stop.after_validation(val)
            trainer.writer.metrics(0, val)
        _loop(trainer)
        if trainer.interrupted:  # checkpointed, not exported: the run is unfinished
            raise Interrupted(f"interrupted after step {trainer.step_idx}; checkpoint saved, continue with "
                              f"`ragen run --resume {run_dir}`")
        final = trainer.export()
        if trainer.fatal:  # checkpointed and exported: now the one-line error and a non-zero exit
            raise RagenError(trainer.fatal)
        log.info("run_finished", run_dir=str(run_dir), final_model=str(final), steps=trainer.step_idx)
    finally:
        trainer.close()
    return run_dir


def _initial_model(cfg: RunConfig, run_dir: Path, resume: bool) -> tuple[Path | None, dict]:
    """The warm-started model folder this run starts from (None: ``model.name`` as is) and the warm start's metrics.

    Rank 0 trains it or takes it from the cache (ragen/warmstart/cache.py); the other ranks wait, then load the same folder.
    A resumed run starts from the copy in its own folder.
    """
    from ragen.warmstart import cache as warmstart

    path = Path(run_dir) / warmstart.RUN_SUBDIR
    if resume:
        return (path if (path / "config.json").is_file() else None), {}
    if not warmstart.applies(cfg):
        return None, {}
    metrics = warmstart.prepare(cfg, run_dir)[1] if dp.is_main() else {}
    dp.barrier()
    return path, metrics


def _loop(trainer: Trainer) -> None:
    cfg = trainer.cfg.trainer
    t_start = time.perf_counter()
    bar = progress(cfg.steps, trainer.step_idx, trainer.cfg.logging.progress and dp.is_main())
    try:
        while trainer.step_idx < cfg.steps:
            if dp.all_reduce_sum([float(interrupt.requested())])[0]:  # every rank stops after the same step
                trainer.interrupted = True
                break
            res = trainer.step()
            step = trainer.step_idx
            out_of_time = bool(cfg.max_steps_wall_s) and time.perf_counter() - t_start > cfg.max_steps_wall_s
            stop = res.stop_reason
            if step == cfg.steps or out_of_time or stop or (cfg.test_freq and step % cfg.test_freq == 0):
                val = trainer.validate()
                res.metrics.update(val)
                stop = stop or trainer.early_stop.after_validation(res.metrics)
            trainer.writer.metrics(step, res.metrics)
            if trainer.cfg.logging.report_every and dp.is_main():  # report.html: a long run watched in a browser
                from ragen.runs.report import refresh

                refresh(trainer.run_dir, step, trainer.cfg.logging.report_every,
                        final=bool(stop or out_of_time or step == cfg.steps))
            bar.update(1)
            bar.set_postfix({k.split("/")[-1]: f"{res.metrics[k]:.3g}" for k in
                             ("rollout/success", "reward/mean", "actor/pg_loss", "val/success") if k in res.metrics})
            if stop:
                log.warning("early_stopped", step=step, reason=stop)
                break
            if out_of_time:
                log.warning("wall_time_limit_reached", step=step, limit_s=cfg.max_steps_wall_s)
                break
            if cfg.save_freq and step % cfg.save_freq == 0 and step < cfg.steps:
                trainer.save_checkpoint()
        if trainer.saved_step != trainer.step_idx:
            trainer.save_checkpoint()
    finally:
        bar.close()
