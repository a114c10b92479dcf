"""Hand-computed checks of the loss math and of aggregation independence from micro-batching."""

import math

import pytest
import torch

from ragen.train.losses import AggNorm, aggregate, policy_loss, token_logprobs, value_loss


def pg(ratio, adv, mode="token-mean"):
    logp = torch.tensor([[math.log(ratio)]])
    mask = torch.ones(1, 1)
    loss, _ = policy_loss(
        logp,
        torch.zeros(1, 1),
        torch.tensor([[adv]]),
        mask,
        clip_low=0.2,
        clip_high=0.28,
        clip_c=3.0,
        agg_mode=mode,
        norm=AggNorm.of([mask]),
    )
    return loss.item()


@pytest.mark.parametrize(
    "ratio, adv, expected",
    [
        (1.5, 1.0, -1.28),  # clipped above at 1 + 0.28 (clip-higher)
        (0.5, 1.0, -0.5),  # below the clip with A > 0: unclipped ratio is the max
        (0.5, -1.0, 0.8),  # A < 0: clipped at 1 - 0.2
        (5.0, -1.0, 3.0),  # dual clip: min(5, 3)
        (1.1, -2.0, 2.2),  # inside the trust region
    ],
)
def test_clipped_policy_loss_hand_computed(ratio, adv, expected):
    assert pg(ratio, adv) == pytest.approx(expected, rel=1e-5)


def test_value_loss_hand_computed():
    v, old, g = torch.tensor([[2.0]]), torch.tensor([[1.0]]), torch.tensor([[0.0]])
    mask = torch.ones(1, 1)
    loss, m = value_loss(v, old, g, mask, clip=0.5, agg_mode="token-mean", norm=AggNorm.of([mask]))
    # unclipped (2-0)^2 = 4; clipped v' = 1.5, (1.5)^2 = 2.25; max = 4; 0.5 * 4
    assert loss.item() == pytest.approx(2.0) and m["critic/vf_clipfrac"] == 0.0


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
def test_aggregation_does_not_depend_on_micro_batching(mode):
    torch.manual_seed(0)
    vals = torch.randn(4, 6)
    mask = (torch.rand(4, 6) > 0.4).float()
    mask[2] = 0  # a row with no sampled token is excluded from sequence counts
    whole = aggregate(vals, mask, mode, AggNorm.of([mask], length_norm=10.0))
    norm = AggNorm.of([mask[:1], mask[1:]], length_norm=10.0)
    split = aggregate(vals[:1], mask[:1], mode, norm) + aggregate(vals[1:], mask[1:], mode, norm)
    assert split.item() == pytest.approx(whole.item(), rel=1e-6)
    if mode == "token-mean":
        assert whole.item() == pytest.approx(float((vals * mask).sum() / mask.sum()))


def test_chunked_logprobs_match_full_logits():
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 11, bias=False)
    hidden = torch.randn(2, 9, 8)
    ids = torch.randint(0, 11, (2, 9))
    lp, ent = token_logprobs(hidden, head, ids, temperature=0.7, chunk=3, with_entropy=True)
    full = torch.log_softmax(head(hidden) / 0.7, -1)
    expected = full[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
    assert torch.allclose(lp[:, 1:], expected, atol=1e-6) and (lp[:, 0] == 0).all()
    assert torch.allclose(ent[:, 1:], -(full.exp() * full).sum(-1)[:, :-1], atol=1e-5)


# ---- against plain-Python implementations on random inputs with padding ------------------------------------------
def random_inputs(seed, n=5, width=9):
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(n, width, generator=g) > 0.35).float()
    mask[:, -2:] = 0  # right padding
    mask[1] = 0  # a row with no sampled token
    logp = -torch.rand(n, width, generator=g) * 3
    old = logp + (torch.rand(n, width, generator=g) - 0.5) * 1.2
    adv = torch.randn(n, width, generator=g) * mask
    return logp, old, adv, mask


def agg_plain(values, mask, mode, length_norm):
    seqs = [i for i in range(len(mask)) if sum(mask[i]) > 0]
    if mode == "token-mean":
        return sum(v * m for vr, mr in zip(values, mask) for v, m in zip(vr, mr)) / sum(map(sum, mask))
    per = [sum(v * m for v, m in zip(values[i], mask[i])) for i in seqs]
    if mode == "seq-mean-token-mean":
        return sum(p / sum(mask[i]) for p, i in zip(per, seqs)) / len(seqs)
    if mode == "seq-mean-token-sum":
        return sum(per) / len(seqs)
    return sum(per) / (len(seqs) * length_norm)


