"""Reward shapers (algorithms.md §3): normalisation per group / variant / batch, and the format-penalty re-weighting."""

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
])
