"""The text of each report cell, from the results: a formatted number, or "not measured" and why.

Shared by the Markdown, HTML and CSV writers so that each shows the same thing.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from edgeship.backends.fallback import FALLBACKS
from edgeship.reports.rows import (
    Line,
    Report,
    Shown,
    accuracy_row,
    reuse,
    why_no_accuracy,
    why_no_field,
    why_no_latency,
)
from edgeship.results import Accuracy, Latency, Results

NOT_MEASURED = "not measured"
EMULATED = "emulated"  # a latency cell of an emulated device: the time is the emulator's
NOT_INFORMATIVE = "not informative"
NON_FINITE = "NaN/inf"
REUSED_WHY = ("measured by an earlier build on this machine (its measured_at in results.json) and reused from the "
              "stage cache: the same file, inputs, float outputs and latency settings")
RESUMED_WHY = ("measured by the build that wrote this folder before (its measured_at in results.json) and kept by "
               "build --resume: the same artifact, inputs, float outputs and latency settings")
REUSE_WHY = {"cache": REUSED_WHY, "resume": RESUMED_WHY}  # rows.reuse's kinds


def ms(value: float) -> str:
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def size_text(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.2f} MiB"


def size(line: Line) -> Shown:
    v = line.variant
    if v.is_reference:
        return Shown("—")
    if v.size_bytes is None:
        return Shown(NOT_MEASURED, f"{v.name} was not built: {v.error}" if v.error else "no artifact recorded")
    return Shown(size_text(v.size_bytes))


def built(line: Line) -> Shown:
    """Seconds lowering took (a compiled package's compile included); for an artifact reused from the stage
    cache, the seconds of the build that lowered it, marked so."""
    v = line.variant
    if v.is_reference:
        return Shown("—")
    seconds = v.lowering.seconds
    if seconds is None:
        return Shown("not recorded")
    return Shown(f"{seconds:.1f} s" + (" (cached)" if v.lowering.reused else ""))


def latency(line: Line, device: str, key: str = "p50_ms") -> Shown:
    lat = line.latency(device)
    value = getattr(lat, key) if lat is not None else None
    if lat is not None and lat.emulated is not None and key.endswith("_ms"):
        return Shown(EMULATED, why_no_latency(line, device))
    if value is None:
        return Shown(NOT_MEASURED, why_no_latency(line, device))
    return Shown(ms(value), reused_why(lat))


def reused_why(lat: Latency | None) -> str | None:
    """The footnote of a number another build measured (reused from the stage cache, or kept from the
    folder's previous results.json by build --resume), else None."""
    kind = reuse(lat)
    return REUSE_WHY[kind] if kind else None


def with_reuse(shown: Shown, line: Line, device: str | None = None) -> Shown:
    """``shown`` (a figure computed from outputs) with the reuse footnote when an earlier build
    measured those outputs; its own note, if any, kept before it."""
    why = reused_why(accuracy_row(line.variant, device))
    if why is None:
        return shown
    return Shown(shown.text, f"{shown.why}; {why}" if shown.why else why)


def measured(shown: Shown) -> bool:
    """Whether a cell shows a figure (perhaps with a note), not why there is none."""
    return shown.text not in (NOT_MEASURED, NOT_INFORMATIVE, NON_FINITE, EMULATED)


def mib(value: float) -> str:
    """Memory above a baseline: ``+38 MiB``, ``+2.4 MiB``."""
    return f"+{value:.1f} MiB" if value < 10 else f"+{value:.0f} MiB"


def cold_start(line: Line, device: str) -> Shown:
    """The "load" cell: the artifact's load and the first inference after it, ``12.3 + 4.5 ms``; the
    part not measured says so, with the reason."""
    lat = line.latency(device)
    if lat is not None and lat.emulated is not None:
        return Shown(EMULATED, why_no_latency(line, device))
    load = lat.load_ms if lat is not None else None
    first = lat.first_inference_ms if lat is not None else None
    if load is None and first is None:
        return Shown(NOT_MEASURED, why_null(line, device, "load_ms"))
    if first is None:
        return Shown(f"{ms(load)} ms + {NOT_MEASURED}", why_null(line, device, "first_inference_ms"))
    if load is None:
        return Shown(f"{NOT_MEASURED} + {ms(first)} ms", why_null(line, device, "load_ms"))
    return Shown(f"{ms(load)} + {ms(first)} ms", reused_why(lat))


def memory(line: Line, device: str) -> Shown:
    """The "memory" cell: the runner's peak resident memory above its memory before the runtime's
    import (``+38 MiB``); under an emulator the process is the emulator's, so its memory is not shown."""
    lat = line.latency(device)
    if lat is not None and lat.emulated is not None:
        return Shown(EMULATED, f"{device} is emulated ({lat.emulated}): the process measured is the emulator's, "
                               "its memory includes the emulator's own")
    if lat is None or lat.rss_over_baseline_mb is None:
        return Shown(NOT_MEASURED, why_null(line, device, "rss_over_baseline_mb"))
    return Shown(mib(lat.rss_over_baseline_mb), reused_why(lat))


def why_null(line: Line, device: str, key: str) -> str:
    """Why the latency row of ``line`` on ``device`` has no ``key``: the runner's note naming it, why the
    row has no timings, or that it was recorded by an edgeship that did not measure ``key``."""
    lat = line.latency(device)
    if lat is None or (lat.p50_ms is None and lat.load_ms is None):
        return why_no_latency(line, device)
    return lat.unmeasured_why(key) or (f"results.json has no {key} for {line.variant.name} on {device}: measured "
                                       "by an edgeship that did not record it")


def speedup(report: Report, line: Line, device: str) -> Shown:
    """Eager p50 / this p50, both on ``device`` in the same build (> 1: faster than eager)."""
    if line.variant.is_reference:
        return Shown("1.00×" if line.p50(device) is not None else "—")
    mine = line.p50(device)
    if mine is None:
        return Shown(NOT_MEASURED, why_no_latency(line, device))
    eager = report.eager(line)
    base = eager.p50(device) if eager else None
    if base is None:
        return Shown(NOT_MEASURED, f"the float model was not timed on {device} in build {line.build.label}"
                                   + (f": {why_no_latency(eager, device)}" if eager else ""))
    return Shown(f"{base / mine:.2f}×")


def relative(line: Line, device: str, first: str) -> Shown:
    """p50 on ``device`` / p50 on the first device: how many times slower (> 1) or faster."""
    mine, base = line.p50(device), line.p50(first)
    if mine is None:
        return Shown(NOT_MEASURED, why_no_latency(line, device))
    if base is None:
        return Shown(NOT_MEASURED, why_no_latency(line, first))
    return Shown(f"{mine / base:.2f}×")


def accuracy(line: Line, key: str, device: str | None = None) -> Shown:
    """top1, top1_drop, agreement, sqnr_db or cosine of ``line``, formatted; "not informative" (never
    a number) when the float model's outputs carry no information, "NaN/inf" for non-finite outputs."""
    acc = line.accuracy(device)
    unusable = _unusable(line, acc)
    if unusable is not None:
        return unusable
    value = getattr(acc, key)
    if value is None and not (key == "sqnr_db" and acc.max_abs_err == 0.0):
        return Shown(NOT_MEASURED, _primary_note(acc, key) or why_no_field(line, key))
    return with_reuse(Shown(_accuracy_text(key, value)), line, device)


def _accuracy_text(key: str, value: float | None) -> str:
    """An accuracy field's value as reports print it; None: an SQNR of outputs equal to the float model's."""
    if value is None:
        return "exact"
    if key in ("top1", "agreement"):
        return f"{100 * value:.2f}%"
    if key == "top1_drop":
        return f"{value:.2f}"
    return f"{value:.4f}" if key == "cosine" else f"{value:.1f}"


def _unusable(line: Line, acc: Accuracy | None) -> Shown | None:
    """The cell for an accuracy block that holds no usable figure (absent, not informative,
    non-finite outputs); None when its figures can be shown."""
    if acc is None:
        return Shown(NOT_MEASURED, why_no_accuracy(line))
    if not acc.informative:
        return Shown(NOT_INFORMATIVE, f"accuracy not informative: {acc.uninformative_reason}")
    if acc.non_finite:
        return Shown(NON_FINITE, f"{line.variant.name}: outputs contain {acc.non_finite} non-finite values (NaN or "
                                 "inf); no accuracy figure is computed from them")
    return None


def _primary_note(acc: Accuracy, key: str) -> str | None:
    """Why the primary output has no element-wise ``key`` (e.g. its length varies by sample)."""
    out = next((o for o in acc.outputs if o.name == acc.output), None)
    if key in ("sqnr_db", "cosine") and out is not None and out.note:
        return f"output {out.name}: {out.note}"
    return None


def gates(line: Line) -> Shown:
    v = line.variant
    if v.is_reference and v.gates.passed:
        return Shown("reference")
    if v.gates.passed and not v.gates.checked:
        return Shown("not measured")
    return Shown("pass" if v.gates.passed else "FAIL: " + "; ".join(v.gates.failures))


# The task's metrics (results.json accuracy.task), and the tables built on them.

ACCURACY_LABELS = {"top1": "top-1", "top1_drop": "top-1 drop (pts)", "sqnr_db": "SQNR (dB)", "agreement": "agreement",
                   "cosine": "cosine"}
# Every task metric the pipeline writes, in the order reports show them; mapN stands for any IoU threshold.
TASK_METRICS = ("map50_vs_float", "recall_vs_float", "precision_vs_float", "mean_iou_vs_float", "map50_vs_labels",
                "recall_vs_labels", "precision_vs_labels", "mean_iou_vs_labels", "miou_vs_float", "pixel_agreement",
                "miou_vs_labels", "pixel_accuracy_vs_labels", "cosine_mean", "cosine_worst", "recall_at_1_vs_float",
                "spearman_vs_float", "recall_at_1_vs_labels")
# The columns a task's Variants table always has (accuracy fields or task metrics), headline first.
TASK_COLUMNS = {"classification": ("top1", "top1_drop", "sqnr_db", "agreement"), "generic": ("sqnr_db", "cosine"),
                "detection": ("map50_vs_float", "recall_vs_float"),
                "segmentation": ("miou_vs_float", "pixel_agreement"),
                "embedding": ("cosine_mean", "cosine_worst")}
TASK_EXPLAINED = {
    "detection": "Detections of each variant matched against the float model's (vs float) and the labelled "
                 "boxes (vs labels); a detection matches when its IoU is the threshold or more (mAP@0.5: 0.5).",
    "segmentation": "Each pixel's class from each variant against the float model's (mIoU vs float, pixel "
                    "agreement) and against the labelled masks (vs labels).",
    "embedding": "Cosine similarity of each sample's embedding with the float model's (mean and worst sample); "
                 "recall@1: the share of samples whose nearest other sample is the one the float model finds (vs "
                 "float) or is in their own group of the data's labels (vs labels); Spearman: rank correlation of "
                 "all pairwise similarities with the float model's.",
    "generic": "Outputs compared element by element with the float model's.",
}
_MAP = re.compile(r"map(\d+)_vs_(\w+)")


def metric_label(name: str) -> str:
    """A column header: ``map50_vs_float`` -> "mAP@0.5 vs float", ``miou_vs_labels`` -> "mIoU vs labels"."""
    if name in ACCURACY_LABELS:
        return ACCURACY_LABELS[name]
    found = _MAP.fullmatch(name)
    if found:
        return f"mAP@{int(found[1]) / 100:g} vs {found[2]}"
    words = {"miou": "mIoU", "iou": "IoU", "spearman": "Spearman"}
    return " ".join(words.get(w, w) for w in name.replace("recall_at_1", "recall@1").split("_"))


def metric_text(name: str, value: float) -> str:
    """A task metric's value: cosines as they are, shares (mAP, recall, IoU, agreement) in percent."""
    if name.startswith(("cosine", "spearman")):
        return f"{value:.4f}"
    if _rank(name) < len(TASK_METRICS):
        return f"{100 * value:.2f}%"
    return f"{value:.4g}"  # a metric this edgeship does not know: its scale is unknown


def headline_metric(task: str, present: list[str]) -> str:
    """The one figure that sums up a task's accuracy (top1 for classification, cosine for generic)."""
    if task == "generic" or task not in TASK_COLUMNS:
        return "cosine"
    return _with_map_threshold(list(TASK_COLUMNS[task]), present)[0]


def task_metric(line: Line, name: str, device: str | None = None) -> Shown:
    """One task metric of ``line``, or why it is not there (the results' own note when it is null).
    A number the results annotate (e.g. mIoU over one class only) is shown with that note."""
    acc = line.accuracy(device)
    unusable = _unusable(line, acc)
    if unusable is not None:
        return unusable
    task = acc.task
    if task is None:
        return Shown(NOT_MEASURED, f"results.json holds no {line.task} metrics for {line.variant.name}")
    value = task.values.get(name)
    note = task.notes.get(name)
    if value is not None:
        return with_reuse(Shown(metric_text(name, value), f"{task.task} {name}: {note}" if note else None), line,
                          device)
    if name in task.values:
        return Shown(NOT_MEASURED, f"{task.task} {name} is null: {note or 'no reason recorded'}")
    if "error" in task.notes:
        return Shown(NOT_MEASURED, f"{task.task} metrics not computed: {task.notes['error']}")
    return Shown(NOT_MEASURED, f"this variant's results.json holds no {task.task} {name}")


def variant_cell(line: Line, key: str) -> Shown:
    """A Variants-table cell: an accuracy field (top1, sqnr_db, ...) or a task metric."""
    return accuracy(line, key) if key in ACCURACY_LABELS else task_metric(line, key)


@dataclass
class TaskTable:
    """The Variants table of the builds of one task: its accuracy columns as (header, key)."""

    task: str
    lines: list[Line]
    columns: list[tuple[str, str]]
    note: str


def task_tables(report: Report) -> list[TaskTable]:
    """One Variants table per task, in the order the tasks first appear."""
    by_task: dict[str, list[Line]] = {}
    for ln in report.lines:
        by_task.setdefault(ln.task, []).append(ln)
    return [TaskTable(task, lines, [(metric_label(k), k) for k in task_columns(task, lines)],
                      _task_note(task, lines)) for task, lines in by_task.items()]


def task_columns(task: str, lines: list[Line]) -> list[str]:
    """The task's own columns, then every other task metric the lines' results hold, then SQNR
    (of the primary output) for tasks whose columns are task metrics."""
    present = _present_metrics(lines)
    keys = _with_map_threshold(list(TASK_COLUMNS.get(task, ())), present)
    if task in ("classification", "generic"):
        return keys
    return sorted(dict.fromkeys(keys + present), key=_rank) + ["sqnr_db"]


def task_metric_names(lines: list[Line]) -> list[str]:
    """Every task metric any line's results hold, known ones in TASK_METRICS order."""
    return sorted(_present_metrics(lines), key=_rank)


def _present_metrics(lines: list[Line]) -> list[str]:
    accuracies = [a for ln in lines for a in [ln.variant.accuracy, *(lat.accuracy for lat in ln.variant.latency)]]
    names = [k for a in accuracies if a is not None and a.task is not None for k in [*a.task.values, *a.task.notes]]
    return [k for k in dict.fromkeys(names) if k != "error"]


def _with_map_threshold(keys: list[str], present: list[str]) -> list[str]:
    """``keys`` with map50_vs_float replaced by the mAP the results hold (e.g. map75_vs_float)."""
    held = next((k for k in present if _MAP.fullmatch(k) and k.endswith("_vs_float")), "map50_vs_float")
    return [held if k == "map50_vs_float" else k for k in keys]


def _rank(name: str) -> int:
    known = _MAP.sub(lambda m: f"map50_vs_{m[2]}", name)
    return TASK_METRICS.index(known) if known in TASK_METRICS else len(TASK_METRICS)


def _task_note(task: str, lines: list[Line]) -> str:
    """What the task's columns mean, and which output the element-wise figures are of."""
    primaries = {}
    for ln in lines:
        acc = ln.variant.accuracy
        if acc is not None and acc.output and len(model_outputs(ln.build.results)) > 1:
            primaries.setdefault(ln.build.results.model.name, acc.output)
    what = {"classification": "top-1, agreement and SQNR are", "generic": "SQNR and cosine are"}.get(task, "SQNR is")
    where = "; ".join(f"{out} ({model})" if len(primaries) > 1 else out for model, out in primaries.items())
    return " ".join(filter(None, [TASK_EXPLAINED.get(task, ""), f"The {what} of output {where}." if where else ""]))


# Per-output figures, for models with more than one output.

@dataclass
class OutputTable:
    """Variant x output figures of the builds of one model whose outputs are ``outputs``."""

    model: str
    outputs: list[str]
    lines: list[Line]
    note: str

    @property
    def title(self) -> str:
        """The model and the builds the table covers."""
        return f"{self.model} ({', '.join(dict.fromkeys(ln.build.label for ln in self.lines))})"


@dataclass
class DeviceAccuracyTable:
    """The accuracy of each variant's outputs on each device that returned some, side by side (an
    emulated Arm CPU's kernels beside this machine's): ``columns`` are (header, key)."""

    task: str
    devices: list[str]
    columns: list[tuple[str, str]]
    lines: list[Line]


def device_accuracy_tables(report: Report) -> list[DeviceAccuracyTable]:
    """One table per task where two or more devices returned outputs; none otherwise."""
    tables = []
    for table in task_tables(report):
        devices = [d for d in report.devices
                   if any(lat.device == d and lat.accuracy is not None and not lat.size
                          for ln in table.lines for lat in ln.variant.latency)]
        if len(devices) < 2:
            continue
        keys = ["top1", "sqnr_db"] if table.task == "classification" else [table.columns[0][1], "sqnr_db"]
        lines = [ln for ln in table.lines if not ln.variant.is_reference]
        columns = [(metric_label(k), k) for k in keys] + [(f"vs {devices[0]}, SQNR", "vs_first")]
        tables.append(DeviceAccuracyTable(table.task, devices, columns, lines))
    return tables


def device_accuracy_cell(line: Line, key: str, device: str) -> Shown:
    """``key`` of the outputs ``line`` returned on ``device`` (never the variant's own figure);
    ``vs_first``: how close they are to the first device's outputs of the same artifact."""
    lat = line.latency(device)
    if lat is None or lat.accuracy is None:
        return Shown(NOT_MEASURED, why_no_accuracy_on(line, device))
    if key == "vs_first":
        agree = lat.vs_first_device
        if agree is None:
            return Shown("-")
        if agree.equal:
            return Shown("bit-equal")
        return Shown(f"{agree.sqnr_db:.1f} dB" if agree.sqnr_db is not None else NOT_MEASURED,
                     None if agree.sqnr_db is not None else f"the outputs on {device} and {agree.device} do not pair")
    return accuracy(line, key, device) if key in ACCURACY_LABELS else task_metric(line, key, device)


def why_no_accuracy_on(line: Line, device: str) -> str:
    lat = line.latency(device)
    if lat is None:
        return why_no_latency(line, device)
    return "; ".join(n for n in lat.notes if n.startswith("not measured")) or (
        f"{device} returned no outputs for {line.variant.name}" + (f": {lat.run_error}" if lat.run_error else ""))


def fallbacks(report: Report) -> list[tuple[str, str]]:
    """(variant, note) for every vendor step that crashed and was run its documented other way
    (``lowering.details.fallbacks``: see backends/fallback.py)."""
    found = []
    for line in report.lines:
        records = line.variant.lowering.details.get(FALLBACKS) or []
        found += [(line.name, str(r["note"])) for r in records if isinstance(r, dict) and r.get("note")]
    return found


def cpu_choices(report: Report) -> list[tuple[str, str]]:
    """(variant, why) for every setting a quantizer chose from the target CPUs (the ``*_reason``
    entries of ``lowering.details.quantization``, each backend's own: see its ``cpu.py``)."""
    found = []
    for line in report.lines:
        quantization = line.variant.lowering.details.get("quantization") or {}
        found += [(line.name, str(why)) for key, why in sorted(quantization.items()) if key.endswith("_reason")]
    return found


def model_outputs(results: Results) -> list[dict[str, Any]]:
    """The model's outputs (name, shape, dtype, ragged), or their names from the accuracy blocks of
    results written before model.outputs listed them all."""
    if results.model.outputs:
        return results.model.outputs
    acc = next((v.accuracy for v in results.variants if v.accuracy is not None and v.accuracy.outputs), None)
    return [{"name": o.name} for o in acc.outputs] if acc else []


def output_tables(report: Report) -> list[OutputTable]:
    """One table per model with more than one output, in the order the models first appear."""
    groups: dict[tuple[str, tuple[str, ...]], OutputTable] = {}
    for ln in report.lines:
        outputs = model_outputs(ln.build.results)
        if len(outputs) < 2:
            continue
        names = tuple(o["name"] for o in outputs)
        model = ln.build.results.model.name
        table = groups.setdefault((model, names), OutputTable(model, list(names), [], _outputs_note(outputs)))
        table.lines.append(ln)
    return list(groups.values())


def output_cell(line: Line, name: str) -> Shown:
    """One output of ``line`` against the float model's: SQNR (dB), "exact", or the share of equal
    elements (integer outputs); "not measured" with the results' note (e.g. length varies by sample)."""
    acc = line.accuracy()
    if acc is None or not acc.informative:
        return _unusable(line, acc)
    out = next((o for o in acc.outputs if o.name == name), None)
    if out is None:
        return Shown(NOT_MEASURED, f"results.json holds no figures for output {name} of {line.variant.name}")
    if out.non_finite:
        return Shown(NON_FINITE, f"{line.variant.name}: output {name} contains {out.non_finite} non-finite values "
                                 "(NaN or inf)")
    if out.equal is not None:
        return with_reuse(Shown(f"{100 * out.equal:.2f}% equal"), line)
    if out.sqnr_db is not None or out.max_abs_err == 0.0:
        return with_reuse(Shown(_accuracy_text("sqnr_db", out.sqnr_db)), line)
    return Shown(NOT_MEASURED, f"output {name}: {out.note}" if out.note
                 else f"results.json has sqnr_db = null for output {name} of {line.variant.name}")


def _outputs_note(outputs: list[dict[str, Any]]) -> str:
    def described(o: dict[str, Any]) -> str:
        shape = o.get("shape")
        dims = "" if shape is None else " [" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
        ragged = " (length varies by sample)" if o.get("ragged") else ""
        return f"{o['name']} {o.get('dtype', '')}{dims}".rstrip() + ragged

    return ("SQNR (dB) of each output against the same output of the float model; integer outputs: the share of "
            "equal elements. Outputs: " + "; ".join(described(o) for o in outputs) + ".")
