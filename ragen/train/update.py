"""The UPDATE phase: critic first, then actor; ``ppo_epochs`` over near-equal mini-batches of this rank's rows, one
optimizer step per mini-batch (gradient accumulation is ours: one backward per micro-batch).

Non-finite values: a NaN/inf loss or gradient skips that one update (weights and optimizer moments unchanged);
``trainer.max_skipped_updates`` in a row, or a policy whose log-probs overflowed, end the run.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ragen.config import RunConfig
from ragen.contract.algorithm import AlgorithmPreset
from ragen.errors import RagenError
from ragen.log import log
from ragen.models import distributed as dp
from ragen.train.batch import Batch, model_attention, split_rows
from ragen.train.checkpoint import CHECKPOINTS
from ragen.train.losses import aggregate, global_norm, kl_penalty, policy_loss, tis_weights, value_loss
from ragen.train.policy import Policy


class Updater:
    """Runs the update of a step's batch; counts the skipped actor updates (``skipped_in_a_row``) and holds the error
    that ends the run once there are too many (``fatal``: the run checkpoints and exports first, see ``train``)."""

    def __init__(self, cfg: RunConfig, preset: AlgorithmPreset, policy: Policy, env_configs: list, run_dir: Path,
                 world: int, actor_lr: float):
        self.cfg, self.preset, self.policy, self.run_dir, self.world = cfg, preset, policy, Path(run_dir), world
        self.grad_scale = float(world)  # DeepSpeed averages gradients over ranks; the normalisers are already global
        self.actor_lr = actor_lr  # named in the error of a policy that overflowed
        # the longest episode any training env allows (the normaliser of seq-mean-token-sum modes)
        self.length_norm = float(max(c.max_turns * c.response_length for c in env_configs))
        self.skipped_in_a_row, self.fatal = 0, None

    def __call__(self, batch: Batch, step: int, n_global: int, seed: int, measure_entropy: bool = False) -> dict:
        """The update's metrics, reduced over ranks. ``n_global``: kept rows over all ranks (every rank cuts its rows
        into the same number of mini-batches); ``measure_entropy``: the first epoch's passes report actor/entropy
        (with reused old log-probs no forward pass has measured it yet)."""
        gen = torch.Generator().manual_seed(seed)
        n_minis = max(1, round(n_global / self.cfg.trainer.ppo_mini_batch_size))  # the same count on every rank
        means = _Means()
        skipped = critic_skipped = 0
        for epoch in range(self.cfg.trainer.ppo_epochs):
            for mini in split_rows(len(batch), n_minis, gen):
                micros = self._micros(batch, mini)
                norm = global_norm([m.loss_mask for m in micros], self.length_norm)
                if self.policy.critic is not None:
                    critic_skipped += not self._critic_step(micros, norm, means)
                skipped += not self._actor_step(micros, norm, means, step, measure_entropy and epoch == 0)
        out = means.reduce()
        self._check_policy_finite(micros[0], step)
        out["actor/skipped_updates"] = float(skipped)
        if self.policy.critic is not None:
            out["critic/skipped_updates"] = float(critic_skipped)
        return out

    def _micros(self, batch: Batch, mini: list[int]) -> list[Batch]:
        # every rank runs as many backward passes (ZeRO reduces gradients inside backward), at least one: a rank with
        # fewer micro-batches (or no rows in this mini-batch) pads with a masked row, which adds no gradient and no
        # statistic
        parts = self.policy.micro_batches(batch, mini)
        pad = max(1, *dp.all_gather_objects(len(parts))) - len(parts)
        return [batch.rows(r) for r in parts] + [_masked(batch.rows([0])) for _ in range(pad)]

    def _critic_step(self, micros: list[Batch], norm, means: _Means) -> bool:
        """One optimizer step of the critic over a mini-batch; False when it was skipped."""
        critic, share = self.policy.critic, 1.0 / self.world  # loss shares sum over ranks to the mini-batch loss
        total, bad = 0.0, False
        for m in micros:
            v = critic(m.input_ids, model_attention(m, critic.module), m.position_ids)
            vloss, vm = value_loss(v, m.values, m.returns, m.loss_mask, clip=self.cfg.trainer.value_clip,
                                   agg_mode=self.preset.loss_agg_mode, norm=norm)
            if not torch.isfinite(vloss):
                bad, vloss = True, _zero_loss(critic.module)
            critic.backward(vloss * self.grad_scale)
            total += float(vloss.detach())
            means.add("critic/vf_clipfrac", vm["critic/vf_clipfrac"], float(m.loss_mask.sum()))
        grad_norm = _step_if_finite(critic, bad)
        if grad_norm is not None:
            means.add("critic/grad_norm", grad_norm)
        means.add("critic/vf_loss", total, share)
        return grad_norm is not None

    def _actor_step(self, micros: list[Batch], norm, means: _Means, step: int, measure_entropy: bool) -> bool:
        """One optimizer step of the actor over a mini-batch; False when it was skipped."""
        p, actor, share = self.preset, self.policy.actor, 1.0 / self.world
        pg_total, ent_total, kl_total, nonfinite = 0.0, 0.0, 0.0, False
        for m in micros:
            lp, ent = self.policy.logprobs(m, with_entropy=p.entropy_coef > 0 or measure_entropy,
                                           entropy_grad=p.entropy_coef > 0)
            if measure_entropy:
                means.add("actor/entropy", float((ent.detach() * m.loss_mask).sum()), float(m.loss_mask.sum()))
            pg, pm = policy_loss(lp, m.old_logprobs, self._advantages(m), m.loss_mask,
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
                nonfinite, loss = True, _zero_loss(actor.module)
            actor.backward(loss * self.grad_scale)
            if nonfinite:
                continue
            pg_total += float(pg.detach())
            ntok = float(m.loss_mask.sum())
            for k, v in pm.items():
                means.add(k, v, ntok)
        grad_norm = _step_if_finite(actor, nonfinite)
        if grad_norm is None:
            self._note_skip(step)
            return False
        self.skipped_in_a_row = 0
        means.add("actor/grad_norm", grad_norm)  # the same global norm on every rank: a mean
        means.add("actor/pg_loss", pg_total, share)
        means.add("actor/entropy_loss", ent_total, share)
        if p.kl_coef > 0:
            means.add("actor/kl_loss", kl_total, share)
        return True

    def _advantages(self, m: Batch) -> torch.Tensor:
        if self.cfg.rollout.tis_cap > 0:  # truncated importance sampling for the train/rollout gap
            return m.advantages * tis_weights(m.old_logprobs, m.rollout_logprobs, m.loss_mask, self.cfg.rollout.tis_cap)
        return m.advantages

    def _note_skip(self, step: int) -> None:
        """Count a skipped actor update; K in a row end the run (after its checkpoint and export, see ``train``)."""
        self.skipped_in_a_row += 1
        log.warning("update_skipped", step=step, reason="non-finite loss or gradient", in_a_row=self.skipped_in_a_row)
        limit = self.cfg.trainer.max_skipped_updates
        if self.skipped_in_a_row >= limit and self.fatal is None:
            self.fatal = (
                f"step {step + 1}: {self.skipped_in_a_row} consecutive updates skipped for a non-finite loss or "
                f"gradient (trainer.max_skipped_updates={limit}); checkpoint and final model saved in "
                f"{self.run_dir}"
            )

    @torch.no_grad()
    def _check_policy_finite(self, micro: Batch, step: int) -> None:
        """Stop before the next rollout samples from a policy whose log-probs overflowed (e.g. actor_lr=1e30): its
        weights are not saved, so the last checkpoint stays the last good one."""
        lp, _ = self.policy.logprobs(micro, with_entropy=False)
        if dp.all_reduce_sum([float(not bool(torch.isfinite(lp).all()))])[0]:
            raise RagenError(f"step {step + 1}: the update made the policy's log-probs non-finite (weights overflowed; "
                             f"trainer.actor_lr={self.actor_lr:g} may be too large); stopped before sampling "
                             f"from it, {self._last_checkpoint()}")

    def _last_checkpoint(self) -> str:
        """What is left to resume from, as it is: the newest checkpoint tag, or that none was written yet."""
        folder = self.run_dir / CHECKPOINTS
        tags = [p.name for p in (folder / "actor").glob("step*") if p.is_dir() and p.name[4:].isdigit()]
        if not tags:
            return f"and no checkpoint was written yet (none under {folder}): nothing to resume from"
        newest = max(tags, key=lambda name: int(name[4:]))
        return f"the last checkpoint ({newest} under {folder}) is intact"


class _Means:
    """Weighted sums of the update's metrics, then their means over every rank (one all-reduce)."""

    def __init__(self):
        self.sums: dict[str, float] = {}
        self.counts: dict[str, float] = {}

    def add(self, key: str, value: float, weight: float = 1.0) -> None:
        self.sums[key] = self.sums.get(key, 0.0) + value
        self.counts[key] = self.counts.get(key, 0.0) + weight

    def reduce(self) -> dict:
        keys = sorted(self.sums)
        totals = dp.all_reduce_sum([self.sums[k] for k in keys] + [self.counts[k] for k in keys])
        n = len(keys)
        return {k: totals[i] / max(totals[n + i], 1e-9) for i, k in enumerate(keys)}


