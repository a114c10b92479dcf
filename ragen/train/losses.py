"""Loss math of the update (algorithms.md §1.2, §5): chunked log-probs, PPO clip, value loss, aggregation.

Aggregation normalisers are computed over the whole mini-batch before any backward pass (``AggNorm``), so
the gradient does not depend on how the mini-batch is cut into micro-batches (the spec's FIX over verl).
"""

from __future__ import annotations

import attrs
import torch
import torch.nn.functional as F

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


@attrs.frozen
class AggNorm:
    """Mini-batch-wide normalisers: sampled tokens, sequences with any sampled token, and the -norm constant."""

    tokens: float
    seqs: float
    length_norm: float = 1.0

    @classmethod
    def of(cls, masks: list[torch.Tensor], length_norm: float = 1.0, reduce=None) -> AggNorm:
        """From the mini-batch's masks; ``reduce`` sums the [tokens, sequences] pair over data-parallel ranks."""
        sums = [sum(float(m.sum()) for m in masks), sum(float((m.sum(-1) > 0).sum()) for m in masks)]
        tokens, seqs = reduce(sums) if reduce is not None else sums
        return cls(max(tokens, 1.0), max(seqs, 1.0), length_norm)


def global_norm(masks: list[torch.Tensor], length_norm: float = 1.0) -> AggNorm:
    """``AggNorm`` of a mini-batch whose rows are spread over data-parallel ranks (sums reduced over ranks)."""
    from ragen.models.distributed import all_reduce_sum

    return AggNorm.of(masks, length_norm, reduce=all_reduce_sum)


def aggregate(values: torch.Tensor, mask: torch.Tensor, mode: str, norm: AggNorm) -> torch.Tensor:
    """This micro-batch's share of the mini-batch loss (summing the shares gives the mini-batch value)."""
    mask = mask.to(values.dtype)
    if mode == "token-mean":
        return (values * mask).sum() / norm.tokens
    if mode == "seq-mean-token-mean":
        per_seq = (values * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        return per_seq[mask.sum(-1) > 0].sum() / norm.seqs
    if mode == "seq-mean-token-sum":
        return (values * mask).sum() / norm.seqs
    if mode == "seq-mean-token-sum-norm":
        return (values * mask).sum() / (norm.seqs * norm.length_norm)
    raise ValueError(f"loss_agg_mode: expected one of {', '.join(AGG_MODES)}, got {mode!r}")


class _SoftcappedHead(torch.nn.Module):
    """``cap * tanh(head(h) / cap)``: the final-logit soft-capping some models apply inside their own forward."""

    def __init__(self, head: torch.nn.Module, cap: float):
        super().__init__()
        self.head, self.cap = head, float(cap)
        self.weight = head.weight
        self.out_features = getattr(head, "out_features", None) or head.weight.shape[0]

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.head(hidden) / self.cap) * self.cap


