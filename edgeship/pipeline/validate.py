"""Validation: run each artifact on each device, compare its outputs with the float model's,
summarize its timings, and check the profile's gates.

Measuring is the runner's job (on the device); this module only sends jobs and judges what comes
back. The host computes accuracy from the returned outputs the same way for every device.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgeship import metrics
from edgeship.cache import Cache
from edgeship.calibration import Dataset
from edgeship.devices import Device, Job
from edgeship.devices.base import JobResult, MeasurementError, TransportError
from edgeship.errors import DataError, ModelSpecError
from edgeship.model import call_model
from edgeship.profile import Gates, LatencySettings
from edgeship.results import Accuracy, GateResult, Latency, now_utc

NON_FINITE = "outputs contain {n} non-finite values (NaN or inf)"
NOT_INFORMATIVE = "accuracy not informative"
REPRODUCE_MIN_SQNR_DB = 40.0  # a float model against itself: ~130 dB; a differently initialised one: ~0 dB


@dataclass
class Reference:
    """The float model's outputs on the evaluation samples, and the samples as a runner input."""

    data: Dataset
    outputs: np.ndarray
    inputs_npz: Path

    @functools.cached_property
    def problem(self) -> str | None:
        """Why comparing outputs with these proves nothing (:func:`metrics.uninformative_reason`), or None."""
        return metrics.uninformative_reason(self.outputs, self.data.inputs)

    @functools.cached_property
    def sha256(self) -> str:
        """sha256 of the float outputs and the labels: what every accuracy figure is computed against."""
        h = hashlib.sha256()
        for name, a in (("outputs", self.outputs), ("labels", self.data.labels)):
            if a is not None:
                a = np.ascontiguousarray(a)
                h.update(f"{name}:{a.dtype.str}:{a.shape};".encode())
                h.update(a.tobytes())
        return h.hexdigest()


def reference_outputs(module: Any, data: Dataset, batch: int, workdir: Path, source: str = "") -> Reference:
    """Run the float module over the evaluation samples (in batches of the spec's batch size); what
    the model raises on them is a ModelSpecError naming the spec (``source``) and the inputs."""
    import torch

    outs = []
    with torch.inference_mode():
        for part in data.batches(batch):
            out = _first_output(call_model(module, {k: torch.from_numpy(a) for k, a in part.items()}, source))
            if not isinstance(out, torch.Tensor):
                raise ModelSpecError(f"the model's first output is a {type(out).__name__}; edgeship "
                                     "compares tensor outputs (logits, features)")
            outs.append(out.detach().numpy())
    workdir.mkdir(parents=True, exist_ok=True)
    inputs_npz = workdir / "eval_inputs.npz"
    np.savez(inputs_npz, **data.inputs)
    return Reference(data, np.concatenate(outs)[: len(data)], inputs_npz)


def reference_stage(model: Any, evaluation: Callable[[Any], Dataset], plan: Any, key: dict[str, Any],
                    cache: Cache, workdir: Path) -> Reference:
    """The evaluation samples and the float outputs on them, from the stage cache when the model
    and data are unchanged (then the model is not loaded); ``model.counts`` get params and FLOPs."""
    def compute(folder: Path) -> None:
        data = evaluation(plan)
        ref = reference_outputs(model.module, data, int(model.spec.inputs[0].shape[0]), folder, model.spec.source)
        labels = {} if data.labels is None else {"labels": data.labels}
        np.savez(folder / "reference.npz", outputs=ref.outputs, **labels)
        facts = {"params": model.params, "flops": model.flops, "source": data.source,
                 "state_sha256": model.state_sha256}
        (folder / "facts.json").write_text(json.dumps(facts))

    entry = cache.get_or_compute("reference", key, compute)
    facts = json.loads((entry.path / "facts.json").read_text())
    model.counts.update(params=facts["params"], flops=facts["flops"])
    model.expect_state(facts.get("state_sha256"))  # a model built later in this build must be the same
    with np.load(entry.path / "eval_inputs.npz", allow_pickle=False) as npz:
        inputs = {name: npz[name] for name in npz.files}
    with np.load(entry.path / "reference.npz", allow_pickle=False) as npz:
        outputs, labels = npz["outputs"], (npz["labels"] if "labels" in npz.files else None)
    check_labels(labels, outputs, facts["source"])
    workdir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(entry.path / "eval_inputs.npz", workdir / "eval_inputs.npz")
    return Reference(Dataset(inputs, labels, facts["source"]), outputs, workdir / "eval_inputs.npz")


