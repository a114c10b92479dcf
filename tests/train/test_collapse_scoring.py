"""Collapse diagnostics at a fair price: the shared-prompt cross-scoring gives the plain path's matrices
(the same teacher-forced log-probs up to float rounding), so every estimate downstream is unchanged."""

import numpy as np
import pytest
import torch

from ragen.models.builtin import build_tiny_model
from ragen.models.load import load_model_and_tokenizer
from ragen.train.collapse import cross_score, estimates


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = build_tiny_model(tmp_path_factory.mktemp("m") / "tiny", ["frozenlake"], corpus_seeds=2)
    return load_model_and_tokenizer(path, "unused")[0]


def test_shared_prompt_scoring_matches_the_plain_path(model):
    g = torch.Generator().manual_seed(0)
    # prompts of very different lengths (a long multi-turn context and a short first turn), one of two tokens
    xs = [torch.randint(5, 500, (int(n),), generator=g).tolist() for n in (300, 41, 2, 170, 95, 300)]
    xs[5] = xs[0][:150]  # a prompt that is a prefix of another
    zs = [torch.randint(5, 500, (int(n),), generator=g).tolist() for n in (1, 7, 30, 12, 3)]
    for micro in (4, 128):  # micro-batches cut through a prompt's rows, or hold them all
        plain_mean, plain_sum = cross_score(model, xs, zs, shared=False, micro_batch_size=micro)
        mean, sums = cross_score(model, xs, zs, shared=True, micro_batch_size=micro, pad_rows_to=3)
        assert sums.shape == (len(zs), len(xs))
        np.testing.assert_allclose(sums, plain_sum, rtol=1e-5, atol=1e-3)
        np.testing.assert_allclose(mean, plain_mean, rtol=1e-5, atol=1e-4)
    own = np.array([0, 1, 3, 4, 5])
    new, old = estimates(mean, own), estimates(plain_mean, own)
    for key in old:
        assert new[key] == pytest.approx(old[key], abs=1e-4), key
