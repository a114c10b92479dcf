"""Rollout filters (algorithms.md §7) on hand-made batches: every strategy and mode, ties, all-zero batches, the
spec's worked examples (including softmax's reward-scale dependence), whole groups, raw rewards only."""

import statistics

import pytest

import ragen
from ragen import FilterInput
from ragen.testing import component_contract_tests


def batch_from_successes(successes, size=16, win=1.0, lose=0.0):
    """Groups 0..G-1 of ``size`` members, ``successes[g]`` of them winning."""
    rewards, groups, succ = [], [], []
    for g, k in enumerate(successes):
        for m in range(size):
            rewards.append(win if m < k else lose)
            succ.append(m < k)
            groups.append(g)
    return FilterInput(raw_rewards=rewards, group_ids=groups, successes=succ, lengths=[10] * len(rewards))


def batch_from_groups(groups_rewards):
    rewards, groups = [], []
    for g, rs in groups_rewards.items():
        rewards += rs
        groups += [g] * len(rs)
    return FilterInput(
        raw_rewards=rewards, group_ids=groups, successes=[r > 0 for r in rewards], lengths=[5] * len(rewards)
    )


def kept(name="v2", inp=None, **options):
    return ragen.make_component("filter", name, **options)(inp).kept_groups


def with_stds(stds):
    """Two-member groups whose unbiased std is exactly ``s`` (rewards ±s/sqrt(2))."""
    return batch_from_groups({g: [s / 2 ** 0.5, -s / 2 ** 0.5] for g, s in enumerate(stds)})


def test_linear_top_p_spec_example():
    inp = with_stds([0.5, 0.5, 0.4, 0, 0, 0, 0, 0])  # tau = 0.9 * 1.4 - 0.01 = 1.25 -> 0.5 + 0.5 + 0.4
    assert kept(inp=inp, strategy="top_p", value=0.9) == [0, 1, 2]


SPEC_SUCCESSES = [8, 6, 4, 3, 2, 1, 0, 0]


def test_spec_stds_of_the_worked_example():
    inp = batch_from_successes(SPEC_SUCCESSES)
    stds = [statistics.stdev([r for r, g in zip(inp.raw_rewards, inp.group_ids) if g == k]) for k in range(8)]
    assert [round(s, 3) for s in stds] == [0.516, 0.5, 0.447, 0.403, 0.342, 0.25, 0.0, 0.0]


@pytest.mark.parametrize("win,lose,softmax_keeps,linear_keeps", [(1.0, 0.0, 7, 5), (10.5, -1.0, 4, 6)])
def test_softmax_depends_on_the_reward_scale(win, lose, softmax_keeps, linear_keeps):
    """The spec's numbers: 0/1 rewards -> softmax keeps 7 (one zero-std group), linear 5; Sokoban scale -> 4 vs 6."""
    inp = batch_from_successes(SPEC_SUCCESSES, win=win, lose=lose)
    soft = kept(inp=inp, strategy="top_p", value=0.9, mode="softmax")
    lin = kept(inp=inp, strategy="top_p", value=0.9, mode="linear")
    assert (len(soft), len(lin)) == (softmax_keeps, linear_keeps)
    assert lin == list(range(linear_keeps))  # the highest stds, in order
    if softmax_keeps == 7:
        assert 6 in soft  # a zero-std group survives softmax (include_zero True)
    # a softmax temperature that matches the scale brings the Sokoban case back to the 0/1 decision
    if win == 10.5:
        assert len(kept(inp=inp, strategy="top_p", value=0.9, mode="softmax", softmax_temperature=11.5)) == 7


def test_top_p_value_one_keeps_all_and_include_zero_false_drops_zero_groups():
    inp = with_stds([0.3, 0.0, 0.2])
    assert kept(inp=inp, strategy="top_p", value=1.0) == [0, 1, 2]
    assert kept(inp=inp, strategy="top_p", value=1.0, include_zero=False) == [0, 2]


