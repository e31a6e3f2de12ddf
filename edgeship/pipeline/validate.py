"""Validation: run each artifact on each device, compare its outputs with the float model's,
summarize its timings; the profile's gates are judged from those figures in ``gates.py``.

Measuring is the runner's job (on the device); this module only sends jobs and judges what comes
back. The host computes accuracy from the returned outputs the same way for every device.
"""
from __future__ import annotations

import functools
import hashlib
import io
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edgeship import metrics, stopping
from edgeship.cache import Cache, CacheEntry
from edgeship.calibration import Dataset, random_dataset
from edgeship.calibration.datasets import load_sized
from edgeship.devices import Device, Job
from edgeship.devices.base import JobResult, MeasurementError, RunnerError, TransportError
from edgeship.devices.runner import decode_outputs, encode_outputs, load_npz, merge_batches
from edgeship.errors import DataError, ModelSpecError, first_line
from edgeship.model import call_model
from edgeship.outputs import OutputSignature, flatten, signature_of
from edgeship.pipeline.gates import NON_FINITE, NOT_INFORMATIVE
from edgeship.profile import LatencySettings
from edgeship.results import Accuracy, CpuFacts, GateResult, Latency, OutputAccuracy, TaskAccuracy, now_utc
from edgeship.shapes import is_dynamic
from edgeship.tasks.evaluate import Output, TaskJudge, task_anchors

if TYPE_CHECKING:
    import torch

    from edgeship.model import LazyModel
    from edgeship.pipeline.plan import Plan
    from edgeship.spec import ModelSpec

SIZE_SAMPLES = 8  # evaluation samples at a dynamic model's min and max sizes
FACTS, INPUTS, OUTPUTS, ANCHORS = "facts.json", "eval_inputs.npz", "reference.npz", "anchors.npy"  # reference entry
REPRODUCE_MIN_SQNR_DB = 40.0  # a float model against itself: ~130 dB; a differently initialised one: ~0 dB


@dataclass
class Reference:
    """The float model's outputs on the evaluation samples (flattened, by name), the samples as a
    runner input, and the spec's task that judges outputs against them."""

    data: Dataset
    outputs: list[Output]       # per output: an array [N, ...], or one array per sample (ragged)
    names: list[str]
    inputs_npz: Path
    judge: TaskJudge
    batch: int = 1
    sizes: dict[str, Reference] = field(default_factory=dict)  # a dynamic model's min and max sizes

    def at(self, size: str | None) -> Reference:
        """The reference at ``size`` (None or "opt": this one)."""
        return self if size in (None, "opt") else self.sizes[size]

    @property
    def primary_index(self) -> int:
        return self.judge.primary()

    @property
    def primary(self) -> Output:
        """The output the accuracy block's top-level figures are of."""
        return self.outputs[self.primary_index]

    @functools.cached_property
    def signatures(self) -> list[OutputSignature]:
        return [signature_of(n, o, self.batch) for n, o in zip(self.names, self.outputs)]

    @functools.cached_property
    def problem(self) -> str | None:
        """Why comparing outputs with these proves nothing, or None: the primary output's values
        (:func:`metrics.uninformative_reason`, for outputs of a fixed length), then what the task reads
        from all of them (:meth:`TaskJudge.uninformative`: detections whose order is arbitrary)."""
        if not isinstance(self.primary, list):
            reason = metrics.uninformative_reason(self.primary, self.data.inputs)
            if reason is not None:
                return reason
        return self.judge.uninformative(self.outputs)

    @functools.cached_property
    def sha256(self) -> str:
        """sha256 of the float outputs (names, dtypes, shapes, bytes) and the labels: what every
        accuracy figure is computed against."""
        h = hashlib.sha256()
        arrays = [(f"{name}.{k}", a) for name, value in zip(self.names, self.outputs)
                  for k, a in (enumerate(value) if isinstance(value, list) else [("all", value)])]
        for name, a in arrays + [("labels", self.data.labels)]:
            if a is not None:
                a = np.ascontiguousarray(a)
                h.update(f"{name}:{a.dtype.str}:{a.shape};".encode())
                h.update(a.tobytes())
        return h.hexdigest()

    def non_finite(self) -> int:
        return sum(metrics.non_finite_count(a) for value in self.outputs
                   for a in (value if isinstance(value, list) else [value]))


