"""Every estimator against an independent plain-Python implementation (written here from algorithms.md §4) on random
batches with padding, several turns per row, groups of different sizes and shuffled group ids."""

import math
import random
import statistics

import attrs
import pytest
import torch

import ragen
from ragen import AdvantageInput


def random_batch(seed, n=7, width=14, max_turns=3, values=True, turn_scores=True, kl=False):
    """Rows: random prompt/env gaps (mask 0), 1..max_turns sampled runs (mask 1), right padding (mask 0)."""
    rng = random.Random(seed)
    mask, turn_ids, rewards, vals, kls, tscores = [], [], [], [], [], []
    for _ in range(n):
        row, tid, pos, t = [0] * width, [-1] * width, rng.randint(0, 2), 0
        for t in range(rng.randint(1, max_turns)):
            run = rng.randint(1, 3)
            if pos + run > width - 1:
                break
            for j in range(pos, pos + run):
                row[j], tid[j] = 1, t
            pos += run + rng.randint(1, 2)  # the env's reply
        mask.append(row)
        turn_ids.append(tid)
        nt = max(tid) + 1
        tscores.append([rng.choice([-0.1, 0.0, 1.0, 2.5]) for _ in range(nt)] + [0.0] * (max_turns - nt))
        vals.append([rng.uniform(-1, 1) if m else rng.uniform(5, 9) for m in row])  # junk off-mask must not matter
        kls.append([rng.uniform(-0.05, 0.05) * m for m in row])
        rewards.append([0.0] * width)
    scores = [rng.choice([-1.0, 0.0, 0.5, 3.0]) for _ in range(n)]
    groups = [rng.choice([11, 4, 7]) for _ in range(n)]
    for i in range(n):  # trajectory placement: the score on the last sampled token (plus the KL part)
        last = max(j for j, m in enumerate(mask[i]) if m)
        rewards[i][last] = scores[i]
        if kl:
            rewards[i] = [r + k for r, k in zip(rewards[i], kls[i])]
    t = lambda x: torch.tensor(x, dtype=torch.float32)  # noqa: E731
    return AdvantageInput(token_rewards=t(rewards), mask=t(mask), scores=t(scores), group_ids=torch.tensor(groups),
                          values=t(vals) if values else None, turn_ids=torch.tensor(turn_ids),
                          turn_scores=t(tscores) if turn_scores else None, kl_rewards=t(kls) if kl else None)


def rows(b, key):
    x = getattr(b, key)
    return [[float(v) for v in r] for r in x.tolist()]


def whiten_plain(adv_rows, mask_rows):
    flat = [a for ar, mr in zip(adv_rows, mask_rows) for a, m in zip(ar, mr) if m]
    mu, var = statistics.fmean(flat), statistics.variance(flat)
    return [
        [(a - mu) / math.sqrt(var + 1e-8) if m else 0.0 for a, m in zip(ar, mr)] for ar, mr in zip(adv_rows, mask_rows)
    ]


def group_members(b):
    g = b.group_ids.tolist()
    return {i: [k for k in range(len(g)) if g[k] == g[i]] for i in range(len(g))}


def check(out_rows, expected, mask):
    for o, e, m in zip(out_rows, expected, mask):
        assert o == pytest.approx([x if mm else 0.0 for x, mm in zip(e, m)], abs=1e-4)


SEEDS = range(6)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name,std", [("grpo", True), ("dr-grpo", False)])
def test_grpo_family(seed, name, std):
    b = random_batch(seed, values=False)
    s, mask, members = b.scores.tolist(), rows(b, "mask"), group_members(b)
    exp = []
    for i in range(len(s)):
        g = [s[k] for k in members[i]]
        mu, sd = (statistics.fmean(g), statistics.stdev(g)) if len(g) > 1 else (s[i], 1.0)  # a singleton: A = 0
        a = (s[i] - mu) / (sd + 1e-6) if std else s[i] - mu
        exp.append([a] * len(mask[i]))
    check(ragen.make_component("estimator", name)(b).advantages.tolist(), exp, mask)


