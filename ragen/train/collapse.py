"""RAGEN-V2 collapse diagnostics (algorithms.md §9): how much the reasoning Z depends on its prompt X.

For sampled (x, z) pairs the actor scores every reasoning after every prompt, ``[x_j | z_i]``, by teacher forcing. From
the matrices of mean (``L_mean``) and summed (``L_sum``) reasoning log-probs:

* I(X;Z) ≈ mean_i (log p(z_i | x_c(i)) − log (1/N Σ_j p(z_i | x_j)))  — ``mi_estimate``, at most log N;
* H(Z|X) ≈ −mean_i log p(z_i | x_c(i)), H(Z) ≈ −mean_i log (1/N Σ_j p(z_i | x_j));
* retrieval: does the own prompt score the reasoning best?

Template collapse shows as MI falling towards 0 (retrieval towards chance) while H(Z|X) stays high.

Pieces, each usable on its own: ``extract_samples`` (X and Z of every turn), ``sample_first_turn`` /
``sample_trajectory`` (the two schemes, seeded), ``cross_score`` (the teacher-forced matrices), ``estimates`` /
``retrieval`` (pure numpy), and ``CollapseDiagnostics``, the stateful entry point the trainer calls.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np
import torch

from ragen.config import SCHEMES, CollapseSection  # noqa: E402,F401  (the config lives with the other sections)
from ragen.contract.trajectory import Trajectory
from ragen.train.losses import output_head, token_logprobs
from ragen.train.shared_prefix import prefix_cache, remainder_hidden, shareable

THINK_END = "</think>"
STD_EPS = 1e-3  #: added to the marginal std in the z-scores (RAGEN)
EMA_DECAY = 0.9  #: s̄ ← 0.9 s̄ + 0.1 · marginal_std (RAGEN)
TOPK = (2, 4, 8)
#: ``collapse/regime`` codes (§9.6): 2·[I < i_threshold] + [H < h_threshold]
REGIMES = ("diverse", "compressed", "template_collapse", "low_entropy_collapse")
#: most float32 logits held at once while scoring (about 0.5 GiB); bounds memory for large vocabularies
LOGIT_BUDGET = 1 << 27


# ----------------------------------------------------------------------------------------------------------
# X and Z of every turn (§9.1)
# ----------------------------------------------------------------------------------------------------------


@attrs.frozen
class TurnSample:
    """One turn of one trajectory: X = ids before the turn's sampled ids (ends with the prefilled ``<think>``), Z = its
    reasoning ids (empty when the turn is invalid: no ``</think>`` or nothing but whitespace before it)."""

    traj: int  #: index into the trajectory list
    turn: int  #: 0-based turn index
    group_id: int
    x: tuple[int, ...]
    z: tuple[int, ...]

    @property
    def valid(self) -> bool:
        return bool(self.z)


def _decode(tokenizer: Any, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=False)


def reasoning_ids(tokenizer: Any, ids: Sequence[int]) -> list[int] | None:
    """The sampled ids before the first ``</think>``, whitespace-only tokens stripped at both ends; None if no marker.

    The marker is found in the decoded text, not as a token pattern, because BPE merges it with its neighbours (the
    tiny tokenizer encodes "up.</think>" as ' up', '.</', 'think', '>'). The reasoning is then the longest prefix of
    ids whose decoded text ends at or before the marker (binary search: O(log n) decodes). A token straddling the
    marker ('.</') belongs to no side cleanly; it is left out, so Z never holds marker text.
    """
    ids = list(ids)
    at = _decode(tokenizer, ids).find(THINK_END)
    if at < 0:
        return None
    lo, hi = 0, len(ids)  # invariant: decode(ids[:lo]) ends at or before the marker
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(_decode(tokenizer, ids[:mid])) <= at:
            lo = mid
        else:
            hi = mid - 1
    return _strip_whitespace(tokenizer, ids[:lo])


def _strip_whitespace(tokenizer: Any, ids: list[int]) -> list[int]:
    """Drop leading and trailing tokens that decode to whitespace only (RAGEN strips the reasoning text)."""
    blank = lambda i: not _decode(tokenizer, [i]).strip()  # noqa: E731
    start, end = 0, len(ids)
    while start < end and blank(ids[start]):
        start += 1
    while end > start and blank(ids[end - 1]):
        end -= 1
    return ids[start:end]


def extract_samples(trajectories: Sequence[Trajectory], tokenizer: Any) -> list[list[TurnSample]]:
    """One ``TurnSample`` per turn of each trajectory (invalid turns included, with an empty ``z``)."""
    out = []
    for k, tr in enumerate(trajectories):
        turns = []
        for t, rec in enumerate(tr.turns):
            start, end = rec.span
            z = reasoning_ids(tokenizer, tr.input_ids[start:end]) if end > start else None
            turns.append(TurnSample(k, t, tr.group_id, tuple(tr.input_ids[:start]), tuple(z or ())))
        out.append(turns)
    return out


def validity_metrics(samples: Sequence[Sequence[TurnSample]]) -> dict[str, float]:
    """``collapse/valid_thinking_rate`` (all turns) and the first-turn counts (§9.2)."""
    turns = [s for traj in samples for s in traj]
    firsts = [bool(traj) and traj[0].valid for traj in samples]  # a trajectory without turns has no valid first turn
    m = {
        "collapse/first_turn_num_total": float(len(firsts)),
        "collapse/first_turn_num_valid": float(sum(firsts)),
        "collapse/first_turn_valid_rate": sum(firsts) / len(firsts) if firsts else 0.0,
    }
    if turns:
        m["collapse/valid_thinking_rate"] = sum(s.valid for s in turns) / len(turns)
    return m


# ----------------------------------------------------------------------------------------------------------
# sampling schemes (§9.3)
# ----------------------------------------------------------------------------------------------------------


@attrs.frozen
class Draw:
    """The pairs of one scheme: M samples (x, z); N columns (prompts); ``own[i]`` = sample i's column c(i)."""

    samples: list[TurnSample]
    columns: list[tuple[int, ...]]
    own: np.ndarray

    @property
    def classes(self) -> np.ndarray:
        """Class id per column: columns with identical X ids share a class (retrieval counts either as correct)."""
        ids: dict[tuple[int, ...], int] = {}
        return np.array([ids.setdefault(x, len(ids)) for x in self.columns], dtype=np.int64)


