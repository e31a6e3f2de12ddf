"""Who measures what, when: one task per (variant, device), devices measured concurrently.

Each device gets one worker thread that runs its tasks one at a time, each inside the device's
OS lock (:mod:`edgeship.devices.lock`), so a device never times two things at once, in this build
or another. A device that drops out fails only its own tasks; every other device's results stay.
With ``build --resume`` a pair already measured in the previous results.json (same artifact
sha256, same evaluation inputs, same float outputs and labels, same warmup / iterations / threads)
is reused, not measured again; so is, on this machine, a pair another build measured (the stage
cache's measurement entries: ``stagecache.Measurements``), unless ``--remeasure``. A requested
device that measured nothing fails the build.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edgeship import stopping
from edgeship.devices import Device, Job
from edgeship.devices.base import MeasurementError
from edgeship.devices.lock import DeviceLock
from edgeship.errors import first_line
from edgeship.locks import describe
from edgeship.metrics import sqnr_db
from edgeship.outputs import mismatches
from edgeship.pipeline.validate import (
    Measurement,
    Reference,
    accuracy_notes,
    accuracy_of,
    measure,
    reference_gates,
)
from edgeship.profile import LatencySettings
from edgeship.progress import Progress
from edgeship.results import REUSED_BY_RESUME, DeviceAgreement, Latency, ModelInfo, Results, VariantResult, now_utc

Kept = Callable[[Device, Job, str, "str | None"], "Latency | None"]


@dataclass
class Task:
    """One variant on one device: measured now (``result``) or reused from results.json."""

    row: VariantResult
    job: Job
    device: Device
    workdir: Path
    reused: Latency | None = None
    result: Measurement | None = None
    cached: bool = False   # reused from the stage cache (another build's measurement), not results.json

    @property
    def label(self) -> str:
        return f"{self.row.name} on {self.device.name}" + (f" at the {self.job.size} size" if self.job.size else "")


@dataclass
class ReuseKey:
    """What must be unchanged for a previous measurement to be reused: the float model (for the
    eager row: entry, weights, parameter count), the evaluation inputs, and what a row's accuracy
    is computed against (the float outputs and the labels: ``reference_sha256``)."""

    model: tuple
    inputs_sha256: str
    reference_sha256: str | None = None
    sizes: dict[str, tuple[str, str]] = field(default_factory=dict)  # size -> (inputs, reference) sha256

    def at(self, size: str | None) -> tuple[str, str | None]:
        """The inputs and reference sha256 a row at ``size`` was measured against."""
        return self.sizes[size] if size else (self.inputs_sha256, self.reference_sha256)


def plan_tasks(jobs: list[tuple[VariantResult, Job, str | None]], devices: list[Device], work: Path,
               previous: Results | None, current: ReuseKey, kept: Kept | None = None) -> tuple[list[Task], Counter]:
    """Tasks in (variant, device) order; devices that cannot run a job get a note on the row.
    A pair not reused from ``previous`` (the folder's results.json) is looked up in ``kept`` (the
    stage cache's measurements: ``kept(device, job, inputs_sha256, reference_sha256)``).
    Returns the tasks and, for a resumed build, why each measured pair was not reused."""
    tasks: list[Task] = []
    reasons: Counter = Counter()
    for row, job, unavailable in jobs:
        for device in devices:
            skip = device.skip_reason(job, unavailable)
            if skip:
                note = f"{device.name}: not measured here: {skip}"
                row.notes += [] if note in row.notes else [note]  # once, not once per size
                continue
            task = Task(row, job, device, work / row.name / device.name / (job.size or ""))
            why = None
            if previous is not None:
                task.reused, why = reusable(previous, row, device.name, device.planned(job), current)
            if task.reused is None and kept is not None:
                task.reused = kept(device, device.planned(job), *current.at(job.size))
                task.cached = task.reused is not None
            if why is not None:
                reasons[why] += task.reused is None
            tasks.append(task)
    return tasks, reasons


def model_identity(info: ModelInfo) -> tuple:
    return (info.entry, info.weights_sha256, info.params)


def reusable(previous: Results, row: VariantResult, device: str, job: Job,
             current: ReuseKey) -> tuple[Latency | None, str]:
    """The previous measurement of this pair if it still holds, else None and why not."""
    prev = next((v for v in previous.variants if v.name == row.name and v.backend == row.backend), None)
    if prev is None:
        return None, "not in results.json"
    same = (model_identity(previous.model) == current.model if row.is_reference
            else row.sha256 is not None and prev.sha256 == row.sha256)
    if not same:
        return None, "artifact changed"
    lat = next((lat for lat in prev.latency if lat.device == device and lat.size == job.size), None)
    if lat is None or (lat.mean_ms is None and lat.accuracy is None):
        return None, "not measured there before"
    inputs_sha256, reference_sha256 = current.at(job.size)
    if lat.inputs_sha256 != inputs_sha256:
        return None, "evaluation inputs changed"
    if lat.reference_sha256 != reference_sha256:  # its accuracy would be computed against other labels
        return None, "float outputs or labels changed"
    if (lat.warmup, lat.iterations) != (job.warmup, job.iterations) or (job.threads and lat.threads != job.threads):
        return None, "latency settings changed"
    lat = lat.model_copy(deep=True)
    lat.notes.append(f"{REUSED_BY_RESUME} at {now_utc()} (measured {lat.measured_at})")
    return lat, "reused"


def measure_all(tasks: list[Task], settings: LatencySettings, progress: Progress) -> None:
    """Measure every task not reused: devices concurrently, each device one task at a time."""
    by_device: dict[str, list[Task]] = {}
    for task in tasks:
        if task.reused is None:
            by_device.setdefault(task.device.lock_key, []).append(task)
    if not by_device:
        return
    with ThreadPoolExecutor(max_workers=len(by_device), thread_name_prefix="edgeship-device") as pool:
        for future in [pool.submit(_device_worker, queue, settings, progress) for queue in by_device.values()]:
            future.result()


def _device_worker(queue: list[Task], settings: LatencySettings, progress: Progress) -> None:
    device = queue[0].device

    def waiting(holder: dict) -> None:
        progress.info(f"  {device.name} is busy ({describe(holder)}); waiting for it")

    try:
        for i, task in enumerate(queue):
            stopping.check()
            if i and settings.cooldown_s:
                stopping.pause(settings.cooldown_s)
            task.result = _locked_measure(task, settings, waiting)
            if i and settings.cooldown_s:
                task.result.latency.notes.append(f"{device.name} rested {settings.cooldown_s:g} s before this run")
            progress.info(f"  {task.label}: {summary(task.result.latency)}")
    finally:
        device.close()


def _locked_measure(task: Task, settings: LatencySettings, waiting: Callable[[dict], None]) -> Measurement:
    device = task.device
    try:
        with DeviceLock(device.lock_key, device.lock_timeout_s, on_wait=waiting):
            return measure(device, task.job, settings, task.workdir)
    except MeasurementError as e:  # the lock timed out: another build kept the device
        row = Latency(device=device.name, runtime=task.job.runtime, warmup=task.job.warmup,
                      iterations=task.job.iterations, threads=task.job.threads, measured_at=now_utc(),
                      emulated=device.emulation)
        row.notes.append(f"not measured: {e}")
        return Measurement(row, None)


def summary(lat: Latency) -> str:
    """One progress line's worth: p50 and cv, or mean only, or why it was not measured; for an
    emulated device, that its outputs came back (its time is the emulator's)."""
    if lat.emulated is not None and (lat.p50_ms is not None or lat.size):
        return f"outputs from the emulated CPU ({lat.emulated}); times are the emulator's, not the CPU's"
    if lat.p50_ms is not None:
        flag = " (unsteady)" if lat.cv_above_max else ""
        flag += f" (contended: {lat.other_cpu_load:.1f} CPUs busy with other work)" if lat.contended else ""
        return (f"p50 {lat.p50_ms:.3f} ms, cv {lat.cv:.3f}{flag}"
                + (f", {lat.attempts} attempts" if (lat.attempts or 1) > 1 else ""))
    if lat.mean_ms is not None:
        return f"mean {lat.mean_ms:.3f} ms (no per-run times)"
    if lat.size and not any(n.startswith("not measured") for n in lat.notes):
        return "outputs only (not timed)"
    return next((n for n in lat.notes if n.startswith("not measured")), "not measured")


def reuse_line(tasks: list[Task], reasons: Counter, source: Path) -> str:
    """The progress line of a resumed build: what was reused and why the rest is measured."""
    reused = [t.label for t in tasks if t.reused is not None]
    measured = ", ".join(f"{n} {why}" for why, n in reasons.items() if n and why != "reused")
    return (f"resume from {source}: reused {len(reused)} of {len(tasks)} measurement(s)"
            + (f" ({', '.join(reused)})" if reused else "") + (f"; measuring {measured}" if measured else ""))


def previous_results(path: Path, resume: bool, progress: Progress) -> Results | None:
    """The results.json a ``--resume`` build starts from (None: measure everything)."""
    if not resume:
        return None
    if not path.exists():
        progress.info(f"resume: no {path} yet; measuring everything")
        return None
    try:
        return Results.read(path)
    except (OSError, ValueError) as e:
        progress.info(f"resume: {path} cannot be read ({first_line(e)}); measuring everything")
        return None


def record_measurements(row: VariantResult, tasks: list[Task], ref: Reference, current: ReuseKey) -> None:
    """Put each task's latency row on the variant, in device order (a dynamic model's min and max
    sizes after), with the accuracy of that device's own outputs against the reference at that
    size; the variant's accuracy is the first device's at the opt size that returned outputs. The
    eager row gets its own checks (:func:`~edgeship.pipeline.validate.reference_gates`)."""
    first_outputs: dict[str | None, tuple[str, list]] = {}  # size -> (device, outputs): the first that returned some
    for task in tasks:
        lat = task.reused
        if lat is None:
            lat = task.result.latency
            lat.inputs_sha256, lat.reference_sha256 = current.at(task.job.size)
            if task.result.outputs is not None:
                sized = ref.at(task.job.size)
                lat.output_mismatch = mismatches(sized.signatures, task.result.outputs, row.precision)
                if not lat.output_mismatch:
                    lat.accuracy = accuracy_of(sized, task.result.outputs)[0]
                    if task.job.size in first_outputs:
                        lat.vs_first_device = device_agreement(*first_outputs[task.job.size], task.result.outputs)
                    else:
                        first_outputs[task.job.size] = (lat.device, task.result.outputs)
        row.latency.append(lat)
    first = next((lat for lat in row.latency if lat.accuracy is not None and lat.size is None), None)
    if first is not None:
        row.accuracy = first.accuracy
        labelled = ref.data.labels is not None and ref.judge.task == "classification"
        row.notes += [f"accuracy from outputs on {first.device}"] + accuracy_notes(first.accuracy, labelled)
    if row.is_reference:
        row.gates = reference_gates(ref, row.accuracy)


def device_agreement(device: str, first: list, outputs: list) -> DeviceAgreement:
    """``outputs`` against ``first`` (another device's outputs of the same artifact): equal bit for
    bit, else SQNR and the largest difference over every numeric output (None when they do not pair)."""
    a, b = _flat(first), _flat(outputs)
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b, strict=True)):
        return DeviceAgreement(device=device, equal=False)
    if all(np.array_equal(x, y) for x, y in zip(a, b, strict=True)):
        return DeviceAgreement(device=device, equal=True, max_abs_diff=0.0)
    ref = np.concatenate([x.astype(np.float64).ravel() for x in a]) if a else np.zeros(0)
    out = np.concatenate([y.astype(np.float64).ravel() for y in b]) if b else np.zeros(0)
    if not (np.isfinite(ref).all() and np.isfinite(out).all()):
        return DeviceAgreement(device=device, equal=False)
    return DeviceAgreement(device=device, equal=False, sqnr_db=sqnr_db(ref, out),
                           max_abs_diff=float(np.max(np.abs(out - ref))) if ref.size else None)


