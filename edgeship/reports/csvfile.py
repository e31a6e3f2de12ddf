"""results.csv: one row per (variant, device), every measured field, for spreadsheets and scripts.

Empty cells are values that were not measured; the ``not_measured`` column says why. Accuracy that
is not informative (``accuracy_informative`` false: the float model's outputs carry no information)
leaves the accuracy cells empty too, with the reason. A variant measured on no device gets one row
with an empty device.

Columns added after the first ones go at the end: ``task``, ``accuracy_output`` (the output the
accuracy columns are of), ``output_mismatch``, and one column per task metric (``map50_vs_float``,
``miou_vs_float``, ``cosine_mean``, ...; empty where the build's task has no such metric, or it is
null: ``not_measured`` then says why), ``lowering_seconds`` (how long lowering took: an ahead-of-time
compile, a quantization; for an artifact reused from the stage cache, the lowering build's),
``lowering_reused``, ``import_ms``, ``first_inference_ms`` and ``rss_over_baseline_mb`` (cold start and
the runtime's memory: results.json's fields), ``measurement_reused`` (``stage cache`` or ``build --resume``
for a row this build did not measure, else empty). A metric this edgeship does not list gets a column
after those.

A text cell that a spreadsheet would run as a formula (starting with ``=``, ``+``, ``-``, ``@``, a
tab, a carriage return or a line feed: a device, variant or error text from a shared build folder)
is written with a leading ``'`` (OWASP's CSV-injection advice), a carriage return in a text as a
line feed (quoted); numbers are written as they are.
"""
from __future__ import annotations

import csv
import io

from edgeship.reports.formatting import TASK_METRICS, task_metric_names
from edgeship.reports.rows import Line, Report, reuse, why_mismatch, why_no_accuracy, why_no_latency
from edgeship.results import Accuracy, Latency

BUILD = ["build", "target", "model", "created"]
VARIANT = ["variant", "backend", "precision", "quantization", "file", "size_bytes", "sha256"]
LATENCY = ["device", "runtime", "threads", "warmup", "iterations", "p50_ms", "p90_ms", "p99_ms", "mean_ms",
           "std_ms", "cv", "load_ms", "peak_rss_mb", "measured_at", "emulated"]
ACCURACY = ["samples", "top1", "top1_drop", "agreement", "sqnr_db", "cosine", "max_abs_err"]
COLUMNS = BUILD + VARIANT + LATENCY + ["speedup_vs_eager"] + ACCURACY + ["accuracy_informative", "gates_passed",
                                                                         "gate_failures", "not_measured"]
COLUMNS += ["task", "accuracy_output", "output_mismatch", *TASK_METRICS, "lowering_seconds", "lowering_reused"]
COLD = ["import_ms", "first_inference_ms", "rss_over_baseline_mb"]  # cold start and the runtime's memory
COLUMNS += COLD + ["measurement_reused"]
REUSED = {"cache": "stage cache", "resume": "build --resume"}  # rows.reuse's kinds


def render_csv(report: Report) -> str:
    """The CSV text for every (variant, device) of the report."""
    out = io.StringIO()
    extra = [k for k in task_metric_names(report.lines) if k not in COLUMNS]
    writer = csv.DictWriter(out, fieldnames=COLUMNS + extra, lineterminator="\n", restval="")
    writer.writeheader()
    for line in report.lines:
        for device in report.devices or [None]:
            row = csv_row(report, line, device)
            if row is not None:
                writer.writerow({key: inert(value) for key, value in row.items()})
    return out.getvalue()


FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")


def inert(value: object) -> object:
    """``value``, or a text that a spreadsheet would take for a formula with ``'`` in front. A
    carriage return in a text becomes a line feed: the writer's line ends are ``\\n``, so only a
    ``\\n`` gets the cell quoted (a bare ``\\r`` would end the row for a reader)."""
    if not isinstance(value, str):
        return value
    value = value.replace("\r\n", "\n").replace("\r", "\n") if "\r" in value else value
    return "'" + value if value.startswith(FORMULA_START) else value


def csv_row(report: Report, line: Line, device: str | None) -> dict[str, object] | None:
    """One row, or None when the variant has measurements but not on this device's build."""
    v = line.variant
    measured_devices = {lat.device for x in line.build.results.variants for lat in x.latency}
    if device is not None and device not in measured_devices:
        return None
    lat = line.latency(device) if device else None
    row: dict[str, object] = {"build": line.build.label, "target": line.build.results.target,
                           "model": line.build.results.model.name, "created": line.build.results.created}
    row.update({k: getattr(v, k) for k in VARIANT if k != "variant"}, variant=v.name)
    row.update({k: getattr(lat, k) if lat else None for k in LATENCY + COLD}, device=device)
    row["speedup_vs_eager"] = _speedup(report, line, lat)
    row["lowering_seconds"] = v.lowering.seconds if not v.is_reference else None
    row["lowering_reused"] = v.lowering.reused if not v.is_reference else None
    acc = line.accuracy(device)
    row.update({k: getattr(acc, k) if acc and acc.informative else None for k in ACCURACY})
    row["accuracy_informative"] = acc.informative if acc else None
    row["gates_passed"] = v.gates.passed if v.gates.checked else ""  # empty: not measured, nothing judged
    row["gate_failures"] = "; ".join(v.gates.failures)
    row["not_measured"] = _why(line, device, lat, acc)
    row.update(task=line.task, accuracy_output=acc.output if acc else None,
               output_mismatch="; ".join(lat.output_mismatch) if lat else None)
    row.update(_task_values(acc))
    row["measurement_reused"] = REUSED.get(reuse(lat) or "", "")
    return row


def _task_values(acc: Accuracy | None) -> dict[str, float | None]:
    """The task's metrics; none when the accuracy is not informative (as the accuracy columns)."""
    if acc is None or not acc.informative or acc.task is None:
        return {}
    return dict(acc.task.values)


def _speedup(report: Report, line: Line, lat: Latency | None) -> float | None:
    eager = report.eager(line)
    if lat is None or not lat.timed or eager is None:
        return None
    base = eager.p50(lat.device)
    return base / lat.p50_ms if base is not None else None


def _why(line: Line, device: str | None, lat: Latency | None, acc: Accuracy | None) -> str:
    reasons = []
    if device is None or lat is None or not lat.timed:
        reasons.append(why_no_latency(line, device) if device else why_no_accuracy(line))
    else:
        reasons += [lat.unmeasured_why(k) for k in ["load_ms", *COLD] if getattr(lat, k) is None
                    and lat.unmeasured_why(k)]
    if lat is not None and lat.output_mismatch:
        reasons.append(why_mismatch(lat))
    elif acc is None and line.variant.error is None:
        reasons.append(why_no_accuracy(line))
    elif acc is not None and not acc.informative:
        reasons.append(f"accuracy not informative: {acc.uninformative_reason}")
    elif acc is not None and acc.non_finite:
        reasons.append(f"outputs contain {acc.non_finite} non-finite values (NaN or inf)")
    elif acc is not None and acc.task is not None:
        reasons += _task_nulls(acc.task.task, acc.task.values, acc.task.notes)
    return "; ".join(dict.fromkeys(reasons))


def _task_nulls(task: str, values: dict[str, float | None], notes: dict[str, str]) -> list[str]:
    """Why the task's metrics are null (notes on a metric that has a value are not reasons)."""
    out = [f"{task} metrics not computed: {notes['error']}"] if "error" in notes and "error" not in values else []
    return out + [f"{task} {k} is null: {why}" for k, why in notes.items() if k in values and values[k] is None]