def pg_plain(logp, old, adv, mask, lo, hi, c, level):
    out = []
    for i in range(len(logp)):
        d = [max(-20.0, min(20.0, a - b)) for a, b in zip(logp[i], old[i])]
        if level == "sequence":
            sm = sum(mask[i])
            s = sum(x * m for x, m in zip(d, mask[i])) / max(sm, 1.0)
            d = [s] * len(d)
        row = []
        for dj, a in zip(d, adv[i]):
            r = math.exp(dj)
            l1, l2 = -a * r, -a * min(max(r, 1 - lo), 1 + hi)
            lc = max(l1, l2)
            row.append(min(lc, -a * c) if a < 0 else lc)
        out.append(row)
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_policy_loss_against_plain_python(seed, mode, level):
    logp, old, adv, mask = random_inputs(seed)
    loss, metrics = policy_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.28, clip_c=3.0, agg_mode=mode,
                                norm=AggNorm.of([mask], length_norm=7.0), ratio_level=level)
    tok = pg_plain(logp.tolist(), old.tolist(), adv.tolist(), mask.tolist(), 0.2, 0.28, 3.0, level)
    assert loss.item() == pytest.approx(agg_plain(tok, mask.tolist(), mode, 7.0), rel=1e-5, abs=1e-6)
    if level == "token":
        assert metrics["actor/ppo_kl"] == pytest.approx(float((-(logp - old) * mask).sum()), rel=1e-5)


def test_sequence_ratio_gradient_is_the_sequence_ratio_times_the_token_score():
    """GSPO-token: every token's gradient is s_i * grad log pi(y_j) (unclipped), s_i the length-normalised ratio."""
    logp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    old = torch.tensor([[-1.1, -1.9, -0.5]])
    mask, adv = torch.ones(1, 3), torch.ones(1, 3)
    loss, _ = policy_loss(logp, old, adv, mask, clip_low=10, clip_high=10, clip_c=3, agg_mode="token-mean",
                          norm=AggNorm.of([mask]), ratio_level="sequence")
    loss.backward()
    s = math.exp(((-1.0 + 1.1) + (-2.0 + 1.9) + 0.0) / 3)
    assert loss.item() == pytest.approx(-s)
    assert logp.grad.tolist()[0] == pytest.approx([-s / 3] * 3)


def test_log_ratio_is_clamped_before_exp():
    logp, old = torch.tensor([[0.0]]), torch.tensor([[-100.0]])
    mask = torch.ones(1, 1)
    loss, _ = policy_loss(logp, old, torch.tensor([[-1.0]]), mask, clip_low=0.2, clip_high=0.28, clip_c=1e9,
                          agg_mode="token-mean", norm=AggNorm.of([mask]), log_ratio_clamp=5.0)
    assert loss.item() == pytest.approx(math.exp(5.0))  # A < 0, ratio exp(5) (not exp(100)), dual clip out of reach


def test_kl_estimators_hand_computed():
    from ragen.train.losses import kl_penalty

    logp, ref = torch.tensor([0.0, -1.0, -30.0]), torch.tensor([-0.5, -0.2, 0.0])
    d = [0.5, -0.8, -30.0]
    assert kl_penalty(logp, ref, "k1").tolist() == pytest.approx(d)
    assert kl_penalty(logp, ref, "abs").tolist() == pytest.approx([abs(x) for x in d])
    assert kl_penalty(logp, ref, "k2").tolist() == pytest.approx([0.5 * x * x for x in d])
    k3 = [min(10.0, math.exp(-max(-20.0, x)) + max(-20.0, x) - 1) for x in d]  # d clamped to -20, result to 10
    assert kl_penalty(logp, ref, "k3").tolist() == pytest.approx(k3)
    with pytest.raises(ValueError, match="k4"):
        kl_penalty(logp, ref, "k4")


@pytest.mark.parametrize("seed", range(3))
def test_value_loss_against_plain_python(seed):
    g = torch.Generator().manual_seed(seed)
    v, old, ret = (torch.randn(4, 6, generator=g) for _ in range(3))
    mask = (torch.rand(4, 6, generator=g) > 0.3).float()
    loss, m = value_loss(v, old, ret, mask, clip=0.5, agg_mode="token-mean", norm=AggNorm.of([mask]))
    num = den = clipped = 0.0
    for vr, orow, rr, mr in zip(v.tolist(), old.tolist(), ret.tolist(), mask.tolist()):
        for a, o, r, mm in zip(vr, orow, rr, mr):
            vc = o + max(-0.5, min(0.5, a - o))
            num += mm * max((a - r) ** 2, (vc - r) ** 2)
            den += mm
            clipped += mm * ((vc - r) ** 2 > (a - r) ** 2)
    assert loss.item() == pytest.approx(0.5 * num / den, rel=1e-5)
    assert m["critic/vf_clipfrac"] == pytest.approx(clipped)