def test_all_zero_batch():
    inp = with_stds([0.0] * 4)
    assert kept(inp=inp, strategy="top_p", value=0.9) == []  # linear: tau = -0.01 <= 0 at once
    assert kept(inp=inp, strategy="top_p", value=0.9, mode="softmax") == [0, 1, 2, 3]  # uniform q: c reaches 0.9 at k=4
    assert kept(inp=inp, strategy="top_p", value=0.9, include_zero=False) == []
    assert kept(inp=inp, strategy="top_k", value=0.5) == [0, 1]  # ties: lower group index first
    assert kept(inp=inp, strategy="top_k", value=0.5, include_zero=False) == []
    assert kept(inp=inp, strategy="min_p", value=0.5) == [0, 1, 2, 3]
    assert kept("zero-variance", inp=batch_from_successes([0, 0, 16])) == []


def test_linear_never_takes_zero_scores_and_may_keep_nothing():
    # scores [1, 0, 0]: tau = 0.9 - 0.01; takes group 0 (a = 1) -> kept
    assert kept(inp=with_stds([1.0, 0.0, 0.0]), strategy="top_p", value=0.9) == [0]
    # smallest: the walk meets 0 first and stops with a < tau -> nothing kept
    assert kept(inp=with_stds([1.0, 0.0, 0.5]), strategy="top_p", value=0.9, type="smallest") == []


def test_ties_break_by_group_index():
    inp = with_stds([0.2, 0.5, 0.5, 0.5, 0.1])
    assert kept(inp=inp, strategy="top_k_abs", value=2) == [1, 2]
    assert kept(inp=inp, strategy="top_k_abs", value=2, type="smallest") == [0, 4]


def test_top_k_fraction_counts_all_groups_and_is_at_least_one():
    inp = with_stds([0.1, 0.4, 0.0, 0.3, 0.2, 0.0, 0.0, 0.0])
    assert kept(inp=inp, strategy="top_k", value=0.25) == [1, 3]
    assert kept(inp=inp, strategy="top_k", value=0.01) == [1]
    assert kept(inp=inp, strategy="top_k", value=0.5, include_zero=False) == [0, 1, 3, 4]  # k = 4 of 5 candidates
    assert kept(inp=inp, strategy="top_k_abs", value=20, include_zero=False) == [0, 1, 3, 4]


def test_top_k_keeps_at_least_min_groups_of_the_candidates():
    inp = with_stds([0.1, 0.4, 0.0, 0.3, 0.2, 0.0, 0.0, 0.0])
    assert kept(inp=inp, strategy="top_k", value=0.25, min_groups=4) == [0, 1, 3, 4]  # 25% of 8 would keep 2
    assert kept(inp=inp, strategy="top_k", value=0.25, min_groups=4, include_zero=False) == [0, 1, 3, 4]
    few = with_stds([0.1, 0.4, 0.3])  # fewer candidates than min_groups: all of them, nothing invented
    assert kept(inp=few, strategy="top_k", value=0.25, min_groups=4) == [0, 1, 2]
    assert ragen.make_component("algorithm", "starpo-s").filter_options["min_groups"] == 4


def test_top_k_fraction_counts_the_rollouts_groups_when_some_were_left_out_before():
    """The success gate or a pre-filter leaves 3 of the rollout's 8 groups in play: 25% of 8 keeps 2 of them, not
    max(1, 25% of 3) = 1 (spec §7.2: n_groups = all groups)."""
    import attrs

    inp = with_stds([0.1, 0.4, 0.3])
    assert kept(inp=inp, strategy="top_k", value=0.25) == [1]
    assert kept(inp=attrs.evolve(inp, n_groups=8), strategy="top_k", value=0.25) == [1, 2]
    assert kept("top-k-0.25", inp=attrs.evolve(inp, n_groups=8)) == [1, 2]


def test_min_p_both_directions():
    inp = with_stds([0.1, 0.4, 0.3, 0.2])
    assert kept(inp=inp, strategy="min_p", value=0.5) == [1, 2, 3]  # >= 0.2
    assert kept(inp=inp, strategy="min_p", value=0.5, type="smallest") == [0, 3]  # <= 0.1 / 0.5


