"""Reward shapers (algorithms.md §3): normalisation per group / variant / batch, and the format-penalty re-weighting."""

import re
import statistics

import attrs
import pytest

import ragen
from ragen import ShapeInput
from ragen.testing import component_contract_tests


def shape(name, inp, **opts):
    return ragen.make_component("shaper", name, **opts)(inp)


INP = ShapeInput(scores=[1.0, 3.0, 0.0, 10.0, 2.0], group_ids=[0, 0, 1, 1, 2], env_names=["a", "a", "b", "b", "a"])


def test_mean_std_per_group():
    out = shape("reward-norm", INP, method="mean_std", grouping="group")
    s01 = statistics.stdev([1.0, 3.0])
    s23 = statistics.stdev([0.0, 10.0])
    assert out == pytest.approx([-1 / (s01 + 1e-6), 1 / (s01 + 1e-6), -5 / (s23 + 1e-6), 5 / (s23 + 1e-6), 0.0])


def test_mean_per_variant_and_batch_and_asym_clip():
    assert shape("reward-norm", INP, method="mean", grouping="variant") == pytest.approx([-1.0, 1.0, -5.0, 5.0, 0.0])
    mu, sd = statistics.fmean(INP.scores), statistics.stdev(INP.scores)
    clipped = [min(3.0, max(-1.0, (s - mu) / (sd + 1e-6))) for s in INP.scores]
    assert shape("reward-norm", INP, method="asym_clip", grouping="batch") == pytest.approx(clipped)
    assert shape("reward-norm", INP, method="identity") == INP.scores


def test_skipped_when_every_unit_has_one_member():
    inp = ShapeInput(scores=[1.0, 5.0], group_ids=[0, 1])
    assert shape("reward-norm", inp, method="mean_std") == [1.0, 5.0]


@attrs.define
class Turn:
    format_ok: bool


@attrs.define
class Traj:
    penalty: float
    turns: list


def test_format_penalty_reweights_only_the_penalty():
    trajs = [Traj(-0.2, [Turn(False), Turn(False), Turn(True)]), Traj(0.0, [Turn(True)])]
    inp = ShapeInput(scores=[0.8, 1.0], group_ids=[0, 0], trajectories=trajs)
    assert shape("format-penalty", inp, coef=-0.5) == pytest.approx([1.0 - 1.0, 1.0])


def test_bad_option_names_the_key():
    with pytest.raises(ragen.ConfigError, match="method"):
        ragen.make_component("shaper", "reward-norm", method="zscore")


#: both shapers keep the shaper contract (ragen.testing), under each grouping and method
test_shaper_contract = component_contract_tests("shaper", [
    "reward-norm", "format-penalty", ("reward-norm", {"grouping": "variant", "method": "asym_clip"}),
    ("reward-norm", {"grouping": "batch", "method": "mean"}), ("format-penalty", {"coef": -0.5}),
    "potential", ("potential", {"gamma": 0.9, "coef": 0.5}),
])


# ---- potential: gamma * Phi(s') - Phi(s) per turn ------------------------------------------------------------------
@attrs.define
class PTurn:
    reward: float
    penalty: float
    info: dict


def ptraj(*phis, rewards=None):
    """A trajectory whose turns move through the potentials ``phis`` (turn t: phis[t] -> phis[t+1])."""
    rewards = rewards or [0.0] * (len(phis) - 1)
    turns = [PTurn(r, 0.0, {"potential_start": a, "potential_end": b}) for r, a, b in zip(rewards, phis, phis[1:])]
    return Traj(0.0, turns)


def test_potential_terms_and_discounted_sum():
    t = ptraj(-4.0, -2.0, -2.0, 0.0, rewards=[-0.1, -0.1, 10.9])
    out = shape("potential", ShapeInput(scores=[10.7], group_ids=[0], trajectories=[t]), gamma=0.5)
    terms = [0.5 * -2.0 + 4.0, 0.5 * -2.0 + 2.0, 0.5 * 0.0 + 2.0]
    assert out.turn_scores == [pytest.approx([r + f for r, f in zip([-0.1, -0.1, 10.9], terms)])]
    assert out.scores == pytest.approx([10.7 + terms[0] + 0.5 * terms[1] + 0.25 * terms[2]])
    assert out.scores[0] - 10.7 == pytest.approx(0.5 ** 3 * 0.0 - -4.0)  # = gamma^T Phi(s_T) - Phi(s_0)
    inp = ShapeInput(scores=[10.7, 0.0], group_ids=[0, 0], trajectories=[t, Traj(0.0, [PTurn(0.0, 0.0, {})])])
    shape("potential", inp, gamma=0.5)
    assert inp.metrics == {"turns_with_potential": 0.75, "term_mean": pytest.approx(sum(terms) / 3)}