def prompt_mismatches(samples: Sequence[Sequence[TurnSample]]) -> int:
    """Groups whose members do not all share one first prompt (the first_turn scheme then cannot name a column)."""
    firsts: dict[int, set[tuple[int, ...]]] = {}
    for traj in samples:
        if traj:
            firsts.setdefault(traj[0].group_id, set()).add(traj[0].x)
    return sum(len(v) > 1 for v in firsts.values())


def sample_first_turn(samples: Sequence[Sequence[TurnSample]], num_samples: int, rng: np.random.Generator) -> Draw:
    """Up to ``num_samples`` valid first turns without replacement; columns = their distinct env groups (sorted).

    Assumes ``prompt_mismatches(samples) == 0`` (every member of a group has the group's first prompt).
    """
    valid = [traj[0] for traj in samples if traj and traj[0].valid]
    take = min(num_samples, len(valid))
    chosen = [valid[i] for i in sorted(rng.choice(len(valid), size=take, replace=False))] if take else []
    groups = sorted({s.group_id for s in chosen})
    col = {g: j for j, g in enumerate(groups)}
    x_of = {s.group_id: s.x for s in chosen}
    return Draw(chosen, [x_of[g] for g in groups], np.array([col[s.group_id] for s in chosen], dtype=np.int64))


