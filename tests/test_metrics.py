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