@pytest.mark.parametrize("seed", SEEDS)
def test_rloo(seed):
    b = random_batch(seed, values=False)
    s, mask, members = b.scores.tolist(), rows(b, "mask"), group_members(b)
    exp = []
    for i in range(len(s)):
        others = [s[k] for k in members[i] if k != i]
        exp.append([s[i] - statistics.fmean(others) if others else s[i]] * len(mask[i]))
    check(ragen.make_component("estimator", "rloo")(b).advantages.tolist(), exp, mask)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_reinforce_pp_with_kl_rewards(seed, gamma):
    b = random_batch(seed, values=False, kl=True)
    rew, mask = rows(b, "token_rewards"), rows(b, "mask")
    ret = []
    for r, m in zip(rew, mask):
        acc, out = 0.0, [0.0] * len(r)
        for j in range(len(r) - 1, -1, -1):
            if m[j]:
                acc = r[j] + gamma * acc
                out[j] = acc
        ret.append(out)
    out = ragen.make_component("estimator", "reinforce++", gamma=gamma)(b)
    check(out.advantages.tolist(), whiten_plain(ret, mask), mask)


@pytest.mark.parametrize("seed", SEEDS)
def test_reinforce_pp_baseline(seed):
    b = random_batch(seed, values=False)
    s, mask, members = b.scores.tolist(), rows(b, "mask"), group_members(b)
    base = []
    for i in range(len(s)):
        g = [s[k] for k in members[i]]
        base.append([s[i] - statistics.fmean(g) if len(g) > 1 else s[i]] * len(mask[i]))
    out = ragen.make_component("estimator", "reinforce++-baseline")(b)
    check(out.advantages.tolist(), whiten_plain(base, mask), mask)


def gae_plain(rew, val, mask, gamma, lam):
    adv = [0.0] * len(rew)
    nv = na = 0.0
    for j in range(len(rew) - 1, -1, -1):
        if not mask[j]:
            continue
        na = rew[j] + gamma * nv - val[j] + gamma * lam * na
        adv[j], nv = na, val[j]
    return adv


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("gamma,lam", [(1.0, 1.0), (0.9, 0.8)])
def test_gae(seed, gamma, lam):
    b = random_batch(seed)
    rew, val, mask = rows(b, "token_rewards"), rows(b, "values"), rows(b, "mask")
    adv = [gae_plain(r, v, m, gamma, lam) for r, v, m in zip(rew, val, mask)]
    out = ragen.make_component("estimator", "gae", gamma=gamma, lam=lam, whiten=False)(b)
    check(out.advantages.tolist(), adv, mask)
    check(out.returns.tolist(), [[a + v for a, v in zip(ar, vr)] for ar, vr in zip(adv, val)], mask)
    out_w = ragen.make_component("estimator", "gae", gamma=gamma, lam=lam)(b)
    check(out_w.advantages.tolist(), whiten_plain(adv, mask), mask)


def turns_of(mask_row, tid_row):
    spans = {}
    for j, (m, t) in enumerate(zip(mask_row, tid_row)):
        if m:
            spans.setdefault(t, []).append(j)
    return [spans[t] for t in sorted(spans)]


@pytest.mark.parametrize("seed", SEEDS)
def test_turn_gae(seed):
    b = random_batch(seed, kl=True)
    val, mask, kls, ts = rows(b, "values"), rows(b, "mask"), rows(b, "kl_rewards"), rows(b, "turn_scores")
    adv = []
    for i in range(len(mask)):
        r = list(kls[i])
        for t, span in enumerate(turns_of(mask[i], b.turn_ids[i].tolist())):
            r[span[-1]] += ts[i][t]
        adv.append(gae_plain(r, val[i], mask[i], 0.9, 0.95))
    out = ragen.make_component("estimator", "turn-gae", gamma=0.9, lam=0.95, whiten=False)(b)
    check(out.advantages.tolist(), adv, mask)