def test_tis_weights_hand_computed_and_truncated():
    from ragen.train.losses import tis_weights

    old = torch.tensor([[0.0, math.log(0.5), math.log(0.9), math.log(0.2), -1.0]])
    rollout = torch.tensor([[0.0, math.log(0.25), math.log(0.9), math.log(0.01), 5.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0, 0.0]])
    w = tis_weights(old, rollout, mask, cap=2.0)
    # masked -> 1; 0.5/0.25 = 2 (at the cap); equal -> 1; 0.2/0.01 = 20 truncated to 2; masked -> 1
    assert w.tolist()[0] == pytest.approx([1.0, 2.0, 1.0, 2.0, 1.0], rel=1e-6)
    assert tis_weights(old, rollout, mask, cap=5.0)[0, 3].item() == pytest.approx(5.0)
    assert tis_weights(old, rollout - 1.0, mask, cap=10.0)[0, 2].item() == pytest.approx(math.e, rel=1e-6)
    assert torch.equal(tis_weights(old, rollout, mask, cap=0.0), torch.ones_like(old))  # off


def test_tis_weights_scale_each_token_loss_term():
    """Advantages times the weights = each token's PPO term times its weight (the weights carry no gradient)."""
    from ragen.train.losses import tis_weights

    g = torch.Generator().manual_seed(0)
    old = -torch.rand(3, 6, generator=g) * 3
    rollout = old + torch.randn(3, 6, generator=g) * 0.5
    logp = (old + torch.randn(3, 6, generator=g) * 0.3).requires_grad_(True)
    adv = torch.randn(3, 6, generator=g)
    mask = (torch.rand(3, 6, generator=g) > 0.2).float()
    w = tis_weights(old, rollout, mask, cap=2.0)
    assert not w.requires_grad and float(w.max()) <= 2.0
    kw = dict(clip_low=0.2, clip_high=0.28, clip_c=3.0, agg_mode="token-mean", norm=AggNorm.of([mask]))
    weighted, _ = policy_loss(logp, old, adv * w, mask, **kw)
    # reference: per-token terms (one-token masks) weighted by hand
    total = 0.0
    for i in range(3):
        for j in range(6):
            if mask[i, j]:
                one = torch.zeros_like(mask)
                one[i, j] = 1.0
                term, _ = policy_loss(logp, old, adv, one, **{**kw, "norm": AggNorm(1.0, 1.0)})
                total = total + w[i, j] * term
    assert weighted.item() == pytest.approx((total / float(mask.sum())).item(), rel=1e-5)


def _tiny(arch: str):
    import transformers as tf

    common = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=16, max_position_embeddings=64)
    if arch == "gemma2":  # caps its final logits inside its own forward
        return tf.Gemma2ForCausalLM(tf.Gemma2Config(**common, final_logit_softcapping=0.5))
    if arch == "gemma3":
        return tf.Gemma3ForCausalLM(tf.Gemma3TextConfig(**common))
    if arch == "llama":
        return tf.LlamaForCausalLM(tf.LlamaConfig(**common))
    return tf.Qwen2ForCausalLM(tf.Qwen2Config(**common))


@pytest.mark.parametrize("arch", ["qwen2", "llama", "gemma3", "gemma2"])
def test_logprobs_from_hidden_states_equal_the_models_own_forward(arch):
    """The update scores sampled tokens from the decoder's hidden states (skipping the prompt's logits); the values
    must be those of the model's own forward, which the rollout sampled from, in every model family: Gemma 2's
    final-logit soft-capping included (a plain LM head would miss it)."""
    from ragen.train.losses import output_head, sampled_logprobs

    torch.manual_seed(0)
    model = _tiny(arch).eval()
    ids = torch.randint(1, 96, (2, 12))
    mask = torch.zeros(2, 12)
    mask[:, 7:] = 1.0
    with torch.no_grad():
        want = torch.log_softmax(model(input_ids=ids).logits.float(), -1)[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]
        hidden = model.get_decoder()(input_ids=ids).last_hidden_state
        got, _ = sampled_logprobs(hidden, output_head(model), ids, mask, chunk=3)
    torch.testing.assert_close(got[:, 7:], want[:, 6:], rtol=1e-5, atol=1e-5)
    if arch == "gemma2":  # the cap is what made them equal
        with torch.no_grad():
            plain, _ = sampled_logprobs(hidden, model.get_output_embeddings(), ids, mask, chunk=3)
        assert (plain[:, 7:] - want[:, 6:]).abs().max() > 1e-3
