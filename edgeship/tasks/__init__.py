"""Task-aware accuracy metrics: an artifact's outputs against the float model's (and labels).

One module per task (``detection``, ``segmentation``, ``embedding``), each returning a
:class:`TaskMetrics`. Pure numpy; the pipeline is not wired to these yet (issue 12).
"""
from __future__ import annotations

from edgeship.tasks.common import TaskMetrics

__all__ = ["TaskMetrics"]