def bi_level_plain(mask_row, tid_row, val_row, turn_r, kl_row, gh, lh, gl, ll):
    spans = turns_of(mask_row, tid_row)
    T = len(spans)
    u = [val_row[s[0]] for s in spans] + [0.0]
    ah, ghat = [0.0] * (T + 1), [0.0] * (T + 1)
    for t in reversed(range(T)):
        delta = turn_r[t] + gh * u[t + 1] - u[t]
        ah[t] = delta + gh * lh * ah[t + 1]
        ghat[t] = ah[t] + u[t]
    adv = [0.0] * len(mask_row)
    for t, span in enumerate(spans):
        y = turn_r[t] + gh * ghat[t + 1]
        na = nv = 0.0
        for j in reversed(span):
            r = kl_row[j] + (y if j == span[-1] else 0.0)
            na = r + gl * nv - val_row[j] + gl * ll * na
            adv[j], nv = na, val_row[j]
    return adv, ah


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("turn_rewards", [True, False])
def test_bi_level_gae_against_plain(seed, turn_rewards):
    b = random_batch(seed, kl=True)
    val, mask, kls, ts, s = (
        rows(b, "values"),
        rows(b, "mask"),
        rows(b, "kl_rewards"),
        rows(b, "turn_scores"),
        b.scores.tolist(),
    )
    adv = []
    for i in range(len(mask)):
        tid = b.turn_ids[i].tolist()
        T = len(turns_of(mask[i], tid))
        r = ts[i][:T] if turn_rewards else [0.0] * (T - 1) + [s[i]]
        adv.append(bi_level_plain(mask[i], tid, val[i], r, kls[i], 0.95, 0.9, 0.97, 0.8)[0])
    out = ragen.make_component("estimator", "bi-level-gae", high_level_gamma=0.95, high_level_lam=0.9, gamma=0.97,
                               lam=0.8, turn_rewards=turn_rewards, whiten=False)(b)
    check(out.advantages.tolist(), adv, mask)


@pytest.mark.parametrize("seed", SEEDS)
def test_bi_level_gae_spec_identities(seed):
    """§4.2's required identities: all gammas/lambdas 1 + trajectory placement = token GAE (A = R - v); one turn =
    token GAE; with lambda_L = gamma_L = lambda_H = 1 the first token of each turn gets exactly A^H_t."""
    b = random_batch(seed)
    mask = rows(b, "mask")
    ones = dict(high_level_gamma=1.0, gamma=1.0, lam=1.0, whiten=False)
    bl = ragen.make_component("estimator", "bi-level-gae", **ones)(b)
    tok = ragen.make_component("estimator", "gae", gamma=1.0, lam=1.0, whiten=False)(b)
    check(bl.advantages.tolist(), tok.advantages.tolist(), mask)
    one_turn = random_batch(seed, max_turns=1)
    a = ragen.make_component("estimator", "bi-level-gae", high_level_gamma=0.7, gamma=0.9, lam=0.8, whiten=False)(
        one_turn
    )
    t = ragen.make_component("estimator", "gae", gamma=0.9, lam=0.8, whiten=False)(one_turn)
    check(a.advantages.tolist(), t.advantages.tolist(), rows(one_turn, "mask"))
    out = ragen.make_component("estimator", "bi-level-gae", high_level_gamma=0.8, gamma=1.0, lam=1.0,
                               turn_rewards=True, whiten=False)(b)
    val, ts = rows(b, "values"), rows(b, "turn_scores")
    for i in range(len(mask)):
        tid = b.turn_ids[i].tolist()
        spans = turns_of(mask[i], tid)
        _, ah = bi_level_plain(mask[i], tid, val[i], ts[i][: len(spans)], [0.0] * len(mask[i]), 0.8, 1.0, 1.0, 1.0)
        for t_idx, span in enumerate(spans):
            assert float(out.advantages[i, span[0]]) == pytest.approx(ah[t_idx], abs=1e-4)


def test_turn_estimators_need_values_and_turn_scores():
    b = random_batch(0, values=False)
    for name in ("turn-gae", "bi-level-gae", "gae"):
        with pytest.raises(ValueError, match="critic"):
            ragen.make_component("estimator", name)(b)
    with pytest.raises(ValueError, match="turn_scores"):
        ragen.make_component("estimator", "turn-gae")(random_batch(0, turn_scores=False))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", ["grpo", "dr-grpo", "rloo", "reinforce++", "reinforce++-baseline", "gae", "turn-gae",
                                  "bi-level-gae"])
def test_estimators_on_cuda_match_cpu(name):
    """The trainer hands estimators tensors on its device; on a GPU, gae and bi-level-gae wrote CPU tensors into CUDA
    ones (found by the first StarPO-S run on an H100, docs/gpu.md)."""
    b = random_batch(3, kl=True)
    cuda = attrs.evolve(b, **{f.name: getattr(b, f.name).cuda() for f in attrs.fields(type(b))
                              if getattr(b, f.name) is not None})
    est = ragen.make_component("estimator", name)
    cpu_out, gpu_out = est(b), est(cuda)
    assert gpu_out.advantages.device.type == "cuda"
    assert torch.allclose(gpu_out.advantages.cpu(), cpu_out.advantages, atol=1e-5)
    if cpu_out.returns is not None:
        assert torch.allclose(gpu_out.returns.cpu(), cpu_out.returns, atol=1e-5)
