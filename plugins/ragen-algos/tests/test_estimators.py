"""Hand-computed advantages for GRPO, Dr. GRPO and token-level GAE (algorithms.md §4)."""

import math

import pytest
import torch

import ragen
from ragen import AdvantageInput
from ragen.testing import component_contract_tests


def batch(scores, groups, mask=None, rewards=None, values=None):
    n = len(scores)
    mask = torch.ones(n, 3) if mask is None else torch.tensor(mask, dtype=torch.float32)
    rewards = torch.zeros_like(mask) if rewards is None else torch.tensor(rewards, dtype=torch.float32)
    return AdvantageInput(token_rewards=rewards, mask=mask, scores=torch.tensor(scores, dtype=torch.float32),
                          group_ids=torch.tensor(groups), values=None if values is None else torch.tensor(values))


def test_grpo_hand_computed():
    est = ragen.make_component("estimator", "grpo", singleton="score")
    out = est(batch([1.0, 0.0, 0.0, 5.0], [7, 7, 7, 9], mask=[[0, 1, 1]] * 4))
    # group 7: mean 1/3, unbiased std sqrt(1/3); group 9 has one member: mean 0, std 1 (singleton='score', the spec's)
    s = math.sqrt(1 / 3)
    expected = [(1 - 1 / 3) / (s + 1e-6), (0 - 1 / 3) / (s + 1e-6), (0 - 1 / 3) / (s + 1e-6), 5.0 / (1 + 1e-6)]
    assert out.advantages[:, 0].tolist() == [0.0] * 4  # mask-0 positions get nothing
    assert out.advantages[:, 1].tolist() == pytest.approx(expected, rel=1e-5)
    assert torch.equal(out.advantages[:, 1], out.advantages[:, 2])  # broadcast to every sampled token


@pytest.mark.parametrize("name", ["grpo", "dr-grpo"])
def test_a_singleton_group_gets_advantage_zero_by_default(name):
    """A group left with one member (its others failed) has no baseline: its raw score must not become its advantage
    (+10.9 was seen on sokoban); the other groups are untouched."""
    out = ragen.make_component("estimator", name)(batch([1.0, 0.0, 10.9, -3.0], [7, 7, 9, 4]))
    assert out.advantages[2].tolist() == [0.0] * 3 and out.advantages[3].tolist() == [0.0] * 3
    assert out.advantages[0, 0] > 0 > out.advantages[1, 0]
    kept = ragen.make_component("estimator", name, singleton="score")(batch([1.0, 0.0, 10.9], [7, 7, 9]))
    assert kept.advantages[2, 0].item() == pytest.approx(10.9 if name == "dr-grpo" else 10.9 / (1 + 1e-6))


def test_grpo_singleton_option_is_checked():
    with pytest.raises(ragen.ConfigError, match="singleton"):
        ragen.make_component("estimator", "grpo", singleton="one")


def test_grpo_group_ids_not_order():
    est = ragen.make_component("estimator", "grpo")
    a = est(batch([1.0, 3.0, 0.0, 2.0], [0, 1, 0, 1])).advantages[:, 0]
    b = est(batch([1.0, 0.0, 3.0, 2.0], [0, 0, 1, 1])).advantages[:, 0]
    assert a[[0, 2, 1, 3]].tolist() == pytest.approx(b.tolist())


def test_dr_grpo_no_std():
    est = ragen.make_component("estimator", "dr-grpo")
    out = est(batch([2.0, 0.0], [0, 0]))
    assert out.advantages[:, 0].tolist() == pytest.approx([1.0, -1.0])


def test_gae_hand_computed_gamma_lambda():
    est = ragen.make_component("estimator", "gae", gamma=0.5, lam=0.5, whiten=False)
    # sampled positions 1, 2, 4 (position 3 is env text: skipped, not discounted)
    mask = [[0, 1, 1, 0, 1]]
    rewards = [[0, 0, 0, 0, 1.0]]
    values = [[0, 0.2, 0.4, 9.0, 0.6]]
    out = est(batch([1.0], [0], mask=mask, rewards=rewards, values=values))
    d4 = 1.0 + 0 - 0.6
    a4 = d4
    d2 = 0 + 0.5 * 0.6 - 0.4
    a2 = d2 + 0.25 * a4
    d1 = 0 + 0.5 * 0.4 - 0.2
    a1 = d1 + 0.25 * a2
    assert out.advantages[0].tolist() == pytest.approx([0, a1, a2, 0, a4], abs=1e-6)
    assert out.returns[0].tolist() == pytest.approx([0, a1 + 0.2, a2 + 0.4, 0, a4 + 0.6], abs=1e-6)