def float_outputs(module: torch.nn.Module, data: Dataset, batch: int,
                  source: str = "") -> tuple[list[str], list[Output]]:
    """The float module's outputs over the evaluation samples (in batches of the spec's batch size),
    flattened and named (:mod:`edgeship.outputs`); what the model raises on them, or an output
    that is not a tensor, is a ModelSpecError naming the spec (``source``)."""
    import torch

    per_batch, names = [], None
    with torch.inference_mode():
        for part in data.batches(batch):
            flat = flatten(call_model(module, {k: torch.from_numpy(a) for k, a in part.items()}, source))
            for name, value in flat:
                if not isinstance(value, torch.Tensor):
                    raise ModelSpecError(f"{source or 'model spec'}: the model's output {name} is a "
                                         f"{type(value).__name__}; edgeship compares tensor outputs")
            names = names or [name for name, _ in flat]
            per_batch.append([value.detach().numpy() for _, value in flat])
            stopping.progressed()  # a batch evaluated: the stage's watchdog waits from here
    try:
        return names, merge_batches(per_batch, batch, len(data))
    except RuntimeError as e:
        raise ModelSpecError(f"{source or 'model spec'}: {e}") from None


def reference_stage(model: LazyModel, evaluation: Callable[[Plan], Dataset], plan: Plan, key: Mapping[str, object],
                    cache: Cache, workdir: Path) -> Reference:
    """The evaluation samples and the float outputs on them, from the stage cache when the model
    and data are unchanged (then the model is not loaded); ``model.counts`` get params and FLOPs."""
    spec, batch = model.spec, int(model.spec.inputs[0].shape[0])

    def compute(folder: Path) -> None:
        data = evaluation(plan)
        module, _ = model.module, model.params  # counted once loaded: the stage's time limit grows with them
        stopping.progressed()  # the model loaded: the stage's watchdog waits from here
        names, outputs = float_outputs(module, data, batch, spec.source)
        labels = {} if data.labels is None else {"labels": data.labels}
        np.savez(folder / OUTPUTS, **encode_outputs(outputs), **labels)
        np.savez(folder / INPUTS, **data.inputs)
        anchors = task_anchors(spec)
        if anchors is not None:
            np.save(folder / ANCHORS, anchors)
        sized_data = size_datasets(plan, spec)
        for size, sized in sized_data.items():
            sized_names, sized_outputs = float_outputs(model.module, sized, batch, spec.source)
            if sized_names != names:
                raise ModelSpecError(f"{spec.source or 'model spec'}: at the {size} size the model returns outputs "
                                     f"{', '.join(sized_names)}, at the opt size {', '.join(names)}")
            (folder / size).mkdir()
            np.savez(folder / size / OUTPUTS, **encode_outputs(sized_outputs))
            np.savez(folder / size / INPUTS, **sized.inputs)
        facts = {"params": model.params, "flops": model.flops, "source": data.source,
                 "state_sha256": model.state_sha256, "names": names,
                 "sizes": {size: sized.source for size, sized in sized_data.items()}}
        (folder / FACTS).write_text(json.dumps(facts))

    kept = cache.read_or_compute("reference", key, compute, lambda entry: KeptReference.read(entry, workdir),
                                 redo="computing the float reference again")
    facts = kept.facts
    model.counts.update({"params": facts["params"], "flops": facts["flops"]})
    model.expect_state(facts.get("state_sha256"))  # a model built later in this build must be the same
    judge = TaskJudge(spec, facts["names"], kept.anchors)
    try:
        judge.check()
    except ValueError as e:
        raise ModelSpecError(str(e)) from None
    ref = Reference(Dataset(kept.inputs, kept.labels, facts["source"]), kept.outputs, facts["names"],
                    workdir / INPUTS, judge, batch)
    check_labels(ref)
    for size, source in facts.get("sizes", {}).items():
        inputs, outputs = kept.sizes[size]
        ref.sizes[size] = Reference(Dataset(inputs, None, source), outputs, ref.names, workdir / size / INPUTS,
                                    judge, batch)
    return ref


