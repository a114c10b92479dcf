"""From trajectories to padded training tensors, and the split into mini- and micro-batches (algorithms.md §6.2)."""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import torch


@attrs.define
class Batch:
    """Right-padded rows; ``attention_mask`` is 1 on real tokens only (padding never inferred from ids).

    The tensors are [N, L]: row i is one trajectory, position j its token j. The optional ones are filled by
    ``collate`` or by a step phase (ragen/train/trainer.py), and are None until then.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    loss_mask: torch.Tensor
    token_rewards: torch.Tensor
    scores: torch.Tensor
    group_ids: torch.Tensor
    rollout_logprobs: torch.Tensor
    #: collate: the turn index of each sampled token, -1 elsewhere (long)
    turn_ids: torch.Tensor | None = None
    #: collate: [N, T], each turn's reward + format penalty
    turn_scores: torch.Tensor | None = None
    #: collate, history-window rows only: the block of each token (packed prompts restart positions, see
    #: ``model_attention``); None when no row is packed
    blocks: torch.Tensor | None = None
    #: ADVANTAGES: the log-probs of the sampled tokens under the policy that sampled them (π_old), 0 elsewhere
    old_logprobs: torch.Tensor | None = None
    #: ADVANTAGES: the reference policy's log-probs of the sampled tokens, when the preset needs a reference
    ref_logprobs: torch.Tensor | None = None
    #: ADVANTAGES: the KL-in-reward term, -beta * KL(old || ref) per sampled token, already added to ``token_rewards``
    kl_rewards: torch.Tensor | None = None
    #: ADVANTAGES: the critic's values of the sampled tokens (0 elsewhere), with a critic only
    values: torch.Tensor | None = None
    #: ADVANTAGES: the estimator's advantages, scaled by the preset's ``filter_loss_scaling``
    advantages: torch.Tensor | None = None
    #: ADVANTAGES: the estimator's returns, the critic's targets, with a critic only
    returns: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def rows(self, idx: Sequence[int]) -> Batch:
        """A sub-batch, trimmed to its own longest row."""
        index = torch.as_tensor(list(idx), dtype=torch.long)
        width = int(self.attention_mask[index].sum(-1).max())
        return self._map(lambda t: t[index][:, :width] if t.dim() == 2 else t[index])

    def to(self, device: torch.device) -> Batch:
        return self._map(lambda t: t.to(device))

    def _map(self, fn) -> Batch:
        """A new Batch with ``fn`` applied to every tensor (the unset fields stay None)."""
        values = {f.name: getattr(self, f.name) for f in attrs.fields(Batch)}
        return Batch(**{k: None if v is None else fn(v) for k, v in values.items()})


def turn_layout(
    traj, mask_row: torch.Tensor, turn_rewards: Sequence[float] | None = None
) -> tuple[list[int], list[float]]:
    """The last sampled position of each turn and the turn's reward: reward + format penalty, or ``turn_rewards[k]``
    for turn ``k`` when a shaper rewrote them (indexed over all turns; turns with no sampled token are skipped)."""
    ends, rewards = [], []
    for k, turn in enumerate(traj.turns):
        start, end = turn.span
        # one tensor op per turn: indexing the row element by element cost 0.26 CPU-s per collate of 32 rows of 5 turns
        sampled = torch.nonzero(mask_row[start:end] > 0).flatten()
        if len(sampled):
            ends.append(start + int(sampled[-1]))
            rewards.append(float(turn.reward + turn.penalty if turn_rewards is None else turn_rewards[k]))
    return ends, rewards


def collate(trajs: Sequence, pad_id: int, scores: Sequence[float], placement: str = "trajectory",
            turn_scores: Sequence[Sequence[float]] | None = None) -> Batch:
    """Pad trajectories and place rewards (§2): ``trajectory`` puts the score on the last sampled token; ``turn`` puts
    each turn's reward + penalty on that turn's last sampled token (raw: normalisation does not apply, as RAGEN).

    Sets ``turn_ids`` and ``turn_scores``, and ``blocks`` when a row packs a history window. ``turn_scores``: each
    trajectory's turn rewards as a shaper left them (``ShapeOutput``); None = reward + penalty of each turn.
    """
    shaped_turns = turn_scores  # the name below is the [N, T] tensor this function builds
    width = max(len(t.input_ids) for t in trajs)
    n = len(trajs)
    n_turns = max(1, max(len(t.turns) for t in trajs))
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attn = torch.zeros(n, width, dtype=torch.long)
    mask = torch.zeros(n, width, dtype=torch.float32)
    rewards = torch.zeros(n, width, dtype=torch.float32)
    lps = torch.zeros(n, width, dtype=torch.float32)
    turn_ids = torch.full((n, width), -1, dtype=torch.long)
    turn_scores = torch.zeros(n, n_turns, dtype=torch.float32)
    for i, (t, score) in enumerate(zip(trajs, scores, strict=True)):
        k = len(t.input_ids)
        ids[i, :k] = torch.tensor(t.input_ids)
        attn[i, :k] = 1
        mask[i, :k] = torch.tensor(t.loss_mask, dtype=torch.float32)
        lps[i, :k] = torch.tensor(t.rollout_logprobs, dtype=torch.float32)
        for turn_idx, turn in enumerate(t.turns):
            start, end = turn.span
            turn_ids[i, start:end] = torch.where(mask[i, start:end] > 0, turn_idx, -1)
        ends, turn_r = turn_layout(t, mask[i], None if shaped_turns is None else shaped_turns[i])
        turn_scores[i, : len(turn_r)] = torch.tensor(turn_r, dtype=torch.float32)
        if placement == "turn":
            for j, r in zip(ends, turn_r, strict=True):
                rewards[i, j] += r
        else:
            sampled = torch.nonzero(mask[i]).flatten()
            if len(sampled):
                rewards[i, int(sampled[-1])] = float(score)
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    blocks = None
    if any(getattr(t, "blocks", None) for t in trajs):  # history window: blocks restart positions, attend to themselves
        blocks = torch.zeros(n, width, dtype=torch.long)
        for i, t in enumerate(trajs):
            for start in getattr(t, "blocks", None) or ():
                blocks[i, start:] += 1
                pos[i, start:] -= pos[i, start].clone()
    return Batch(ids, attn, pos, mask, rewards, torch.tensor(list(scores), dtype=torch.float32),
                 torch.tensor([t.group_id for t in trajs], dtype=torch.long), lps,
                 turn_ids=turn_ids, turn_scores=turn_scores, blocks=blocks)


def model_attention(batch: Batch, module: torch.nn.Module, end: int | None = None) -> torch.Tensor:
    """The ``attention_mask`` to give the model for ``batch[:, :end]``: the 2D padding mask, or, for rows packed in
    blocks by a history window, a 4D mask in which a token sees earlier real tokens of its own block only (and
    itself, so padding rows stay finite): exactly what the engine saw when it sampled each block's turn.
    Boolean for sdpa/flex, additive float for eager; flash-attention-2 takes no 4D mask."""
    attn = batch.attention_mask[:, :end]
    blocks = batch.blocks
    if blocks is None:
        return attn
    config = getattr(module, "config", None) or getattr(getattr(module, "base", None), "config", None)  # critic: .base
    impl = getattr(config, "_attn_implementation", "sdpa") or "sdpa"
    if impl.startswith("flash"):
        from ragen.errors import ConfigError

        raise ConfigError("rollout.max_context_window: packed history-window rows need model.attn_implementation sdpa "
                          "or eager (flash-attention-2 takes no 4D mask)")
    b = blocks[:, :end]
    width = b.shape[1]
    causal = torch.ones(width, width, dtype=torch.bool, device=b.device).tril()
    allowed = causal & (b[:, :, None] == b[:, None, :]) & attn.bool()[:, None, :]
    allowed |= torch.eye(width, dtype=torch.bool, device=b.device)
    allowed = allowed[:, None]
    if impl == "eager":
        dtype = next(module.parameters()).dtype
        return torch.zeros(allowed.shape, dtype=dtype, device=b.device).masked_fill(~allowed, torch.finfo(dtype).min)
    return allowed


def mini_batches(n: int, mini_size: int, generator: torch.Generator) -> list[list[int]]:
    """K rows -> max(1, round(K / mini_size)) shuffled mini-batches of near-equal size; no row duplicated."""
    return split_rows(n, max(1, round(n / mini_size)), generator) if n else []


def micro_batches(rows: list[int], micro_size: int) -> list[list[int]]:
    return [rows[i : i + micro_size] for i in range(0, len(rows), micro_size)]


def token_micro_batches(rows: list[int], lengths: Sequence[int], budget: int) -> list[list[int]]:
    """``rows`` sorted by length (longest first) and cut so that each micro-batch's padded size (rows x its longest
    row) stays within ``budget`` tokens; a row longer than the budget goes alone. Rows of similar length share a
    micro-batch, so padding does not dominate when multi-turn lengths vary; short rows go many at a time."""
    out: list[list[int]] = []
    longest = 0  # of the open micro-batch: its first row, since rows come longest first
    for i in sorted(range(len(rows)), key=lambda i: -lengths[i]):
        if out and (len(out[-1]) + 1) * longest <= budget:
            out[-1].append(rows[i])
        else:
            out.append([rows[i]])
            longest = lengths[i]
    return out


def split_rows(n: int, count: int, generator: torch.Generator) -> list[list[int]]:
    """n rows shuffled into exactly ``count`` near-equal lists (sizes differ by at most 1; some may be empty when
    n < count, as on a data-parallel rank holding fewer rows than the global number of mini-batches)."""
    perm = torch.randperm(n, generator=generator).tolist() if n else []
    base, extra = divmod(n, count)
    out, start = [], 0
    for i in range(count):
        size = base + (i < extra)
        out.append(perm[start : start + size])
        start += size
    return out
