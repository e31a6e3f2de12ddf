"""``keep_float = "auto"``: the fewest layers, most sensitive first, kept in float so that the
variant passes its own accuracy gates on calibration samples.

The gates are judged as validation judges them (``pipeline/budget.py``), on the variant's
calibration samples (all of them: a worst-sample gate judged on a few would be optimistic): the
evaluation set is never looked at, so the variant's figures stay a held-out measure of what was
chosen. The search goes up one layer at a time in the
order of the per-layer sensitivity ranking (each layer's own contribution), on the backend's
cheapest faithful way to run "every layer quantized but these" (``OneLayerRuns.without``: the
calibrated graph with those layers' quantizers passed through, or a real re-quantization where that
is as cheap), then checks the real quantized model, adding layers while it still fails. At most a
quarter of the layers are kept: past that, int8 has little left to give, and the gate failure is
reported as it is. In each walk, emulated and real, once one layer more than the start has failed the
cap is tried before the layers in between: if a quarter of the layers kept float still fails, fewer
are not tried (the ranking's premise: the more of its layers kept, the less error), so a hopeless
search costs two emulated and two real runs, not the cap's number (mobilenet_v3_large: 17); where
the cap passes, the walk goes on one layer at a time and finds what it found before.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from edgeship.calibration.dataset import Dataset

if TYPE_CHECKING:
    import numpy as np

    from edgeship.backends.base import AccuracyBudget

Outputs = list[list["np.ndarray"]]  # per batch of samples, each model output as a numpy array
MAX_SHARE = 0.25           # of the ranked layers, kept in float at most


@dataclass
class AutoKeep:
    """What the search needs from a quantizer: the variant's ``budget`` (an AccuracyBudget:
    ``failures(samples, reference, outputs)``) and ``real(kept)``, the real quantized model's
    outputs on every calibration sample with ``kept`` layers in float."""

    budget: AccuracyBudget | None  # None: the variant has no accuracy gates (nothing is searched)
    real: Callable[[list[str]], Outputs]


@dataclass
class AutoChoice:
    """How many layers the search kept, which, and what the real model still fails (empty: within)."""

    kept: list[str]
    failures: list[str]
    cap: int
    tried: list[dict[str, object]] = field(default_factory=list)   # kept, run, failures of each try

    def details(self, budget: AccuracyBudget) -> dict[str, object]:
        return {"keep_float": "auto", "kept": len(self.kept), "cap": self.cap, "budget": budget.described(),
                "failures_on_calibration": self.failures, "tried": self.tried}

    def note(self, budget: AccuracyBudget, samples: int) -> str:
        head = f"keep_float auto: {len(self.kept)} layer(s) kept in float"
        judged = f"the variant's gates ({budget.described()}) on {samples} calibration samples"
        if not self.failures:
            return f"{head}, the fewest by which {judged} pass"
        return f"{head} (the most it keeps: a quarter of the layers), and {judged} still fail: " + "; ".join(
            self.failures[:3])


def merged(outputs: Outputs, samples: int) -> list[Any]:
    """Per-batch outputs as validation reads them: one array per output, samples first, or one array
    per sample where the length varies (the device runner's own merge)."""
    from edgeship.devices.runner import merge_batches

    return merge_batches(outputs, -(-samples // len(outputs)), samples)  # the batch: ceil(samples / runs)


def search(ranking: list[str], reference: Outputs, sample: Dataset, auto: AutoKeep,
           emulated: Callable[[list[str]], Outputs] | None) -> AutoChoice:
    """The fewest of ``ranking`` (most sensitive first) to keep in float: found on ``emulated`` runs
    (or real ones where the backend has none), then confirmed on real ones."""
    ref = merged(reference, len(sample))
    cap = math.ceil(len(ranking) * MAX_SHARE)
    choice = AutoChoice([], [], cap)

    def fails(kept: int, how: str, run: Callable[[list[str]], Outputs]) -> list[str]:
        found = cast("AccuracyBudget", auto.budget).failures(sample, ref, merged(run(ranking[:kept]), len(sample)))
        choice.tried.append({"kept": kept, "run": how, "failures": found[:3]})
        return found

    def first_within(start: int, how: str, run: Callable[[list[str]], Outputs],
                     judge_cap: bool = True) -> tuple[int, list[str]]:
        """The fewest of start..cap kept by which ``run`` passes, and what it fails (the cap and its failures
        where none passes). After ``start`` fails, the cap is tried before the ones in between: where a
        quarter of the layers kept float still fails, fewer are not tried."""
        found = fails(start, how, run)
        if not found or start >= cap:
            return start, found
        at_cap = None
        if start + 1 < cap:
            at_cap = fails(cap, how, run)
            if at_cap:
                return cap, at_cap
        for kept in range(start + 1, cap):
            if not fails(kept, how, run):
                return kept, []
        if at_cap is None and judge_cap:
            at_cap = fails(cap, how, run)
        return cap, at_cap or []

    kept = 0
    choice.failures = fails(0, "real", auto.real)  # the fully quantized model: often within the budget
    if choice.failures and cap > 0:
        if emulated is not None:  # the real run confirms what the emulation chose (the cap: not run emulated)
            kept, _ = first_within(1, "emulated", emulated, judge_cap=False)
            kept, choice.failures = first_within(kept, "real", auto.real)
        else:
            kept, choice.failures = first_within(1, "real", auto.real)
    choice.kept = ranking[:kept]
    return choice