@dataclass
class KeptReference:
    """What the stage cache's reference entry holds, each file read once through the entry and checked
    against its signed sha256 list (a file swapped after ``Cache.get`` checked the entry is caught where it
    is read): the facts, the evaluation inputs (memory-mapped from the checked copy in the build's work
    folder, which the runners read too), the float outputs and labels, the task's anchors, and a dynamic
    model's (inputs, outputs) at its min and max sizes."""

    facts: dict[str, Any]
    inputs: dict[str, np.ndarray]
    outputs: list[Output]
    labels: np.ndarray | None
    anchors: np.ndarray | None
    sizes: dict[str, tuple[dict[str, np.ndarray], list[Output]]]

    @classmethod
    def read(cls, entry: CacheEntry, workdir: Path) -> KeptReference:
        """The entry's reference (EntryDamaged when a file is not the one signed); the evaluation inputs
        are copied, checked, into ``workdir`` (and ``workdir/<size>``)."""
        facts = json.loads(entry.read_bytes(FACTS))
        entry.copy_file(INPUTS, workdir / INPUTS)
        inputs = load_npz(workdir / INPUTS)  # paged in where used: a large set is not read whole
        outputs, labels = _outputs(entry.read_bytes(OUTPUTS))
        anchors = np.load(io.BytesIO(entry.read_bytes(ANCHORS)), allow_pickle=False) if ANCHORS in entry.files \
            else None
        sizes = {}
        for size in facts.get("sizes", {}):
            entry.copy_file(f"{size}/{INPUTS}", workdir / size / INPUTS)
            with np.load(workdir / size / INPUTS, allow_pickle=False) as npz:
                sized_inputs = {name: npz[name] for name in npz.files}
            sizes[size] = (sized_inputs, _outputs(entry.read_bytes(f"{size}/{OUTPUTS}"))[0])
        return cls(facts, inputs, outputs, labels, anchors, sizes)


def _outputs(data: bytes) -> tuple[list[Output], np.ndarray | None]:
    """The float outputs and the labels (None without) in a reference.npz's bytes."""
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        return decode_outputs(npz), (npz["labels"] if "labels" in npz.files else None)


def size_datasets(plan: Plan, spec: ModelSpec) -> dict[str, Dataset]:
    """Samples at the min and max sizes of a model with dynamic dimensions (none otherwise): the
    spec's ``[data] sizes`` callable's, else seeded random ones. Every artifact is run at both, so
    a range it cannot take fails the variant, and its accuracy there is judged."""
    if not is_dynamic(spec):
        return {}
    settings = plan.profile.evaluation
    n = min(settings.random_samples, SIZE_SAMPLES)
    if plan.sizes_source:
        return {size: load_sized(plan.sizes_source, spec, size, SIZE_SAMPLES) for size in ("min", "max")}
    return {size: random_dataset(spec, n, settings.seed, size) for size in ("min", "max")}


