"""Metrics follow DESIGN.md's definitions."""
from __future__ import annotations

import math

import numpy as np
import pytest

from edgeship import metrics


def test_metrics_sqnr_matches_definition() -> None:
    ref = np.array([[3.0, 4.0]])
    out = ref + np.array([[0.03, -0.04]])
    assert metrics.sqnr_db(ref, out) == pytest.approx(10 * math.log10(25 / 0.0025))


def test_metrics_sqnr_of_identical_outputs_is_none() -> None:
    ref = np.ones((2, 3))
    assert metrics.sqnr_db(ref, ref.copy()) is None


def test_metrics_accuracy_top1_drop_in_points_and_agreement() -> None:
    ref = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    out = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    labels = np.array([0, 1, 0, 0])
    acc = metrics.accuracy(ref, out, labels)
    assert acc["top1"] == 0.5 and acc["top1_drop"] == pytest.approx(25.0)  # 75% -> 50%
    assert acc["agreement"] == 0.75 and acc["samples"] == 4


def test_metrics_accuracy_without_labels_has_null_top1() -> None:
    acc = metrics.accuracy(np.eye(3), np.eye(3) * 0.9, None)
    assert acc["top1"] is None and acc["top1_drop"] is None and acc["agreement"] == 1.0


def test_metrics_accuracy_refuses_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match="differs"):
        metrics.accuracy(np.zeros((2, 3)), np.zeros((2, 4)), None)


def test_metrics_latency_stats_percentiles_and_cv() -> None:
    stats = metrics.latency_stats([float(i) for i in range(1, 101)])
    assert stats["p50_ms"] == pytest.approx(50.5) and stats["p90_ms"] == pytest.approx(90.1)
    assert stats["cv"] == pytest.approx(stats["std_ms"] / stats["mean_ms"])


def test_metrics_accuracy_of_non_finite_outputs_has_no_figures_and_counts_them() -> None:
    out = np.eye(3)
    out[0, 1], out[2, 2] = np.nan, np.inf
    acc = metrics.accuracy(np.eye(3), out, np.array([0, 1, 2]))
    assert acc["non_finite"] == 2 and acc["samples"] == 3
    assert all(acc[k] is None for k in ("top1", "top1_drop", "agreement", "sqnr_db", "cosine", "max_abs_err"))
    assert metrics.accuracy(np.eye(3), np.eye(3), None)["non_finite"] == 0


def test_metrics_top1_refuses_labels_outside_the_classes() -> None:
    with pytest.raises(ValueError, match=r"labels \[-1, 99\] are outside \[0, 3\)"):
        metrics.top1(np.eye(4, 3), np.array([0, -1, 99, 2]))


@pytest.mark.parametrize("ref, inputs, reason", [
    (np.zeros((4, 3)), None, "the float model's outputs are all zero"),
    (np.full((4, 3), 1e-12), None, "the float model's outputs are all near zero (largest magnitude 1e-12)"),
    (np.full((4, 3), 0.25), None, "the float model's outputs are the same value (0.25) everywhere"),
    (np.tile([[0.1, 0.7, 0.2]], (4, 1)), None, "the float model gives the same output for all 4 evaluation samples "
                                               "(it ignores its input)"),
    (np.eye(4, 3), np.ones((4, 2)), "the 4 evaluation samples are all identical"),
    (np.array([[np.nan, 1.0], [1.0, 2.0]]), None,
     "the float model's outputs contain 1 non-finite value(s) (NaN or inf)"),
    (np.eye(4, 3), None, None),
    (np.array([[0.2, 0.9, 0.1]]), np.ones((1, 2)), None),  # one sample: constant over samples means nothing
])
def test_metrics_uninformative_reason_when_the_float_outputs_carry_no_information(ref, inputs, reason) -> None:
    inputs = np.arange(len(ref) * 2, dtype=np.float32).reshape(len(ref), 2) if inputs is None else inputs
    assert metrics.uninformative_reason(ref, {"x": inputs}) == reason
