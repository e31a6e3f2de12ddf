"""Validation: run each artifact on each device, compare its outputs with the float model's,
summarize its timings, and check the profile's gates.

Measuring is the runner's job (on the device); this module only sends jobs and judges what comes
back. The host computes accuracy from the returned outputs the same way for every device.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgeship import metrics
from edgeship.calibration import Dataset
from edgeship.devices import Device, Job
from edgeship.devices.base import MeasurementError
from edgeship.errors import ModelSpecError
from edgeship.profile import Gates, LatencySettings
from edgeship.results import Accuracy, GateResult, Latency, now_utc


@dataclass
class Reference:
    """The float model's outputs on the evaluation samples, and the samples as a runner input."""

    data: Dataset
    outputs: np.ndarray
    inputs_npz: Path


def reference_outputs(module: Any, data: Dataset, batch: int, workdir: Path) -> Reference:
    """Run the float module over the evaluation samples (in batches of the spec's batch size)."""
    import torch

    outs = []
    with torch.inference_mode():
        for part in data.batches(batch):
            out = _first_output(module(*[torch.from_numpy(a) for a in part.values()]))
            if not isinstance(out, torch.Tensor):
                raise ModelSpecError(f"the model's first output is a {type(out).__name__}; edgeship "
                                     "compares tensor outputs (logits, features)")
            outs.append(out.detach().numpy())
    workdir.mkdir(parents=True, exist_ok=True)
    inputs_npz = workdir / "eval_inputs.npz"
    np.savez(inputs_npz, **data.inputs)
    return Reference(data, np.concatenate(outs)[: len(data)], inputs_npz)


def _first_output(out: Any) -> Any:
    while isinstance(out, (list, tuple)):
        out = out[0]
    if isinstance(out, dict):
        return _first_output(next(iter(out.values())))
    return out


@dataclass
class Measurement:
    """One (variant, device) measurement: latency row and the outputs it produced."""

    latency: Latency
    outputs: np.ndarray | None


def measure(device: Device, job: Job, settings: LatencySettings, workdir: Path) -> Measurement:
    """Run a job on a device; a failure becomes a latency row with no numbers and the reason."""
    row = Latency(device=device.name, runtime=job.runtime, warmup=job.warmup,
                  iterations=job.iterations, threads=job.threads, measured_at=now_utc())
    try:
        result = device.run_job(job, workdir)
    except MeasurementError as e:
        row.notes.append(f"not measured: {e}")
        return Measurement(row, None)
    doc = result.document
    row.runtime = doc.get("runtime_version", job.runtime)
    row.threads = doc.get("threads", job.threads)
    row.load_ms = doc.get("load_ms")
    row.peak_rss_mb = doc.get("peak_rss_mb")
    for key, value in metrics.latency_stats(doc["timings_ms"]).items():
        setattr(row, key, value)
    return Measurement(row, result.outputs[0] if result.outputs else None)


def accuracy_of(ref: Reference, outputs: np.ndarray) -> tuple[Accuracy, list[str]]:
    """The accuracy block for ``outputs`` against the float outputs, with notes on null fields."""
    values = metrics.accuracy(ref.outputs, outputs.reshape(ref.outputs.shape), ref.data.labels)
    notes = []
    if values["sqnr_db"] is None and values["max_abs_err"] == 0.0:
        notes.append("sqnr_db is null: outputs are identical to the float model's (infinite SQNR)")
    if ref.data.labels is None:
        notes.append("top1 is null: the evaluation data has no labels")
    return Accuracy(**values), notes


def check_gates(gates: Gates, accuracy: Accuracy | None, latency: list[Latency]) -> GateResult:
    """Compare measured values with the gates. An accuracy gate whose value was not measured fails;
    the top-1 gate is skipped where the evaluation data has no labels (the notes say so)."""
    failures: list[str] = []
    acc = accuracy.model_dump() if accuracy else {}
    identical = acc.get("max_abs_err") == 0.0

    def low(field: str, limit: float | None, value: Any) -> None:
        if limit is None:
            return
        if value is None:
            if not (field == "sqnr_db" and identical):
                failures.append(f"{field} not measured (gate min {limit})")
        elif value < limit:
            failures.append(f"{field} {value:.4g} < {limit:g}")

    low("sqnr_db", gates.min_sqnr_db, acc.get("sqnr_db"))
    low("agreement", gates.min_agreement, acc.get("agreement"))
    low("cosine", gates.min_cosine, acc.get("cosine"))
    if gates.max_top1_drop is not None and acc.get("top1_drop") is not None:
        if acc["top1_drop"] > gates.max_top1_drop:
            failures.append(f"top1_drop {acc['top1_drop']:.3g} points > {gates.max_top1_drop:g}")
    if gates.max_p50_ms is not None:
        for row in latency:
            if row.p50_ms is not None and row.p50_ms > gates.max_p50_ms:
                failures.append(f"p50 {row.p50_ms:.3g} ms on {row.device} > {gates.max_p50_ms:g} ms")
    return GateResult(passed=not failures, failures=failures)
