"""The accuracy budget keep_float = "auto" quantizes against: the variant's own gates, judged as
validation judges them, on calibration samples, without the gates calibration samples cannot judge."""
from __future__ import annotations

import numpy as np

from edgeship.calibration import Dataset
from edgeship.pipeline.budget import CalibrationBudget
from edgeship.profile import Gates
from edgeship.spec import ModelSpec
from edgeship.tasks.evaluate import TaskJudge

SAMPLES = Dataset({"x": np.arange(40, dtype=np.float32).reshape(20, 2)}, None, "calibration")


def judge(task: str) -> TaskJudge:
    spec = ModelSpec(name="m", entry="m:build", inputs=[{"name": "x", "shape": [1, 2]}], task=task)
    return TaskJudge(spec, ["output"])


def test_budget_judges_the_embedding_gates_on_the_samples() -> None:
    gates = Gates(min_cosine=0.99, min_cosine_worst=0.95, min_recall_at_1_vs_float=0.95, max_p50_ms=1.0)
    budget = CalibrationBudget.of(judge("embedding"), gates)
    ref = np.random.default_rng(0).normal(size=(20, 8)).astype(np.float32)
    assert budget.failures(SAMPLES, [ref], [ref * 2]) == []  # the same directions: cosine 1
    noisy = ref + 0.5 * np.random.default_rng(1).normal(size=ref.shape).astype(np.float32)
    failures = budget.failures(SAMPLES, [ref], [noisy])
    assert failures and failures[0].startswith("cosine_mean 0.")
    assert not any("recall_at_1" in f or "p50" in f for f in failures)  # set and latency gates: not here
    assert budget.described() == ("min_cosine 0.9925, min_cosine_worst 0.9625 (25% of each gate's allowed error "
                                  "held back)")


def test_budget_leaves_out_top1_and_reads_sqnr_for_classification() -> None:
    budget = CalibrationBudget.of(judge("classification"), Gates(min_sqnr_db=20.0, max_top1_drop=0.5))
    ref = np.eye(20, 10, dtype=np.float32) * 5 + 1
    assert budget.failures(SAMPLES, [ref], [ref + 0.01]) == []
    (failure,) = budget.failures(SAMPLES, [ref], [ref + np.float32(0.5)])
    assert failure.startswith("sqnr_db ") and failure.endswith("< 21.2494")
    assert budget.described().startswith("min_sqnr_db 21.2494 ")


def test_budget_holds_back_a_quarter_of_each_gates_allowed_error() -> None:
    ref = np.random.default_rng(0).normal(size=(20, 8)).astype(np.float32)
    budget = CalibrationBudget.of(judge("embedding"), Gates(min_cosine=0.99))
    noise = np.random.default_rng(2).normal(size=ref.shape)
    noise -= (noise * ref).sum(1, keepdims=True) / (ref * ref).sum(1, keepdims=True) * ref  # orthogonal to ref
    unit, away = (a / np.linalg.norm(a, axis=1, keepdims=True) for a in (ref, noise))
    out = 0.992 * unit + np.sqrt(1 - 0.992 ** 2) * away  # every sample's cosine 0.992: the gate passes
    (failure,) = budget.failures(SAMPLES, [ref], [out.astype(np.float32)])
    assert failure.startswith("cosine_mean 0.992 < 0.9925")
