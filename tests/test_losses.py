"""Hand-computed checks of the loss math and of aggregation independence from micro-batching."""

import math

import pytest
import torch

from ragen.losses import AggNorm, aggregate, policy_loss, token_logprobs, value_loss


def pg(ratio, adv, mode="token-mean"):
    logp = torch.tensor([[math.log(ratio)]])
    mask = torch.ones(1, 1)
    loss, _ = policy_loss(logp, torch.zeros(1, 1), torch.tensor([[adv]]), mask, clip_low=0.2, clip_high=0.28, clip_c=3.0,
                          agg_mode=mode, norm=AggNorm.of([mask]))
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
