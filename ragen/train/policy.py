"""The forward passes of a step: log-probs and entropies of the sampled tokens (actor, reference), values (critic),
over micro-batches of a ``Batch``."""

from __future__ import annotations

import torch

from ragen.config import RunConfig
from ragen.contract.algorithm import AlgorithmPreset
from ragen.models import distributed as dp
from ragen.rollout.engine import old_logprobs_reusable
from ragen.train.batch import Batch, micro_batches, model_attention, token_micro_batches
from ragen.train.losses import kl_penalty, output_head, sampled_logprobs
from ragen.train.shared_prefix import prefix_plan, shareable, shared_prefix_hidden, to_remainder, to_row_positions


class Policy:
    """The actor's forward passes, and the critic's and the reference's, as the step needs them."""

    #: a group's shared prompt runs once in the training forward passes (``ragen.train.shared_prefix``);
    #: off: every row whole
    share_prefix = True

    def __init__(self, cfg: RunConfig, preset: AlgorithmPreset, actor, critic=None, reference=None, lora: bool = False):
        self.cfg, self.preset = cfg, preset
        self.actor, self.critic, self.reference, self.lora = actor, critic, reference, lora

    def logprobs(self, batch: Batch, with_entropy: bool, module: torch.nn.Module | None = None,
                 entropy_grad: bool = True):
        """Log-probs (and entropy) of the sampled tokens (``loss_mask``), 0 elsewhere, as [rows, width] tensors.

        The decoder runs up to the last sampled token of the micro-batch (what follows cannot change a causal
        model's earlier states) and the LM head only where a sampled token is predicted (``sampled_logprobs``). Rows
        that share a prompt (a group's members) run it once (``ragen.train.shared_prefix``) unless ``share_prefix`` is
        off."""
        module = self.actor.module if module is None else module
        width = batch.input_ids.shape[1]
        sampled = batch.loss_mask.sum(0).nonzero()
        end = int(sampled[-1]) + 1 if len(sampled) else min(2, width)
        ids, lmask = batch.input_ids[:, :end], batch.loss_mask[:, :end]
        plan = None  # packed history-window rows (blocks) restart positions: the plain path
        # ZeRO-2 reduces each gradient in a hook as soon as it is ready: a parameter used by both passes would be
        # reduced twice, once half-accumulated (grad norm 2.4% off stage 0 in test_distributed), so stage 2 runs rows
        # whole
        if self.share_prefix and self.cfg.trainer.zero_stage < 2 and batch.blocks is None and shareable(module):
            plan = prefix_plan(ids, lmask)
        if plan is None:
            hidden = module.get_decoder()(input_ids=ids, attention_mask=model_attention(batch, module, end),
                                          position_ids=batch.position_ids[:, :end]).last_hidden_state
        else:
            hidden, cols, inside = shared_prefix_hidden(module.get_decoder(), module.config, ids,
                                                        batch.attention_mask[:, :end], *plan)
            ids, lmask = to_remainder(ids, cols, inside), to_remainder(lmask, cols, inside)
        lp, ent = sampled_logprobs(hidden, output_head(module), ids, lmask,
                                   temperature=self.cfg.rollout.temperature, chunk=self.cfg.trainer.logprob_chunk,
                                   with_entropy=with_entropy, entropy_grad=entropy_grad)
        if plan is not None:  # back from remainder columns to row positions
            lp, ent = (None if t is None else to_row_positions(t, cols, end) for t in (lp, ent))
        return _pad_to(lp, width), None if ent is None else _pad_to(ent, width)

    def micro_batches(self, batch: Batch, rows: list[int]) -> list[list[int]]:
        """``rows`` cut into micro-batches: by token budget over length-sorted rows (``trainer.micro_batch_tokens``),
        else ``trainer.micro_batch_size`` rows at a time."""
        tcfg = self.cfg.trainer
        if tcfg.micro_batch_tokens > 0:
            lengths = batch.attention_mask.sum(-1).tolist()
            return token_micro_batches(rows, [lengths[r] for r in rows], tcfg.micro_batch_tokens)
        # a group's rows side by side, so that they share one prompt pass (the sum of the gradients is the same)
        return micro_batches(sorted(rows, key=lambda r: int(batch.group_ids[r])), tcfg.micro_batch_size)

    @torch.no_grad()
    def old_logprobs(self, batch: Batch, metrics: dict, engine) -> bool:
        """π_old of the sampled tokens into ``batch.old_logprobs``: ``engine``'s own sampling log-probs where they are
        exact for this update (the rule: ``old_logprobs_reusable``), else a no-grad forward of the actor, with the
        entropy and the engine-vs-trainer log-prob gap as metrics. True when reused."""
        tcfg = self.cfg.trainer
        reused = old_logprobs_reusable(engine, ppo_epochs=tcfg.ppo_epochs, tis_cap=self.cfg.rollout.tis_cap) is None
        metrics["rollout/old_logprobs_reused"] = float(reused)
        if reused:  # actor/entropy then comes from the update's forward passes
            batch.old_logprobs = batch.rollout_logprobs * batch.loss_mask
            return True
        old, ent = [], []
        for rows in self.micro_batches(batch, list(range(len(batch)))):
            lp, e = self.logprobs(batch.rows(rows), with_entropy=True)
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
        return False

    @torch.no_grad()
    def reference_kl(self, batch: Batch, metrics: dict, beta: float) -> float:
        """Reference log-probs into ``batch.ref_logprobs`` and actor/ref_kl; with ``kl_reward_coef``, the KL-in-reward
        term (-beta x KL, subtracted from the token rewards). Returns beta, adapted when the preset sets
        ``kl_target``."""
        ref = []
        for rows in micro_batches(list(range(len(batch))), self.cfg.trainer.micro_batch_size):
            ref.append(_pad_to(self._reference_logprobs(batch.rows(rows)), batch.input_ids.shape[1]))
        batch.ref_logprobs = torch.cat(ref)
        mask = batch.loss_mask
        d = (batch.old_logprobs - batch.ref_logprobs) * mask
        d_sum, n_tok = dp.all_reduce_sum([float(d.sum()), float(mask.sum())])
        metrics["actor/ref_kl"] = d_sum / max(n_tok, 1.0)
        return self._kl_reward(batch, metrics, beta) if self.preset.kl_reward_coef > 0 else beta

    def _reference_logprobs(self, batch: Batch) -> torch.Tensor:
        if self.lora:  # the base model is the reference: same module, adapters off
            with self.actor.module.disable_adapter():
                return self.logprobs(batch, with_entropy=False)[0]
        return self.logprobs(batch, with_entropy=False, module=self.reference)[0]

    def _kl_reward(self, batch: Batch, metrics: dict, beta: float) -> float:
        p, mask = self.preset, batch.loss_mask
        k = kl_penalty(batch.old_logprobs, batch.ref_logprobs, p.kl_reward_type) * mask
        batch.kl_rewards = -beta * k
        batch.token_rewards = batch.token_rewards + batch.kl_rewards
        k_sum, n_rows = dp.all_reduce_sum([float(k.sum()), float((mask.sum(-1) > 0).sum())])
        seq_kl = k_sum / max(n_rows, 1.0)  # mean per-trajectory KL over the global batch
        metrics["actor/kl_reward_beta"] = beta
        metrics["actor/kl_reward"] = seq_kl
        if p.kl_target:  # adaptive beta (Ziegler et al.; verl's AdaptiveKLController)
            err = max(-0.2, min(0.2, seq_kl / p.kl_target - 1))
            beta *= 1 + err * n_rows / p.kl_horizon
        return beta

    @torch.no_grad()
    def values(self, batch: Batch) -> torch.Tensor:
        """The critic's values of the sampled tokens, 0 elsewhere."""
        out = []
        for rows in micro_batches(list(range(len(batch))), self.cfg.trainer.micro_batch_size):
            sub = batch.rows(rows)
            out.append(_pad_to(self.critic(sub.input_ids, model_attention(sub, self.critic.module), sub.position_ids),
                               batch.input_ids.shape[1]))
        return torch.cat(out) * batch.loss_mask

    @torch.no_grad()
    def mean_entropies(self, batch: Batch) -> list[float]:
        """Mean token entropy over each row's sampled tokens (for the entropy filter metrics)."""
        parts = []
        for rows in self.micro_batches(batch, list(range(len(batch)))):
            sub = batch.rows(rows)
            _, ent = self.logprobs(sub, with_entropy=True)
            m = sub.loss_mask
            parts.append((rows, (ent * m).sum(-1) / m.sum(-1).clamp(min=1)))
        return _in_row_order(parts).tolist()


def _in_row_order(parts: list[tuple[list[int], torch.Tensor]]) -> torch.Tensor:
    """Per-micro-batch results (rows, tensor) put back in the batch's row order (token micro-batches sort rows)."""
    rows = [r for idx, _ in parts for r in idx]
    out = torch.cat([t for _, t in parts])
    return out[torch.as_tensor(rows).argsort().to(out.device)]


def _pad_to(t: torch.Tensor, width: int) -> torch.Tensor:
    if t.shape[1] == width:
        return t
    return torch.nn.functional.pad(t, (0, width - t.shape[1]))