def check_labels(labels: np.ndarray | None, outputs: np.ndarray, source: str) -> None:
    """DataError naming the data source when a label is not a class index of the float model's
    outputs (``[0, values per sample)``): top-1 against it would be silently wrong."""
    if labels is None or not len(outputs):
        return
    classes = int(np.prod(outputs.shape[1:]))
    bad = metrics.out_of_range_labels(labels, classes)
    if bad.size:
        count = int(np.count_nonzero((labels < 0) | (labels >= classes)))
        shown = ", ".join(str(v) for v in bad[:8].tolist()) + (", ..." if bad.size > 8 else "")
        raise DataError(f"{source}: labels (y) must be class indices in [0, {classes}) (the float model's output "
                        f"has {classes} values per sample); {count} of {len(labels)} are not: {shown}")


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


def measure(device: Device, job: Job, settings: LatencySettings, workdir: Path,
            sleep: Callable[[float], None] = time.sleep) -> Measurement:
    """Run a job on a device; a failure becomes a latency row with no numbers and the reason.

    A job whose connection dropped (TransportError) is started again up to ``device.retries``
    times, waiting ``device.backoff_s`` and then twice as long before each next try.
    """
    row = Latency(device=device.name, runtime=job.runtime, warmup=job.warmup,
                  iterations=job.iterations, threads=job.threads, measured_at=now_utc())
    result = _run_with_retries(device, job, workdir, row, sleep)
    if result is None:
        return Measurement(row, None)
    doc = result.document
    row.runtime = doc.get("runtime_version", job.runtime)
    row.threads = doc.get("threads", job.threads)
    row.load_ms = doc.get("load_ms")
    row.peak_rss_mb = doc.get("peak_rss_mb")
    row.notes.extend(doc.get("notes", []) + result.notes)
    stats = doc.get("summary_ms") or metrics.latency_stats(doc["timings_ms"])  # summary: trtexec's own
    for key in ("p50_ms", "p90_ms", "p99_ms", "mean_ms", "std_ms", "cv"):
        setattr(row, key, stats.get(key))
    flag_unsteady(row, settings.max_cv)
    return Measurement(row, result.outputs[0] if result.outputs else None)


def _run_with_retries(device: Device, job: Job, workdir: Path, row: Latency,
                      sleep: Callable[[float], None]) -> JobResult | None:
    delay = device.backoff_s
    for attempt in range(1, device.retries + 2):
        row.attempts = attempt
        try:
            return device.run_job(job, workdir)
        except TransportError as e:
            if attempt > device.retries:
                row.notes.append(f"not measured: {e} (gave up after {attempt} attempts)")
                return None
            row.notes.append(f"attempt {attempt} failed: {e}; retried after {delay:g} s")
            sleep(delay)
            delay *= 2
        except MeasurementError as e:
            row.notes.append(f"not measured: {e}")
            return None
    return None


def flag_unsteady(row: Latency, max_cv: float | None) -> None:
    """Mark a measurement whose coefficient of variation is above the profile's threshold."""
    if row.cv is None or max_cv is None:
        return
    row.cv_above_max = row.cv > max_cv
    if row.cv_above_max:
        row.notes.append(f"unsteady: cv {row.cv:.3f} is above the profile's max_cv {max_cv:g} (other load on "
                         "the device, thermal throttling or too few iterations); compare with care")


