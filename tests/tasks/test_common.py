"""The task metrics' result type and input checks."""
from __future__ import annotations

import numpy as np
import pytest

from edgeship.tasks.common import TaskMetrics, checked


def test_task_metrics_refuses_a_none_without_a_note() -> None:
    with pytest.raises(ValueError, match="'recall' is None without a note"):
        TaskMetrics("detection", {"recall": None})


def test_task_metrics_refuses_a_non_finite_value() -> None:
    with pytest.raises(ValueError, match="'miou' is nan"):
        TaskMetrics("segmentation", {"miou": float("nan")})


def test_task_metrics_to_json_keeps_values_and_notes() -> None:
    m = TaskMetrics("embedding", {"cosine_mean": None, "cosine_worst": 0.5}, {"cosine_mean": "why"})
    assert m.to_json() == {"task": "embedding", "values": {"cosine_mean": None, "cosine_worst": 0.5},
                           "notes": {"cosine_mean": "why"}}


def test_checked_names_the_array_holding_non_finite_values() -> None:
    with pytest.raises(ValueError, match=r"candidate boxes contains 2 non-finite"):
        checked("candidate boxes", np.array([np.nan, 1.0, np.inf]))
