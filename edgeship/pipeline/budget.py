"""The accuracy budget of a variant, for quantizers that choose by it (``keep_float = "auto"``).

The budget is the variant's own accuracy gates, judged exactly as validation judges them
(:func:`edgeship.pipeline.validate.accuracy_of` and ``check_gates``), but on outputs over
calibration samples: the quantizer compares its float and quantized models there, and never sees
the evaluation set, so the evaluation figures stay a held-out measure of what it chose. Gates that
need what calibration samples do not give are left out: top-1 against labels (calibration data
need not have them), the set gates of an embedding task (nearest neighbours need a set built for
it) and latency.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgeship.calibration.dataset import Dataset
from edgeship.pipeline.validate import Reference, accuracy_of, check_gates
from edgeship.profile import Gates
from edgeship.tasks.evaluate import SET_GATES, TaskJudge

NOT_ON_CALIBRATION = (*SET_GATES, "max_top1_drop", "max_p50_ms")


@dataclass(frozen=True)
class CalibrationBudget:
    """``failures(samples, reference, outputs)``: the variant's accuracy gates that ``outputs`` (a
    quantized model's, flattened in the float model's output order) fail against ``reference`` (the
    float model's) on ``samples``; empty when the budget holds."""

    judge: TaskJudge
    gates: Gates

    @classmethod
    def of(cls, judge: TaskJudge, gates: Gates) -> CalibrationBudget:
        return cls(judge, gates.model_copy(update=dict.fromkeys(NOT_ON_CALIBRATION)))

    def described(self) -> str:
        """The gates judged, for notes: "min_cosine 0.99, min_cosine_worst 0.99"."""
        from edgeship.tasks.evaluate import TASK_GATES

        set_gates = [(g, getattr(self.gates, g)) for g in TASK_GATES[self.judge.task] if getattr(self.gates, g)
                     is not None]
        return ", ".join(f"{g} {v:g}" for g, v in set_gates) or "no accuracy gate"

    def failures(self, samples: Dataset, reference: list[np.ndarray], outputs: list[np.ndarray]) -> list[str]:
        ref = Reference(Dataset(samples.inputs, None, samples.source), reference, self.judge.names,
                        Path(), self.judge)
        accuracy, _ = accuracy_of(ref, outputs)
        return check_gates(self.gates, accuracy, [], self.judge.task).failures