def _step_if_finite(engine, nonfinite_loss: bool) -> float | None:
    """``engine.step()`` and its gradient norm; None when a loss or a gradient on any rank was NaN/inf: then the
    gradients are dropped and the optimizer does not step (weights and moments unchanged)."""
    bad = nonfinite_loss or not _grads_finite(engine.module)
    if dp.all_reduce_sum([float(bad)])[0] == 0:
        return dp.step_with_grad_norm(engine)
    engine.zero_grad()
    if not isinstance(engine.optimizer, torch.optim.Optimizer):  # ZeRO / bf16 wrappers keep their own buffers
        engine.optimizer.zero_grad()
    return None


def _grads_finite(module: torch.nn.Module) -> bool:
    """No local gradient is NaN/inf (one norm per tensor, one sync). ZeRO-2 keeps reduced gradients in its own
    buffers, where this check cannot look; the loss check still covers it."""
    norms = [torch.linalg.vector_norm(p.grad.float()) for p in module.parameters() if p.grad is not None]
    return not norms or bool(torch.isfinite(torch.stack(norms).sum()))


def _zero_loss(module: torch.nn.Module) -> torch.Tensor:
    """A loss whose gradient is exactly zero for every trainable weight (stands in for a non-finite one, so every rank
    still runs its backward passes)."""
    return sum(p.reshape(-1)[0] * 0.0 for p in module.parameters() if p.requires_grad)


def _masked(batch: Batch) -> Batch:
    """``batch`` with its loss mask zeroed."""
    batch.loss_mask = torch.zeros_like(batch.loss_mask)
    return batch