def check_labels(ref: Reference) -> None:
    """DataError naming the data source when the labels do not fit the task: class indices in
    ``[0, values per sample)`` of the primary output (classification), integer masks [N, H, W] of
    the primary output's size (segmentation), boxes [N, M, 5] of (x1, y1, x2, y2, class) as
    :func:`edgeship.tasks.evaluate.labelled_boxes` reads them (detection), group ids [N]
    (embedding: samples that belong together); other tasks read no labels."""
    labels, source, task = ref.data.labels, ref.data.source, ref.judge.task
    if labels is None or not len(ref.data):
        return
    if task not in ("classification", "segmentation", "detection", "embedding"):
        raise DataError(f"{source}: has labels (y), but task {task} reads none; remove y, or set the model spec's task")
    if task == "detection":
        try:
            ref.judge.ground_truth(labels, ref.outputs)
        except ValueError as e:
            raise DataError(f"{source}: {e}") from None
        return
    outputs = ref.primary
    if task == "embedding":
        if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
            raise DataError(f"{source}: embedding labels (y) must be integer group ids [N], one per sample (samples "
                            f"with the same id belong together); got {labels.dtype} {list(labels.shape)}")
        return
    if task == "segmentation":
        if labels.ndim != 3 or isinstance(outputs, list) or labels.shape != (outputs.shape[0], *outputs.shape[2:]):
            want = "[N, H, W]" if isinstance(outputs, list) else f"{[outputs.shape[0], *outputs.shape[2:]]}"
            raise DataError(f"{source}: segmentation labels (y) must be class masks {want} like the output "
                            f"{ref.names[ref.primary_index]}'s argmax; got shape {list(labels.shape)}")
        if np.issubdtype(labels.dtype, np.inexact) and not np.array_equal(labels, np.round(labels)):
            raise DataError(f"{source}: segmentation labels (y) hold fractional values; masks are integer class "
                            "indices")
        return
    if labels.ndim != 1:
        raise DataError(f"{source}: labels (y) have shape {list(labels.shape)}; classification labels are class "
                        "indices [N] (masks [N, H, W] are for task segmentation, boxes [N, M, 5] for detection)")
    classes = int(np.prod(outputs.shape[1:]))
    bad = metrics.out_of_range_labels(labels, classes)
    if bad.size:
        count = int(np.count_nonzero((labels < 0) | (labels >= classes)))
        shown = ", ".join(str(v) for v in bad[:8].tolist()) + (", ..." if bad.size > 8 else "")
        raise DataError(f"{source}: labels (y) must be class indices in [0, {classes}) (the float model's output "
                        f"has {classes} values per sample); {count} of {len(labels)} are not: {shown}")


@dataclass
class Measurement:
    """One (variant, device) measurement: latency row and the outputs it produced (flattened)."""

    latency: Latency
    outputs: list[Output] | None


def measure(device: Device, job: Job, settings: LatencySettings, workdir: Path,
            sleep: Callable[[float], None] = stopping.pause) -> Measurement:
    """Run a job on a device; a failure becomes a latency row with no numbers and the reason.

    A job whose connection dropped (TransportError) is started again up to ``device.retries``
    times, waiting ``device.backoff_s`` and then twice as long before each next try.
    """
    row = Latency(device=device.name, runtime=job.runtime, warmup=job.warmup, size=job.size,
                  iterations=job.iterations, threads=job.threads, measured_at=now_utc(), emulated=device.emulation)
    result = _run_with_retries(device, job, workdir, row, sleep)
    if result is None:
        return Measurement(row, None)
    doc = result.document
    row.runtime = doc.get("runtime_version", job.runtime)
    row.threads = doc.get("threads", job.threads)
    row.warmup, row.iterations = doc.get("warmup", row.warmup), doc.get("iterations", row.iterations)
    row.import_ms, row.load_ms, row.first_inference_ms = doc.get("import_ms"), doc.get("load_ms"), \
        doc.get("first_inference_ms")
    row.peak_rss_mb, row.rss_over_baseline_mb = doc.get("peak_rss_mb"), doc.get("rss_over_baseline_mb")
    row.cpu = CpuFacts.from_document(doc.get("cpu"))
    where = doc.get("ray")  # measured through Ray (edgeship matrix on a cluster): on which node
    row.node = f"{where['hostname']} (Ray node {where['node_id'][:12]})" if where else None
    row.node_interval = [where["started"], where["ended"]] if where else None
    row.notes.extend(doc.get("notes", []) + result.notes)
    if not doc.get("summary_ms") and not doc["timings_ms"]:  # an outputs-only job (a size other than opt)
        row.notes.append(f"outputs only at the {job.size or 'given'} size: latency is timed at the opt size "
                         "(latency.sizes = \"all\" times every size)")
        return Measurement(row, result.outputs or None)
    stats = doc.get("summary_ms") or metrics.latency_stats(doc["timings_ms"])  # summary: trtexec's own
    for key in ("p50_ms", "p90_ms", "p99_ms", "mean_ms", "std_ms", "cv"):
        setattr(row, key, stats.get(key))
    if row.emulated is None:  # how steady or shared an emulator's time was says nothing of the CPU
        flag_unsteady(row, settings.max_cv)
        flag_contended(row, doc.get("other_cpu_load"))
    return Measurement(row, result.outputs or None)


