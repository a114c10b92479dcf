"""The training forward pass with a group's shared prompt run once, so a group pays for its prompt once, not per member.

Every member of a group starts from the same first-turn prompt: in a single-turn env such as countdown that prompt is
most of each row (about 290 of 350 tokens in ``bench/vs_trl.py``). ``shared_prefix_hidden`` runs the decoder on each
distinct prompt once, expands its keys/values to the rows that share it (an index, so the backward pass sums their
gradients into the one prefix pass), and runs each row's remainder on top of them. The prompt's last token stays in
the remainder, so every hidden state that predicts a sampled token comes out of the second pass; the prefix's own
hidden states are never needed. The math is the full pass's: the same keys at the same positions, up to float rounding.
"""

from __future__ import annotations

import inspect
import weakref

import torch

_SHAREABLE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def prefix_plan(
    input_ids: torch.Tensor, loss_mask: torch.Tensor, min_saved: int = 16
) -> tuple[list[int], list[int]] | None:
    """Each row's shared-prefix class and the class prefix lengths, or None when sharing would save fewer than
    ``min_saved`` tokens. A row's prefix is its ids before the token that predicts its first sampled token; rows with
    equal prefixes (a group's members in one micro-batch) form a class. Rows with no sampled token keep the plain
    path."""
    first = loss_mask.gt(0).float().argmax(-1).tolist()
    if not bool(loss_mask.gt(0).any(-1).all()):
        return None
    classes: dict[tuple[int, ...], int] = {}
    row_class, lengths = [], []
    for r, f in enumerate(first):
        key = tuple(input_ids[r, : max(f - 1, 0)].tolist())
        if key not in classes:
            classes[key] = len(lengths)
            lengths.append(len(key))
        row_class.append(classes[key])
    saved = sum(lengths[c] for c in row_class) - sum(lengths)
    if saved < min_saved or min(lengths) == 0:
        return None
    return row_class, lengths


def shareable(module: torch.nn.Module) -> bool:
    """Only full-attention decoders whose cache layers are transformers' plain ``DynamicLayer`` (concatenation keeps
    the gradient graph); sliding-window or recurrent layers keep the plain path. Answered once per module."""
    if module not in _SHAREABLE:
        _SHAREABLE[module] = _shareable(module)
    return _SHAREABLE[module]


def _shareable(module: torch.nn.Module) -> bool:
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    try:  # older transformers (no per-layer cache objects) or a model it cannot build a cache for: no sharing
        layers = DynamicCache(config=module.config).layers
    except Exception:  # noqa: BLE001
        return False
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


def _cache_kw(decoder: torch.nn.Module) -> str:
    """transformers 5.2x renamed the decoder's ``past_key_values`` argument to ``cache``."""
    return "cache" if "cache" in inspect.signature(decoder.forward).parameters else "past_key_values"


def shared_prefix_hidden(decoder: torch.nn.Module, config, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                         row_class: list[int], lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hidden states of every row's remainder (``[rows, S, H]``), the row position of each remainder column
    (``cols``, clamped to the last column) and which columns lie inside ``input_ids`` (``inside``): column ``j`` of
    row ``r`` is position ``cols[r, j]``, which starts at the row's prefix length."""
    device, width = input_ids.device, input_ids.shape[1]
    rows = torch.tensor(row_class, device=device)
    lens = torch.tensor(lengths, device=device)
    first_row = [row_class.index(c) for c in range(len(lengths))]
    P = max(lengths)
    # the prefixes, right-padded at their true positions 0..len-1
    pre_ids = input_ids[first_row, :P]
    pre_mask = (torch.arange(P, device=device)[None] < lens[:, None]).long()
    cache = prefix_cache(decoder, config, pre_ids, pre_mask, rows)
    # each row's remainder from its own offset, right-padded to the longest
    offset = lens[rows]
    S = int((width - offset).max())
    cols = offset[:, None] + torch.arange(S, device=device)[None]
    inside = cols < width
    cols = cols.clamp(max=width - 1)
    suf_ids = input_ids.gather(1, cols)
    suf_mask = to_remainder(attention_mask, cols, inside)
    hidden = remainder_hidden(decoder, cache, pre_mask[rows], suf_ids, suf_mask, cols)
    return hidden, cols, inside


def prefix_cache(decoder: torch.nn.Module, config, pre_ids: torch.Tensor, pre_mask: torch.Tensor, rows: torch.Tensor):
    """Run each distinct prefix once (``pre_ids``, right-padded, positions 0..P-1) and return its keys/values expanded
    to the rows (``rows[r]`` is row ``r``'s prefix): an index, so a backward pass sums the rows' gradients into it."""
    from transformers import DynamicCache

    P = pre_ids.shape[1]
    positions = torch.arange(P, device=pre_ids.device)[None].expand(len(pre_ids), P)
    out = decoder(input_ids=pre_ids, attention_mask=pre_mask, position_ids=positions, use_cache=True)
    cache = DynamicCache(config=config)
    built = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
    for layer, src in zip(cache.layers, built.layers):
        layer.update(src.keys.index_select(0, rows), src.values.index_select(0, rows))
    return cache


def remainder_hidden(decoder: torch.nn.Module, cache, row_pre_mask: torch.Tensor, ids: torch.Tensor,
                     mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Hidden states of each row's remainder ``ids`` (at ``positions``, attention ``mask``) on top of its prefix's
    keys/values (``prefix_cache``; ``row_pre_mask`` masks the prefix padding)."""
    full_mask = torch.cat([row_pre_mask, mask], dim=1)
    return decoder(input_ids=ids, attention_mask=full_mask, position_ids=positions, use_cache=True,
                   **{_cache_kw(decoder): cache}).last_hidden_state


def to_remainder(t: torch.Tensor, cols: torch.Tensor, inside: torch.Tensor) -> torch.Tensor:
    """A ``[rows, width]`` tensor at remainder columns ``[rows, S]`` (0 past a row's end)."""
    return t.gather(1, cols) * inside


def to_row_positions(t: torch.Tensor, cols: torch.Tensor, width: int) -> torch.Tensor:
    """A ``[rows, S]`` tensor in remainder columns back at row positions ``[rows, width]``; 0 in each row's prefix."""
    pos = torch.arange(width, device=t.device)[None] - cols[:, :1]
    valid = (pos >= 0) & (pos < t.shape[1])
    return t.gather(1, pos.clamp(0, t.shape[1] - 1)) * valid
