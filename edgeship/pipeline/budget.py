"""The accuracy budget of a variant, for quantizers that choose by it (``keep_float = "auto"``).

The budget is the variant's own accuracy gates, judged exactly as validation judges them
(:func:`edgeship.pipeline.validate.accuracy_of` and :func:`edgeship.pipeline.gates.check_gates`), but on outputs over
calibration samples: the quantizer compares its float and quantized models there, and never sees
the evaluation set, so the evaluation figures stay a held-out measure of what it chose. Gates that
need what calibration samples do not give are left out: top-1 against labels (calibration data
need not have them), the set gates of an embedding task (nearest neighbours need a set built for
it) and latency. The gates are held tighter than the profile sets them (``MARGIN``): a choice
that only just passes on the calibration samples can miss on others, and the calibration samples
are at the spec's opt size only (on all-MiniLM-L6-v2 against a mean-cosine gate of 0.99, one
backend's choice with no margin read 0.9902 on the evaluation set and 0.9892 on the sentences cut to
8 tokens; with a tenth held back, the same 6 layers and the same miss; with a quarter, 8 layers and
0.9929).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgeship.calibration.dataset import Dataset
from edgeship.pipeline.gates import check_gates
from edgeship.pipeline.validate import Reference, accuracy_of
from edgeship.profile import Gates
from edgeship.tasks.evaluate import SET_GATES, TaskJudge

NOT_ON_CALIBRATION = (*SET_GATES, "max_top1_drop", "max_p50_ms")
MARGIN = 0.25  # of each gate's allowed error, held back: cosine 0.99 is judged as 0.9925, SQNR 20 dB as 21.25
SHARES = ("min_cosine", "min_cosine_worst", "min_agreement", "min_map50_vs_float", "min_recall_vs_float",
          "min_miou_vs_float", "min_pixel_agreement")  # gates on a share or cosine: at most 1


@dataclass(frozen=True)
class CalibrationBudget:
    """``failures(samples, reference, outputs)``: the variant's accuracy gates that ``outputs`` (a
    quantized model's, flattened in the float model's output order) fail against ``reference`` (the
    float model's) on ``samples``; empty when the budget holds."""

    judge: TaskJudge
    gates: Gates

    @classmethod
    def of(cls, judge: TaskJudge, gates: Gates) -> CalibrationBudget:
        """The variant's ``gates`` as the budget judges them: those calibration samples can judge,
        each with ``MARGIN`` of its allowed error held back."""
        tighter: dict[str, float | None] = dict.fromkeys(NOT_ON_CALIBRATION)
        for name in SHARES:
            value = getattr(gates, name)
            if value is not None:
                tighter[name] = 1.0 - (1.0 - value) * (1.0 - MARGIN)
        if gates.min_sqnr_db is not None:  # the allowed noise power, MARGIN less
            tighter["min_sqnr_db"] = gates.min_sqnr_db - 10.0 * math.log10(1.0 - MARGIN)
        return cls(judge, gates.model_copy(update=tighter))

    def described(self) -> str:
        """The gates judged, for notes: "min_cosine 0.99, min_cosine_worst 0.99"."""
        from edgeship.tasks.evaluate import TASK_GATES

        set_gates = [(g, getattr(self.gates, g)) for g in TASK_GATES[self.judge.task] if getattr(self.gates, g)
                     is not None]
        judged = ", ".join(f"{g} {v:.6g}" for g, v in set_gates) or "no accuracy gate"
        return f"{judged} ({MARGIN:.0%} of each gate's allowed error held back)" if set_gates else judged

    def failures(self, samples: Dataset, reference: list[np.ndarray], outputs: list[np.ndarray]) -> list[str]:
        ref = Reference(Dataset(samples.inputs, None, samples.source), reference, self.judge.names,
                        Path(), self.judge)
        accuracy, _ = accuracy_of(ref, outputs)
        return check_gates(self.gates, accuracy, [], self.judge.task).failures