@pytest.mark.parametrize("metric,expected", [
    ("reward_mean", [2]), ("reward_sum", [0]), ("reward_std", [1]), ("reward_variance", [1]), ("reward_var", [1]),
    ("length", [1]),
])
def test_metrics(metric, expected):
    inp = FilterInput(raw_rewards=[1, 1, 1, 1, 0, 2, 1.5], group_ids=[0, 0, 0, 0, 1, 1, 2], successes=[False] * 7,
                      lengths=[1, 1, 1, 1, 9, 9, 2])
    assert kept(inp=inp, strategy="top_k_abs", value=1, metric=metric) == expected


def test_entropy_metrics_need_entropies_and_are_flagged():
    flt = ragen.make_component("filter", "v2", metric="entropy", strategy="top_k_abs", value=1)
    assert flt.needs_entropy and not ragen.make_component("filter", "v2").needs_entropy
    inp = FilterInput(raw_rewards=[0.0] * 4, group_ids=[0, 0, 1, 1], entropies=[0.1, 0.5, 2.0, 2.2])
    assert flt(inp).kept_groups == [1]
    std_flt = ragen.make_component("filter", "v2", metric="entropy_std", strategy="top_k_abs", value=1)
    assert std_flt(inp).kept_groups == [0]  # group 0 spreads more (0.28 vs 0.14)
    with pytest.raises(ValueError, match="entropies"):
        flt(FilterInput(raw_rewards=[0.0], group_ids=[0]))


def test_group_ids_not_order():
    a = FilterInput(raw_rewards=[1, 0, 5, 5], group_ids=[3, 3, 9, 9])
    b = FilterInput(raw_rewards=[5, 1, 5, 0], group_ids=[9, 3, 9, 3])
    assert kept(inp=a, strategy="top_k_abs", value=1) == kept(inp=b, strategy="top_k_abs", value=1) == [3]


def test_named_filter_presets():
    inp = batch_from_successes(SPEC_SUCCESSES)
    assert len(kept("v2-main", inp=inp)) == 7 and len(kept("v2-recommended", inp=inp)) == 5
    assert kept("top-k-0.25", inp=inp) == [0, 1] and kept("none", inp=inp) == list(range(8))


def test_metrics_of_a_decision():
    inp = with_stds([0.5, 0.0, 0.3, 0.0])
    m = ragen.make_component("filter", "top-k", value=0.5)(inp).metrics
    assert m["rollout/filter_kept_count"] == 2 and m["rollout/filter_kept_ratio"] == 0.5
    assert m["rollout/filter_zero_count"] == 2
    assert m["rollout/in_group_reward_std"] == pytest.approx(0.2)
    assert m["rollout/chosen_in_group_reward_std"] == pytest.approx(0.4)
    assert m["rollout/chosen_in_group_reward_mean"] == pytest.approx(0.0)


def test_zero_variance_on_success_not_on_shaped_reward():
    """All-fail groups whose raw rewards differ (step costs) are still dropped: the outcome is success."""
    inp = FilterInput(raw_rewards=[-1.0, -1.3, 10.0, -1.0, 10.0, 10.0], group_ids=[0, 0, 1, 1, 2, 2],
                      successes=[False, False, True, False, True, True])
    res = ragen.make_component("filter", "zero-variance")(inp)
    assert res.kept_groups == [1] and res.metrics["rollout/dapo_dropped_groups"] == 2
    assert ragen.make_component("filter", "zero-variance", outcome="reward")(inp).kept_groups == [0, 1]


def test_bad_options_name_the_key():
    with pytest.raises(ragen.ConfigError, match="strategy"):
        ragen.make_component("filter", "v2", strategy="top_q")
    with pytest.raises(ragen.ConfigError, match="metric"):
        ragen.make_component("filter", "v2", metric="reward_stdd")


#: every filter keeps the filter contract (ragen.testing), including an entropy metric (needs_entropy) and softmax
test_filter_contract = component_contract_tests("filter", [
    "none", "v2", "top-p", "top-k", "top-k-abs", "min-p", "v2-main", "v2-recommended", "top-k-0.25", "zero-variance",
    ("v2", {"metric": "entropy"}), ("v2", {"metric": "length", "type": "smallest", "strategy": "min_p", "value": 0.5}),
    ("v2-main", {"value": 0.5}), ("zero-variance", {"outcome": "reward"}),
])