def inputs_fingerprint(ref: Reference) -> str:
    """sha256 of the evaluation inputs (names, dtypes, shapes, bytes): what --resume compares."""
    h = hashlib.sha256()
    for name in sorted(ref.data.inputs):
        a = np.ascontiguousarray(ref.data.inputs[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def reference_fingerprint(ref: Reference) -> str:
    """sha256 of the float outputs and labels (``latency[].reference_sha256``; --resume compares it)."""
    return ref.sha256


def accuracy_of(ref: Reference, outputs: np.ndarray) -> tuple[Accuracy, list[str]]:
    """The accuracy block for ``outputs`` against the float outputs, with notes on null fields; not
    informative (with the reason) when the float outputs carry no information."""
    values = metrics.accuracy(ref.outputs, outputs.reshape(ref.outputs.shape), ref.data.labels)
    accuracy = Accuracy(**values)
    if ref.problem is not None:
        accuracy.informative, accuracy.uninformative_reason = False, ref.problem
    return accuracy, accuracy_notes(accuracy, ref.data.labels is not None)


def accuracy_notes(accuracy: Accuracy, has_labels: bool) -> list[str]:
    """Why fields of an accuracy block are null, and why its figures may prove nothing."""
    notes = []
    if accuracy.non_finite:
        notes.append(f"{NON_FINITE.format(n=accuracy.non_finite)}: no accuracy figure is computed from them")
    elif accuracy.sqnr_db is None and accuracy.max_abs_err == 0.0:
        notes.append("sqnr_db is null: outputs are identical to the float model's (infinite SQNR)")
    if not accuracy.informative:
        notes.append(f"{NOT_INFORMATIVE}: {accuracy.uninformative_reason}; the figures prove nothing")
    if not has_labels:
        notes.append("top1 is null: the evaluation data has no labels")
    return notes


def reference_gates(ref: Reference, accuracy: Accuracy | None) -> GateResult:
    """The eager row's own checks: the float outputs are finite, and the float model run by the
    eager runner (a fresh process) reproduces them; otherwise no comparison in the build holds."""
    failures = []
    bad = metrics.non_finite_count(ref.outputs)
    if bad:
        failures.append(f"the float model's {NON_FINITE.format(n=bad)}")
    elif accuracy is not None and not _reproduces(accuracy):
        sqnr = "n/a" if accuracy.sqnr_db is None else f"{accuracy.sqnr_db:.1f} dB"
        failures.append(f"the float model built again in the eager runner does not reproduce the build's float "
                        f"outputs (SQNR {sqnr}, agreement {accuracy.agreement}): its construction is not "
                        "deterministic; give a weights file, or build the module from the spec's seed only")
    return GateResult(passed=not failures, failures=failures)


def _reproduces(accuracy: Accuracy) -> bool:
    if accuracy.non_finite:
        return False
    if accuracy.sqnr_db is None:
        return accuracy.max_abs_err == 0.0
    return accuracy.sqnr_db >= REPRODUCE_MIN_SQNR_DB


def check_device_gates(gates: Gates, accuracy: Accuracy | None, latency: list[Latency]) -> GateResult:
    """check_gates on the variant's accuracy, plus the accuracy gates on every other device that
    returned outputs (a device whose runtime computes differently fails the variant too)."""
    result = check_gates(gates, accuracy, latency)
    for row in latency:
        if row.accuracy is not None and row.accuracy is not accuracy:
            result.failures += [f"{f} on {row.device}" for f in check_gates(gates, row.accuracy, []).failures
                                if not (f.startswith(NOT_INFORMATIVE) and f in result.failures)]  # said once
    result.passed = not result.failures
    return result


def has_accuracy_gates(gates: Gates) -> bool:
    return any(v is not None for v in (gates.min_sqnr_db, gates.min_agreement, gates.min_cosine, gates.max_top1_drop))


def check_gates(gates: Gates, accuracy: Accuracy | None, latency: list[Latency]) -> GateResult:
    """Compare measured values with the gates. An accuracy gate whose value was not measured fails;
    the top-1 gate is skipped where the evaluation data has no labels (the notes say so). Outputs
    with NaN or inf always fail; accuracy that is not informative fails the accuracy gates (they
    would pass without proving anything)."""
    failures: list[str] = []
    acc = accuracy.model_dump() if accuracy else {}
    identical = acc.get("max_abs_err") == 0.0

    def low(field: str, limit: float | None, value: Any) -> None:
        if limit is None:
            return
        if value is None:
            if not (field == "sqnr_db" and identical):
                failures.append(f"{field} not measured (gate min {limit})")
        elif not math.isfinite(value) or value < limit:
            failures.append(f"{field} {value:.4g} < {limit:g}")

    if accuracy is not None and accuracy.non_finite:
        failures.append(NON_FINITE.format(n=accuracy.non_finite))
    elif accuracy is not None and not accuracy.informative and has_accuracy_gates(gates):
        failures.append(f"{NOT_INFORMATIVE}: {accuracy.uninformative_reason} (accuracy gates not checked)")
    else:
        low("sqnr_db", gates.min_sqnr_db, acc.get("sqnr_db"))
        low("agreement", gates.min_agreement, acc.get("agreement"))
        low("cosine", gates.min_cosine, acc.get("cosine"))
        drop = acc.get("top1_drop")
        if gates.max_top1_drop is not None and drop is not None and not drop <= gates.max_top1_drop:
            failures.append(f"top1_drop {drop:.3g} points > {gates.max_top1_drop:g}")
    if gates.max_p50_ms is not None:
        for row in latency:  # like the accuracy gates: unmeasured or non-finite never passes
            if row.p50_ms is None:
                failures.append(f"p50 not measured on {row.device} (gate max {gates.max_p50_ms:g} ms)")
            elif not row.p50_ms <= gates.max_p50_ms:
                failures.append(f"p50 {row.p50_ms:.3g} ms on {row.device} > {gates.max_p50_ms:g} ms")
    return GateResult(passed=not failures, failures=failures)