def _run_with_retries(device: Device, job: Job, workdir: Path, row: Latency,
                      sleep: Callable[[float], None]) -> JobResult | None:
    delay = device.backoff_s
    for attempt in range(1, device.retries + 2):
        row.attempts = attempt
        try:
            return _run_once(device, job, workdir)
        except TransportError as e:
            if attempt > device.retries:
                row.notes.append(f"not measured: {e} (gave up after {attempt} attempts)")
                return None
            row.notes.append(f"attempt {attempt} failed: {e}; retried after {delay:g} s")
            sleep(delay)
            delay *= 2
        except MeasurementError as e:
            row.notes.append(f"not measured: {e}")
            row.run_error = str(e) if isinstance(e, RunnerError) else None
            return None
    return None


def _run_once(device: Device, job: Job, workdir: Path) -> JobResult:
    """``device.run_job``; Interrupted instead when the command is being stopped, before or after it
    (a runner the signal stopped is not a failed measurement, and its result is not kept)."""
    stopping.check()
    try:
        with stopping.running_on(device):
            return device.run_job(job, workdir)
    finally:
        stopping.check()


CONTENDED_CPU_LOAD = 0.5  # other processes' CPUs' worth of work during the timing that marks it shared


def flag_contended(row: Latency, other_cpu_load: float | None) -> None:
    """Mark a measurement taken while other processes kept the device's CPUs busy: on 2 cores, a
    2-thread runtime timed beside one busy process waits for its threads at every parallel region
    (a model of many small operators measured 70x slower that way here)."""
    row.other_cpu_load = other_cpu_load
    if other_cpu_load is None:
        return
    row.contended = other_cpu_load >= CONTENDED_CPU_LOAD
    if row.contended:
        row.notes.append(f"contended: other processes kept {other_cpu_load:.1f} CPU(s) busy on {row.device} while "
                         "it was timed; the latency is not the artifact's alone: measure on a quiet device")


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
    return ref.data.inputs_sha256()


def reference_fingerprint(ref: Reference) -> str:
    """sha256 of the float outputs and labels (``latency[].reference_sha256``; --resume compares it)."""
    return ref.sha256


def accuracy_of(ref: Reference, outputs: list[Output]) -> tuple[Accuracy, list[str]]:
    """The accuracy block for an artifact's ``outputs`` (flattened, in the float model's order, with
    the same signature: :func:`edgeship.outputs.mismatches` first) against the float outputs, with
    notes on null fields; not informative (with the reason) when the float outputs carry no information."""
    per = [output_accuracy(n, r, o) for n, r, o in zip(ref.names, ref.outputs, outputs)]
    i, task = ref.primary_index, ref.judge.task
    base = {"samples": len(ref.data), "output": ref.names[i], "outputs": per}
    bad = sum(p.non_finite or 0 for p in per)
    if bad or ref.non_finite():
        accuracy = Accuracy(**base, non_finite=bad)
    elif task == "classification" and not isinstance(ref.primary, list) and per[i].note is None:
        values = metrics.accuracy(ref.primary, outputs[i].reshape(ref.primary.shape), ref.data.labels)
        accuracy = Accuracy(**{**values, **base})
    else:
        accuracy = Accuracy(**base, sqnr_db=per[i].sqnr_db, cosine=per[i].cosine, max_abs_err=per[i].max_abs_err,
                            non_finite=0, task=task_accuracy(ref, outputs))
    if ref.problem is not None:
        accuracy.informative, accuracy.uninformative_reason = False, ref.problem
    return accuracy, accuracy_notes(accuracy, ref.data.labels is not None and task == "classification")


def output_accuracy(name: str, ref: Output, out: Output) -> OutputAccuracy:
    """One output's element-wise figures; outputs whose length varies by sample have none (the
    task's metrics judge them), integer outputs the share of equal elements."""
    if isinstance(ref, list) or isinstance(out, list):
        return OutputAccuracy(name=name, non_finite=sum(metrics.non_finite_count(a) for a in out),
                              note="the length varies by sample: no element-wise figures (the task's metrics judge it)")
    out = out.reshape(ref.shape)
    bad = metrics.non_finite_count(out)
    if bad or metrics.non_finite_count(ref):
        return OutputAccuracy(name=name, non_finite=bad, note="non-finite values: no figures")
    err = float(np.max(np.abs(out.astype(np.float64) - ref.astype(np.float64)))) if ref.size else 0.0
    if not np.issubdtype(ref.dtype, np.inexact):
        return OutputAccuracy(name=name, max_abs_err=err, equal=float(np.mean(ref == out)) if ref.size else 1.0,
                              non_finite=0, note="integer output: compared element by element (equal)")
    return OutputAccuracy(name=name, sqnr_db=metrics.sqnr_db(ref, out), cosine=metrics.cosine(ref, out),
                          max_abs_err=err, non_finite=0)