def test_gae_gamma_lambda_one_is_score_minus_value():
    est = ragen.make_component("estimator", "gae", whiten=False)
    out = est(batch([2.0], [0], mask=[[1, 1, 1]], rewards=[[0, 0, 2.0]], values=[[0.5, 1.0, 1.5]]))
    assert out.advantages[0].tolist() == pytest.approx([1.5, 1.0, 0.5])


def test_gae_whitening_unbiased():
    est = ragen.make_component("estimator", "gae")
    out = est(batch([2.0], [0], mask=[[1, 1, 1]], rewards=[[0, 0, 2.0]], values=[[0.5, 1.0, 1.5]]))
    x = torch.tensor([1.5, 1.0, 0.5])
    expected = (x - x.mean()) / torch.sqrt(x.var(unbiased=True) + 1e-8)
    assert out.advantages[0].tolist() == pytest.approx(expected.tolist(), abs=1e-5)


@pytest.mark.parametrize("name", ["gae", "turn-gae", "bi-level-gae", "reinforce++", "reinforce++-baseline"])
def test_whitening_over_two_processes_sums_through_the_inputs_reduction(name):
    """Two processes (threads here) holding half the rows each whiten like one process over all rows: the estimator
    reaches the other process only through ``AdvantageInput.all_reduce_sum``."""
    import threading

    gen = torch.Generator().manual_seed(0)
    mask = (torch.rand(8, 6, generator=gen) > 0.3).float()
    mask[:, 0] = 1.0
    rewards, values = (torch.randn(8, 6, generator=gen) * mask for _ in range(2))
    scores, groups = torch.randn(8, generator=gen), torch.arange(8) // 2
    turn_scores = torch.randn(8, 3, generator=gen)  # 6 positions hold at most 3 runs of sampled tokens (turns)

    def inputs(rows, **extra):
        return AdvantageInput(token_rewards=rewards[rows], mask=mask[rows], scores=scores[rows],
                              group_ids=groups[rows], values=values[rows], turn_scores=turn_scores[rows], **extra)

    estimate = ragen.make_component("estimator", name)
    whole = estimate(inputs(slice(0, 8))).advantages
    barrier, sent, halves = threading.Barrier(2), [None, None], [None, None]

    def run(rank):
        def all_reduce_sum(xs):
            sent[rank] = list(xs)
            barrier.wait()
            out = [a + b for a, b in zip(*sent)]
            barrier.wait()  # both have read the sums before either sends again
            return out

        halves[rank] = estimate(inputs(slice(4 * rank, 4 * rank + 4), world_size=2,
                                       all_reduce_sum=all_reduce_sum)).advantages

    threads = [threading.Thread(target=run, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert torch.allclose(torch.cat(halves), whole, atol=1e-5)
    alone = torch.cat([estimate(inputs(slice(4 * r, 4 * r + 4))).advantages for r in range(2)])
    assert not torch.allclose(alone, whole, atol=1e-3)  # each half's own statistics differ: the test can fail


def test_the_critic_estimators_say_so_at_registration():
    needs = {c.name for c in ragen.list_components("estimator") if c.needs_critic}
    assert {"gae", "turn-gae", "bi-level-gae"} <= needs and not needs & {"grpo", "dr-grpo", "rloo", "reinforce++"}


def test_gae_needs_values():
    with pytest.raises(ValueError, match="critic"):
        ragen.make_component("estimator", "gae")(batch([1.0], [0]))


def test_presets():
    reg = {c.name: c.factory for c in ragen.list_components("algorithm")}
    assert reg["ppo"].use_critic and reg["ppo"].estimator == "gae" and reg["ppo"].clip_ratio_high == 0.28
    assert not reg["grpo"].use_critic and reg["grpo"].loss_agg_mode == "seq-mean-token-mean"
    assert reg["ppo"].entropy_coef == 0.001 and reg["ppo"].kl_coef == 0.0


def test_no_filter_keeps_all_groups():
    res = ragen.make_component("filter", "none")(ragen.FilterInput(raw_rewards=[1.0, 2.0, 3.0], group_ids=[5, 5, 2]))
    assert res.kept_groups == [2, 5] and res.metrics["rollout/filter_kept_ratio"] == 1.0


#: every estimator keeps the contract the trainer relies on (ragen.testing: [N, L] advantages, 0 off the mask, rows
#: grouped by group id, a masked-out row, value targets from the critic estimators), some with options changed
test_estimator_contract = component_contract_tests("estimator", [
    "grpo", "dr-grpo", "rloo", "reinforce++", "reinforce++-baseline", "gae", "turn-gae", "bi-level-gae",
    ("grpo", {"singleton": "score"}), ("reinforce++", {"gamma": 0.9}),
    ("gae", {"gamma": 0.99, "lam": 0.95, "whiten": False}),
    ("bi-level-gae", {"turn_rewards": True, "high_level_lam": 0.9}),
])