def _flat(outputs: list) -> list[np.ndarray]:
    """Every array of a runner's outputs (a ragged output is one array per sample), in order."""
    return [a for o in outputs for a in (o if isinstance(o, list) else [o])]


def unmeasured_devices(rows: list[VariantResult], devices: list[str]) -> list[str]:
    """Each requested device that measured nothing in this build (no timing for any variant, fresh
    or reused), as "requested device NAME measured nothing: why". A device that merely cannot run
    one runtime still measured the rest; an adb device's rows have timings without outputs, and
    count as measured."""
    out = []
    for name in devices:
        rows_there = [lat for row in rows for lat in row.latency if lat.device == name]
        if any(lat.p50_ms is not None or lat.mean_ms is not None for lat in rows_there):
            continue
        failed = [n.removeprefix("not measured: ") for lat in rows_there for n in lat.notes
                  if n.startswith("not measured")]
        skipped = [n.removeprefix(f"{name}: not measured here: ") for row in rows for n in row.notes
                   if n.startswith(f"{name}: not measured here: ")]
        if failed:
            why = failed[0]
        elif skipped:
            why = f"it can run none of this build's variants ({'; '.join(dict.fromkeys(skipped))})"
        else:
            why = "no variant was measured there"
        out.append(f"requested device {name} measured nothing: {why}")
    return out