def sample_trajectory(samples: Sequence[Sequence[TurnSample]], num_samples: int, rng: np.random.Generator) -> Draw:
    """(trajectory, turn) pairs with replacement: a trajectory with a valid turn uniformly, then one of its valid turns
    uniformly; each pair is its own column. Draws ``min(num_samples, number of valid turns)`` pairs (as RAGEN)."""
    per_traj = [[s for s in traj if s.valid] for traj in samples]
    per_traj = [v for v in per_traj if v]
    take = min(num_samples, sum(len(v) for v in per_traj))
    chosen = []
    for _ in range(take):
        turns = per_traj[int(rng.integers(len(per_traj)))]
        chosen.append(turns[int(rng.integers(len(turns)))])
    return Draw(chosen, [s.x for s in chosen], np.arange(len(chosen), dtype=np.int64))


# ----------------------------------------------------------------------------------------------------------
# cross-scoring (§9.4)
# ----------------------------------------------------------------------------------------------------------


@torch.no_grad()
def cross_score(module: torch.nn.Module, xs: Sequence[Sequence[int]], zs: Sequence[Sequence[int]], *,
                temperature: float = 1.0, micro_batch_size: int = 128, pad_id: int = 0,
                pad_rows_to: int = 1, shared: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``(L_mean, L_sum)``, each [M, N]: the mean and sum of log π(z_i tokens | x_j, earlier z_i tokens) for every
    reasoning z_i (M, each non-empty) after every prompt x_j (N), by teacher forcing with the causal LM ``module``.

    Rows ``[x_j | z_i]`` are right-padded (attention 0 on padding, positions 0..L−1), sorted by length so a micro-batch
    holds similar lengths, and scored ``micro_batch_size`` at a time; ``pad_rows_to`` pads each micro-batch's row count
    with copies (discarded) so every data-parallel rank sees the same shapes. The module is called like the trainer
    calls the actor (decoder, then ``token_logprobs`` with the LM head and ``temperature``), in eval mode. With
    ``shared`` (and a decoder ``shared_prefix`` supports) each micro-batch runs its distinct prompts once and the
    reasonings on top of their keys/values: the same log-probs up to float rounding, at a fraction of the cost.
    """
    # rows grouped by prompt (longest prompts first), so a micro-batch holds few prompts, each run once and shared
    # by its rows (``shared_prefix``): N prompts + N x M reasonings are encoded instead of N x M whole rows
    rows = sorted(((j, i) for i in range(len(zs)) for j in range(len(xs))),
                  key=lambda r: (-len(xs[r[0]]), r[0], -len(zs[r[1]])))
    score = _score_rows_shared if shared and shareable(module) else _score_rows
    l_sum = np.zeros((len(zs), len(xs)), dtype=np.float64)
    was_training = module.training
    module.eval()
    try:
        for start in range(0, len(rows), micro_batch_size):
            part = rows[start : start + micro_batch_size]
            sums = score(module, [xs[j] for j, _ in part], [zs[i] for _, i in part], temperature, pad_id, pad_rows_to)
            for (j, i), s in zip(part, sums):
                l_sum[i, j] = s
    finally:
        module.train(was_training)
    lengths = np.array([len(z) for z in zs], dtype=np.float64)[:, None]
    return l_sum / lengths, l_sum


def _score_rows(module: torch.nn.Module, xs: list, zs: list, temperature: float, pad_id: int,
                pad_rows_to: int) -> list[float]:
    """Σ log-probs of each z after its x, for one micro-batch of rows."""
    real = len(xs)
    extra = (-real) % max(1, pad_rows_to)
    xs, zs = xs + [xs[-1]] * extra, zs + [zs[-1]] * extra
    device = next(module.parameters()).device
    width = max(len(x) + len(z) for x, z in zip(xs, zs))
    ids = torch.full((len(xs), width), pad_id, dtype=torch.long)
    attn = torch.zeros(len(xs), width, dtype=torch.long)
    for r, (x, z) in enumerate(zip(xs, zs)):
        ids[r, : len(x) + len(z)] = torch.tensor(list(x) + list(z), dtype=torch.long)
        attn[r, : len(x) + len(z)] = 1
    ids, attn = ids.to(device), attn.to(device)
    pos = torch.arange(width, device=device).unsqueeze(0).expand(len(xs), -1)
    hidden = module.get_decoder()(input_ids=ids, attention_mask=attn, position_ids=pos).last_hidden_state
    # Only the positions that predict z need logits: gather them (from the last x token on) into a compact
    # [B, 1 + max|z|] window, so the vocabulary projection costs |z| positions per row, not the whole row.
    zlen = torch.tensor([len(z) for z in zs], device=device)
    first = torch.tensor([len(x) - 1 for x in xs], device=device)
    window = first[:, None] + torch.arange(int(zlen.max()) + 1, device=device)[None, :]
    window = window.clamp(max=width - 1)
    h = hidden.gather(1, window[..., None].expand(-1, -1, hidden.shape[-1]))
    lm_head = output_head(module)
    vocab = getattr(lm_head, "out_features", None) or lm_head.weight.shape[0]
    chunk = max(1, LOGIT_BUDGET // (len(xs) * vocab))
    lp, _ = token_logprobs(h, lm_head, ids.gather(1, window), temperature=temperature, chunk=chunk)
    keep = torch.arange(1, lp.shape[1], device=device)[None, :] <= zlen[:, None]  # lp[:, k] = log p(z_{k-1})
    return (lp[:, 1:] * keep).sum(-1)[:real].double().cpu().tolist()


def _score_rows_shared(module: torch.nn.Module, xs: list, zs: list, temperature: float, pad_id: int,
                       pad_rows_to: int) -> list[float]:
    """``_score_rows`` with each distinct x of the micro-batch run once (but its last token): its keys/values are
    expanded to its rows, and each row runs only ``[last x token | z]`` on top (the last x token predicts z's first)."""
    real = len(xs)
    extra = (-real) % max(1, pad_rows_to)
    xs, zs = xs + [xs[-1]] * extra, zs + [zs[-1]] * extra
    if min(len(x) for x in xs) < 2:  # a one-token prompt has no prefix to share
        return _score_rows(module, xs[:real], zs[:real], temperature, pad_id, pad_rows_to)
    device = next(module.parameters()).device
    prompts = list(dict.fromkeys(tuple(x) for x in xs))
    rows = torch.tensor([prompts.index(tuple(x)) for x in xs], device=device)
    P = max(len(x) - 1 for x in prompts)
    pre_ids = torch.full((len(prompts), P), pad_id, dtype=torch.long)
    pre_mask = torch.zeros(len(prompts), P, dtype=torch.long)
    for c, x in enumerate(prompts):
        pre_ids[c, : len(x) - 1] = torch.tensor(x[:-1], dtype=torch.long)
        pre_mask[c, : len(x) - 1] = 1
    S = 1 + max(len(z) for z in zs)
    ids = torch.full((len(xs), S), pad_id, dtype=torch.long)
    mask = torch.zeros(len(xs), S, dtype=torch.long)
    for r, (x, z) in enumerate(zip(xs, zs)):
        ids[r, : 1 + len(z)] = torch.tensor([x[-1], *z], dtype=torch.long)
        mask[r, : 1 + len(z)] = 1
    pre_ids, pre_mask, ids, mask = pre_ids.to(device), pre_mask.to(device), ids.to(device), mask.to(device)
    offsets = torch.tensor([len(x) - 1 for x in xs], device=device)
    positions = offsets[:, None] + torch.arange(S, device=device)[None]
    decoder = module.get_decoder()
    cache = prefix_cache(decoder, module.config, pre_ids, pre_mask, rows)
    hidden = remainder_hidden(decoder, cache, pre_mask[rows], ids, mask, positions)
    lm_head = output_head(module)
    vocab = getattr(lm_head, "out_features", None) or lm_head.weight.shape[0]
    chunk = max(1, LOGIT_BUDGET // (len(xs) * vocab))
    lp, _ = token_logprobs(hidden, lm_head, ids, temperature=temperature, chunk=chunk)  # lp[:, k] = log p(z_{k-1})
    zlen = torch.tensor([len(z) for z in zs], device=device)
    keep = torch.arange(1, S, device=device)[None, :] <= zlen[:, None]
    return (lp[:, 1:] * keep).sum(-1)[:real].double().cpu().tolist()


# ----------------------------------------------------------------------------------------------------------
# estimates (§9.5), pure
# ----------------------------------------------------------------------------------------------------------


def _logsumexp(a: np.ndarray) -> np.ndarray:
    top = a.max(axis=1)
    return top + np.log(np.exp(a - top[:, None]).sum(axis=1))


def matched_marginal(L: np.ndarray, own: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """matched_i = L[i, c(i)]; marginal_i = log (1/N Σ_j exp L[i, j]) (a uniform mixture over the columns)."""
    L = np.asarray(L, dtype=np.float64)
    return L[np.arange(L.shape[0]), own], _logsumexp(L) - math.log(L.shape[1])


def estimates(L: np.ndarray, own: np.ndarray) -> dict[str, float]:
    """MI, entropies, means and the batch z-score of one score matrix (names without prefix or ``_seq``)."""
    matched, marginal = matched_marginal(L, own)
    gap = matched - marginal
    std = float(marginal.std())  # population std over samples
    return {
        "mi_estimate": float(gap.mean()),
        "conditional_entropy_est": float(-matched.mean()),
        "reasoning_entropy_est": float(-marginal.mean()),
        "matched_log_prob_mean": float(matched.mean()),
        "marginal_log_prob_mean": float(marginal.mean()),
        "marginal_std": std,
        "mi_zscore": float((gap / (std + STD_EPS)).mean()),
    }


def retrieval(L: np.ndarray, own: np.ndarray, classes: np.ndarray) -> dict[str, float]:
    """Retrieval of the own prompt class from the scores; ties go to the lower column (as ``argmax``)."""
    L = np.asarray(L, dtype=np.float64)
    m, n = L.shape
    true = classes[own]
    ranked = classes[np.argsort(-L, axis=1, kind="stable")]  # class of each column, best score first
    acc = float((ranked[:, 0] == true).mean())
    chance = float((np.bincount(classes)[true] / n).mean())
    out = {"retrieval_acc": acc, "retrieval_chance": chance, "retrieval_above_chance": acc - chance}
    for k in TOPK:
        if k < n:
            out[f"retrieval_top{k}_acc"] = float((ranked[:, :k] == true[:, None]).any(axis=1).mean())
    return out


class EmaStd:
    """EMA of marginal_std per key (scheme, matrix): s̄ ← 0.9 s̄ + 0.1 s, starting at the first value."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}

    def update(self, key: str, value: float) -> float:
        old = self.values.get(key)
        self.values[key] = value if old is None else EMA_DECAY * old + (1 - EMA_DECAY) * value
        return self.values[key]


def scheme_metrics(l_mean: np.ndarray, l_sum: np.ndarray, draw: Draw, ema: EmaStd, key: str) -> dict[str, float]:
    """Every §9.5 metric of one scheme (unprefixed): L_mean ones plain, L_sum ones with ``_seq``; updates ``ema``."""
    out: dict[str, float] = {"mi_upper_bound": math.log(l_mean.shape[1]), "num_samples": float(l_mean.shape[0]),
                             "num_prompts": float(l_mean.shape[1])}
    for suffix, L in (("", l_mean), ("_seq", l_sum)):
        est = estimates(L, draw.own)
        est["marginal_std_ema"] = ema.update(key + suffix, est["marginal_std"])
        est["mi_zscore_ema"] = est["mi_estimate"] / (est["marginal_std_ema"] + STD_EPS)
        out.update({name + suffix: value for name, value in est.items()})
    out.update(retrieval(l_mean, draw.own, draw.classes))
    return out


def regime(h: float, i: float, h_threshold: float, i_threshold: float) -> int:
    """§9.6 quadrant as an index into ``REGIMES``."""
    return 2 * int(i < i_threshold) + int(h < h_threshold)


# ----------------------------------------------------------------------------------------------------------
# the entry point
# ----------------------------------------------------------------------------------------------------------


class CollapseDiagnostics:
    """What the trainer calls at step 1 and every ``compute_freq`` steps, on the batch before filtering.

    A skipped step changes nothing on the steps that run (their draws are seeded by the step) except the EMA of the
    marginal std, which then averages fewer values (``marginal_std_ema``, ``mi_zscore_ema``).

    ``__call__`` draws each configured scheme with a generator seeded by (seed, step, scheme), so a resumed run
    draws the same pairs; the EMA of the marginal std is the only state (``state_dict`` / ``load_state_dict``).
    The caller decides when it applies: §9.1 disables it without ``<think>`` reasoning or with ``context_mode ≠ full``
    (there the turns carry no ``</think>`` and every turn counts as invalid anyway).
    """

    def __init__(self, config: CollapseSection, tokenizer: Any, seed: int, *, dp_size: int = 1):
        self.config, self.tokenizer, self.seed, self.dp_size = config, tokenizer, int(seed), int(dp_size)
        self.ema = EmaStd()

    def should_run(self, step: int) -> bool:
        """``step`` is 1-based (the step being computed): step 1 and every ``compute_freq``-th."""
        return self.config.enabled and step >= 1 and (step == 1 or step % self.config.compute_freq == 0)

    def rng(self, step: int, scheme: str) -> np.random.Generator:
        return np.random.default_rng([self.seed, int(step), SCHEMES.index(scheme)])

    def __call__(self, module: torch.nn.Module, trajectories: Sequence[Trajectory], step: int,
                 temperature: float = 1.0) -> dict[str, float]:
        """All collapse metrics for ``trajectories`` scored by ``module`` (the pre-update actor; no gradients)."""
        t0 = time.perf_counter()
        samples = extract_samples(trajectories, self.tokenizer)
        metrics = validity_metrics(samples)
        for scheme in self.config.schemes:
            if scheme == "first_turn":
                metrics["collapse/prompt_mismatch"] = float(prompt_mismatches(samples))
                if metrics["collapse/prompt_mismatch"]:
                    continue  # no column can stand for a group whose members saw different prompts
                draw = sample_first_turn(samples, self.config.num_samples, self.rng(step, scheme))
            else:
                draw = sample_trajectory(samples, self.config.num_samples, self.rng(step, scheme))
            if len(draw.columns) < 2:
                continue  # one prompt: MI is 0 and retrieval 1 by construction, nothing to measure
            l_mean, l_sum = cross_score(module, draw.columns, [s.z for s in draw.samples], temperature=temperature,
                                        micro_batch_size=self.config.micro_batch_size, pad_id=self._pad_id(),
                                        pad_rows_to=self.dp_size)
            found = scheme_metrics(l_mean, l_sum, draw, self.ema, scheme)
            metrics.update({f"collapse_{scheme}_sample/{k}": v for k, v in found.items()})
        self._add_regime(metrics)
        metrics["timing_s/collapse_metrics"] = time.perf_counter() - t0
        return metrics

    def _pad_id(self) -> int:
        pad = getattr(self.tokenizer, "pad_token_id", None)
        return int(pad) if pad is not None else 0  # padding is masked out; any id works

    def _add_regime(self, metrics: dict[str, float]) -> None:
        """``collapse/regime`` from the first configured scheme that produced metrics (per-token H and MI)."""
        c = self.config
        if c.h_threshold is None or c.i_threshold is None:
            return
        for scheme in c.schemes:
            prefix = f"collapse_{scheme}_sample/"
            if prefix + "mi_estimate" in metrics:
                metrics["collapse/regime"] = float(
                    regime(
                        metrics[prefix + "conditional_entropy_est"],
                        metrics[prefix + "mi_estimate"],
                        c.h_threshold,
                        c.i_threshold,
                    )
                )
                return

    def state_dict(self) -> dict:
        return {"ema": dict(self.ema.values)}

    def load_state_dict(self, state: dict) -> None:
        self.ema.values = {str(k): float(v) for k, v in state.get("ema", {}).items()}
