"""Embedding metrics: cosine per sample, mean and worst."""
from __future__ import annotations

import numpy as np
import pytest

from edgeship.tasks.embedding import cosine_per_sample, embedding_metrics


def test_embedding_cosine_of_orthogonal_vectors_is_zero_and_of_scaled_copies_one() -> None:
    ref = np.array([[1.0, 0.0, 0.0], [1.0, 2.0, 3.0]])
    out = np.array([[0.0, 5.0, 0.0], [2.5, 5.0, 7.5]])
    assert cosine_per_sample(ref, out) == pytest.approx([0.0, 1.0])
    m = embedding_metrics(ref, out)
    assert m.values["cosine_mean"] == pytest.approx(0.5) and m.values["cosine_worst"] == pytest.approx(0.0)


def test_embedding_compares_trailing_dims_flattened() -> None:
    ref = np.array([[[1.0, 0.0], [0.0, 1.0]]])  # [N=1, T=2, D=2]
    out = np.array([[[1.0, 0.0], [0.0, -1.0]]])  # token 1 flipped: flattened cosine (1 - 1) / 2 = 0
    assert cosine_per_sample(ref, out) == pytest.approx([0.0])


def test_embedding_zero_reference_sample_is_not_informative() -> None:
    ref = np.array([[0.0, 0.0], [1.0, 1.0]])
    out = np.array([[0.0, 0.0], [1.0, 0.0]])
    assert cosine_per_sample(ref, out)[0] is None
    m = embedding_metrics(ref, out)
    assert m.values["cosine_worst"] == pytest.approx(np.sqrt(0.5))  # the zero sample is left out, not 1
    assert "1 of 2 samples have an all-zero reference" in m.notes["cosine_worst"]
    none = embedding_metrics(np.zeros((2, 3)), np.zeros((2, 3)))
    assert none.values == {"cosine_mean": None, "cosine_worst": None}
    assert "every reference sample is all zeros" in none.notes["cosine_mean"]


def test_embedding_zero_candidate_against_a_real_reference_scores_zero() -> None:
    assert cosine_per_sample(np.ones((1, 4)), np.zeros((1, 4))) == [0.0]


def test_embedding_refuses_non_finite_mismatched_or_empty_outputs() -> None:
    with pytest.raises(ValueError, match="reference outputs contains 1 non-finite"):
        embedding_metrics(np.array([[np.inf, 1.0]]), np.ones((1, 2)))
    with pytest.raises(ValueError, match=r"candidate outputs has shape \[1, 3\] but reference outputs has \[1, 2\]"):
        embedding_metrics(np.ones((1, 2)), np.ones((1, 3)))
    with pytest.raises(ValueError, match=r"shape \[0, 2\]"):
        embedding_metrics(np.ones((0, 2)), np.ones((0, 2)))
