"""Embedding metrics: cosine per sample (mean and worst), and the set metrics: nearest-neighbour
recall@1 against the float model and the labels' groups, Spearman of the pairwise similarities."""
from __future__ import annotations

import numpy as np
import pytest

from edgeship.tasks.embedding import SET_MIN_SAMPLES, cosine_per_sample, embedding_metrics


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
    assert none.values["cosine_mean"] is None and none.values["cosine_worst"] is None
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


def pairs(n_pairs: int, seed: int = 0, spread: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """``n_pairs`` well-separated random directions, each as two close samples: [2 * n_pairs, 16]
    embeddings (sample 2k and 2k + 1 are each other's nearest neighbour) and their group ids."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_pairs, 16))
    x = np.repeat(centres, 2, axis=0) + spread * rng.normal(size=(2 * n_pairs, 16))
    return x, np.repeat(np.arange(n_pairs), 2)


def test_embedding_recall_at_1_counts_samples_whose_nearest_neighbour_moved() -> None:
    ref, _ = pairs(10)
    out = ref.copy()
    out[0] = ref[4]  # sample 0 now sits on sample 4: its own neighbour and 4's and 5's change
    m = embedding_metrics(ref, out)
    nearest = [int(np.argmax(np.where(np.eye(20, dtype=bool), -np.inf, out @ out.T / np.outer(
        np.linalg.norm(out, axis=1), np.linalg.norm(out, axis=1)))[i])) for i in range(20)]
    expected = np.mean([nearest[i] == (i ^ 1) for i in range(20)])
    assert expected < 1.0 and m.values["recall_at_1_vs_float"] == pytest.approx(expected)
    assert embedding_metrics(ref, ref * 3.0).values["recall_at_1_vs_float"] == 1.0  # scale does not matter


def test_embedding_recall_at_1_takes_either_of_two_exactly_tied_float_neighbours() -> None:
    ref = np.tile(np.eye(4), (5, 1))[:SET_MIN_SAMPLES + 2]  # every sample has exact copies: ties everywhere
    out = ref + 1e-3 * np.random.default_rng(1).normal(size=ref.shape)
    assert embedding_metrics(ref, out).values["recall_at_1_vs_float"] == 1.0


def test_embedding_spearman_is_one_for_the_same_ranking_and_negative_for_a_reversed_one() -> None:
    ref, _ = pairs(10, spread=0.5)
    same = embedding_metrics(ref, ref * 2.0).values["spearman_vs_float"]
    assert same == pytest.approx(1.0)
    noisy = ref + 0.3 * np.random.default_rng(2).normal(size=ref.shape)
    value = embedding_metrics(ref, noisy).values["spearman_vs_float"]
    assert 0.5 < value < 0.999


def test_embedding_spearman_of_a_constant_artifact_is_null_with_the_reason() -> None:
    ref, _ = pairs(10)
    m = embedding_metrics(ref, np.ones_like(ref))
    assert m.values["spearman_vs_float"] is None
    assert "artifact's pairwise similarities are all equal" in m.notes["spearman_vs_float"]


def test_embedding_recall_vs_labels_reads_groups_and_leaves_out_singletons() -> None:
    ref, groups = pairs(10)
    m = embedding_metrics(ref, ref, groups)
    assert m.values["recall_at_1_vs_labels"] == 1.0
    wrong = groups.copy()
    wrong[[0, 2]] = wrong[[2, 0]]  # samples 0 and 2 swap groups: 0, 1, 2, 3 now miss their group
    assert embedding_metrics(ref, ref, wrong).values["recall_at_1_vs_labels"] == pytest.approx(16 / 20)
    lonely = np.arange(20)
    m = embedding_metrics(ref, ref, lonely)
    assert m.values["recall_at_1_vs_labels"] is None and "single sample" in m.notes["recall_at_1_vs_labels"]
    with pytest.raises(ValueError, match=r"groups \(y\) have shape \[10\]"):
        embedding_metrics(ref, ref, groups[:10])


def test_embedding_set_metrics_need_enough_samples() -> None:
    ref, groups = pairs(SET_MIN_SAMPLES // 2 - 1)
    m = embedding_metrics(ref, ref, groups)
    for name in ("recall_at_1_vs_float", "spearman_vs_float", "recall_at_1_vs_labels"):
        assert m.values[name] is None and f"needs at least {SET_MIN_SAMPLES} samples" in m.notes[name]
    assert m.values["cosine_mean"] == pytest.approx(1.0)
    assert "recall_at_1_vs_labels" not in embedding_metrics(*pairs(10)[:1], pairs(10)[0]).values