def task_accuracy(ref: Reference, outputs: list[Output]) -> TaskAccuracy | None:
    """The task's metrics; a task that cannot read the outputs gets no values and the reason."""
    try:
        found = ref.judge.metrics(ref.outputs, outputs, ref.data.labels)
    except ValueError as e:
        return TaskAccuracy(task=ref.judge.task, notes={"error": first_line(e)})
    return None if found is None else TaskAccuracy(**found.to_json())


def accuracy_notes(accuracy: Accuracy, has_labels: bool) -> list[str]:
    """Why fields of an accuracy block are null, and why its figures may prove nothing."""
    notes = []
    if accuracy.non_finite:
        notes.append(f"{NON_FINITE.format(n=accuracy.non_finite)}: no accuracy figure is computed from them")
    elif accuracy.sqnr_db is None and accuracy.max_abs_err == 0.0:
        notes.append("sqnr_db is null: outputs are identical to the float model's (infinite SQNR)")
    if not accuracy.informative:
        notes.append(f"{NOT_INFORMATIVE}: {accuracy.uninformative_reason}; the figures prove nothing")
    if not has_labels and accuracy.task is None:
        notes.append("top1 is null: the evaluation data has no labels")
    if accuracy.task is not None:
        notes += [f"{accuracy.task.task} {name} is null: {why}" for name, why in accuracy.task.notes.items()]
    return notes


def reference_gates(ref: Reference, accuracy: Accuracy | None) -> GateResult:
    """The eager row's own checks: the float outputs are finite, and the float model run by the
    eager runner (a fresh process) reproduces them; otherwise no comparison in the build holds."""
    failures = []
    bad = ref.non_finite()
    if bad:
        failures.append(f"the float model's {NON_FINITE.format(n=bad)}")
    elif accuracy is not None and not _reproduces(accuracy):
        sqnr = "n/a" if accuracy.sqnr_db is None else f"{accuracy.sqnr_db:.1f} dB"
        failures.append(f"the float model built again in the eager runner does not reproduce the build's float "
                        f"outputs (SQNR {sqnr}, agreement {accuracy.agreement}): its construction is not "
                        "deterministic; give a weights file, or build the module from the spec's seed only")
    return GateResult(passed=not failures, failures=failures)


def _reproduces(accuracy: Accuracy) -> bool:
    """Every output of the eager runner's float model matches the build's: element-wise outputs to
    REPRODUCE_MIN_SQNR_DB, integer outputs exactly, varying-length outputs by the task's metrics.
    Detections decoded on the host from outputs that reproduce are not judged again: a score at the
    decoder's threshold or an NMS tie can flip between two runs whose arithmetic differs only in
    order (another thread count), which is no sign of a model built differently."""
    if accuracy.non_finite:
        return False
    alone = OutputAccuracy(name="", sqnr_db=accuracy.sqnr_db, max_abs_err=accuracy.max_abs_err)
    outputs = accuracy.outputs or [alone]
    for out in outputs:
        if out.equal is not None and out.equal < 1.0:
            return False
        if out.equal is None and out.note is None and not (
                out.max_abs_err == 0.0 if out.sqnr_db is None else out.sqnr_db >= REPRODUCE_MIN_SQNR_DB):
            return False
    ragged = any(out.sqnr_db is None and out.max_abs_err is None and out.equal is None for out in outputs)
    if ragged and accuracy.task is not None and accuracy.task.task == "detection":
        return accuracy.task.values.get("recall_vs_float") in (None, 1.0) and \
            accuracy.task.values.get("precision_vs_float") in (None, 1.0)
    return True