def output_head(module: torch.nn.Module) -> torch.nn.Module:
    """The map from the decoder's last hidden states to the logits the model's own forward (and so the rollout's
    sampler) produces. Log-probs are computed from hidden states to skip the prompt's logits; that must not skip the
    model's own post-processing: Gemma 2 caps its final logits (``final_logit_softcapping``), and a plain LM head
    would give the update log-probs the sampler never had."""
    head = module.get_output_embeddings()
    config = getattr(module, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    cap = getattr(text, "final_logit_softcapping", None)
    return _SoftcappedHead(head, cap) if cap else head


def token_logprobs(hidden: torch.Tensor, lm_head: torch.nn.Module, input_ids: torch.Tensor, temperature: float = 1.0,
                   chunk: int = 256, with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log π(token_j | tokens_<j) at every position j (0 at j = 0), from hidden states, ``chunk`` positions at a time.

    Never materialises the full [B, L, V] logits: only [B, chunk, V] at once.
    """
    b, length, _ = hidden.shape
    out = torch.zeros(b, length, dtype=torch.float32, device=hidden.device)
    ent = torch.zeros(b, length, dtype=torch.float32, device=hidden.device) if with_entropy else None
    for start in range(0, length - 1, chunk):
        end = min(start + chunk, length - 1)
        logits = lm_head(hidden[:, start:end]).float() / temperature
        logp = F.log_softmax(logits, dim=-1)
        targets = input_ids[:, start + 1 : end + 1]
        out[:, start + 1 : end + 1] = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        if ent is not None:
            ent[:, start + 1 : end + 1] = -(logp.exp() * logp).sum(-1)
    return out, ent


def sampled_logprobs(hidden: torch.Tensor, lm_head: torch.nn.Module, input_ids: torch.Tensor, mask: torch.Tensor,
                     temperature: float = 1.0, chunk: int = 256, with_entropy: bool = False,
                     entropy_grad: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``token_logprobs`` at the positions where ``mask`` is set (the sampled tokens), 0 elsewhere.

    The LM head and the softmax run only on the hidden states that predict a sampled token, ``chunk`` of them at a
    time: prompt and observation tokens (most of a multi-turn row) never reach the vocabulary-sized logits. Wherever
    ``mask`` is 0 the callers multiply by the mask, so loss and gradients equal the every-position path's. A row set
    with no sampled token (a masked padding row) still scores one position, so the graph reaches every weight and a
    backward pass runs as on any other rank. ``entropy_grad=False`` computes the entropy without a graph (a metric).
    """
    b, length, _ = hidden.shape
    sel = mask[:, 1:] > 0
    if not bool(sel.any()):
        sel = torch.zeros_like(sel)
        sel[0, 0] = True
    rows, cols = sel.nonzero(as_tuple=True)  # cols: the predicting position j-1 of the sampled token j
    targets = input_ids[rows, cols + 1]
    picked = hidden[rows, cols]  # [N, H]: only the states that predict a sampled token
    lps, ents = [], []
    for start in range(0, picked.shape[0], chunk):
        logits = lm_head(picked[start : start + chunk]).float() / temperature
        logp = F.log_softmax(logits, dim=-1)
        lps.append(logp.gather(-1, targets[start : start + chunk, None]).squeeze(-1))
        if with_entropy:
            with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
                ents.append(-(logp.exp() * logp).sum(-1))
    out = hidden.new_zeros((b, length), dtype=torch.float32).index_put((rows, cols + 1), torch.cat(lps))
    ent = None
    if with_entropy:
        ent = hidden.new_zeros((b, length), dtype=torch.float32).index_put((rows, cols + 1), torch.cat(ents))
    return out, ent


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token KL estimate between the policy and the reference (§5.4): k1 = d, abs = |d|, k2 = d²/2,
    k3 = exp(-d') + d' - 1 with d' = clamp(d, ±20), clamped to [-10, 10]; d = log π - log π_ref."""
    d = logp - ref_logp
    if kind == "k1":
        return d
    if kind == "abs":
        return d.abs()
    if kind == "k2":
        return 0.5 * d * d
    if kind == "k3":
        dc = torch.clamp(d, -20.0, 20.0)
        return torch.clamp(torch.exp(-dc) + dc - 1.0, -10.0, 10.0)
    raise ValueError(f"kl type: expected one of k1, k2, k3, abs, got {kind!r}")


def log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor, *, clamp: float = 20.0,
              level: str = "token") -> torch.Tensor:
    """log(π/π_old) per token, clamped. ``sequence`` (GSPO): every token carries its sequence's length-normalised
    log-ratio as value, while the gradient flows through its own log-prob (GSPO-token form)."""
    delta = torch.clamp(logp - old_logp, -clamp, clamp)
    if level == "token":
        return delta
    if level != "sequence":
        raise ValueError(f"ratio_level: expected token or sequence, got {level!r}")
    m = mask.to(delta.dtype)
    seq = (delta * m).sum(-1) / m.sum(-1).clamp(min=1.0)
    return seq.detach()[:, None] + logp - logp.detach()


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, *, clip_low: float,
                clip_high: float, clip_c: float, agg_mode: str, norm: AggNorm, log_ratio_clamp: float = 20.0,
                ratio_level: str = "token") -> tuple[torch.Tensor, dict]:
    """PPO clip with clip-higher and dual clip (§5.1). Returns this micro-batch's loss share and metric sums."""
    delta = log_ratio(logp, old_logp, mask, clamp=log_ratio_clamp, level=ratio_level)
    ratio = torch.exp(delta)
    l1 = -adv * ratio
    l2 = -adv * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    clipped = torch.maximum(l1, l2)
    dual = torch.minimum(clipped, -adv * clip_c)
    loss_tok = torch.where(adv < 0, dual, clipped)
    m = mask.to(loss_tok.dtype)
    metrics = {
        "actor/pg_clipfrac": float(((l2 > l1).float() * m).sum()),
        "actor/pg_clipfrac_lower": float((((clipped > -adv * clip_c) & (adv < 0)).float() * m).sum()),
        "actor/ppo_kl": float((-delta.detach() * m).sum()),
    }
    return aggregate(loss_tok, mask, agg_mode, norm), metrics


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, *,
               clip: float, agg_mode: str, norm: AggNorm) -> tuple[torch.Tensor, dict]:
    """Clipped value loss (§5.2): 0.5 · agg(max((v − G)², (clip(v) − G)²))."""
    clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    a, b = (values - returns) ** 2, (clipped - returns) ** 2
    m = mask.to(values.dtype)
    metrics = {"critic/vf_clipfrac": float(((b > a).float() * m).sum())}
    return 0.5 * aggregate(torch.maximum(a, b), mask, agg_mode, norm), metrics


def tis_weights(old_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor, cap: float,
                clamp: float = 20.0) -> torch.Tensor:
    """Truncated importance sampling weights for the trainer/rollout log-prob gap (Yao et al. 2025, "Your efficient
    RL framework secretly brings you off-policy RL training"): ``min(exp(old_logp - rollout_logp), cap)`` per token,
    detached (a constant factor of each token's policy-gradient term), 1 where ``mask`` is 0, and 1 everywhere when
    ``cap <= 0`` (off). The log-ratio is clamped to ±``clamp`` before ``exp``.

    Multiplying the advantages by these weights before ``policy_loss`` multiplies every token's clipped (and dual-clip)
    loss term by its weight, since the weights are positive."""
    if cap <= 0:
        return torch.ones_like(old_logp)
    delta = torch.clamp(old_logp.detach().float() - rollout_logp.detach().float(), -clamp, clamp)
    w = torch.clamp(torch.exp(delta), max=float(cap))
    return torch.where(mask.bool(), w, torch.ones_like(w)).to(old_logp.dtype)