def test_potential_starts_from_the_previous_shapers_turn_scores_and_coef_scales_phi():
    t = ptraj(-3.0, -1.0)
    out = shape("potential", ShapeInput(scores=[1.0], group_ids=[0], trajectories=[t], turn_scores=[[5.0]]), coef=0.5)
    assert out.turn_scores == [[pytest.approx(6.0)]] and out.scores == [pytest.approx(2.0)]
    with pytest.raises(ValueError, match="turn"):
        shape("potential", ShapeInput(scores=[1.0], group_ids=[0], trajectories=[t], turn_scores=[[5.0, 1.0]]))


def test_potential_loop_earns_nothing_at_gamma_1_and_a_bounded_bias_below():
    """Farming: A -> B -> A -> B -> A: 0 at gamma 1; at gamma < 1 at most (1 - gamma^T) |Phi(A)|, less than
    walking to the goal from A (|Phi(A)| + the env's reward)."""
    loop, solve = ptraj(-3.0, -2.0, -3.0, -2.0, -3.0), ptraj(-3.0, -2.0, -1.0, 0.0)
    for gamma in (1.0, 0.9):
        out = shape(
            "potential", ShapeInput(scores=[0.0, 0.0], group_ids=[0, 0], trajectories=[loop, solve]), gamma=gamma
        )
        gain, solved = out.scores
        if gamma == 1.0:
            assert gain == 0.0 and solved == 3.0
        else:
            assert 0.0 < gain <= (1 - gamma ** 4) * 3.0 + 1e-12 and gain < solved


def test_potential_keys_are_the_cores():
    from ragen_algos import shapers

    from ragen.contract import trajectory

    assert (shapers.POTENTIAL_START, shapers.POTENTIAL_END) == (trajectory.POTENTIAL_START, trajectory.POTENTIAL_END)


# ---- potential: gamma < 1 only where the estimator discounts between turns by it -------------------------------------
def _trainer(tmp_path, *options):
    from ragen.config import load_config
    from ragen.testing import TINY
    from ragen.train.trainer import Trainer

    cfg = load_config(overrides=[*TINY, "env.name=sokoban", "algo.name=grpo", "algo.options.shapers=[potential]",
                                 *options, f"logging.run_dir={tmp_path}", "logging.name=r", "logging.progress=false"])
    return Trainer(cfg, tmp_path / "r")


@pytest.mark.parametrize("estimator", ["grpo", "rloo", "reinforce++"])
def test_potential_below_gamma_1_is_refused_with_an_undiscounted_estimator(tmp_path, estimator):
    """Standing still at Phi = -5 for 5 turns, -0.1 a turn: gamma 0.9 paid (1 - 0.9) * 5 a turn, +2.0 against -0.5
    raw under an estimator that sums turns undiscounted. Refused before any model is built, naming the key."""
    expected = (r"^algo\.options\.shaper_options\.potential\.gamma: 0\.9 does not match the estimator "
                rf"'{re.escape(estimator)}', whose discount between turns is 1\.0: it sums turns undiscounted; set "
                r"gamma to 1")
    with pytest.raises(ragen.ConfigError, match=expected):
        _trainer(tmp_path, f"algo.options.estimator={estimator}", "algo.options.shaper_options.potential.gamma=0.9")


def test_potential_gamma_must_match_bi_level_gae_high_level_gamma(tmp_path):
    with pytest.raises(ragen.ConfigError, match=r"potential\.gamma: 0\.9 does not match the estimator 'bi-level-gae', "
                                                r"whose discount between turns is its high_level_gamma \(0\.95\)"):
        _trainer(tmp_path, "algo.name=ppo", "algo.options.estimator=bi-level-gae",
                 "algo.options.shaper_options.potential.gamma=0.9")
    from ragen.config import load_config
    from ragen.testing import TINY
    from ragen.train.setup import _components

    cfg = load_config(overrides=[*TINY, "env.name=sokoban", "algo.name=ppo", "algo.options.estimator=bi-level-gae",
                                 "algo.options.estimator_options.high_level_gamma=0.9",
                                 "algo.options.shapers=[potential]", "algo.options.shaper_options.potential.gamma=0.9"])
    assert _components(cfg)[4]  # the matching discount builds


def test_an_idle_policy_is_not_paid_at_the_gamma_allowed_for_grpo():
    idle = ptraj(-5.0, -5.0, -5.0, -5.0, -5.0, -5.0, rewards=[-0.1] * 5)
    raw = -0.5
    out = shape("potential", ShapeInput(scores=[raw], group_ids=[0], trajectories=[idle]), gamma=1.0)
    assert out.scores == [pytest.approx(raw)]
    assert out.turn_scores == [pytest.approx([-0.1] * 5)]
    paid = shape("potential", ShapeInput(scores=[raw], group_ids=[0], trajectories=[idle]), gamma=0.9)
    assert paid.scores[0] > 0  # what the check refuses: 0.9^5 * -5 + 5 = +2.05 over -0.5 raw
