"""The short table printed at the end of a build: variant, size, the task's headline accuracy
(top-1 for classification, mAP@0.5 vs float for detection, ...) and, for embeddings, the nearest
neighbour's recall@1 against float, SQNR, p50 per device, then per device (not emulated) the load
+ first inference and the memory the runtime added.

A figure this build did not measure (reused from the stage cache, or kept by build --resume from the
folder's previous results.json) carries a mark (``*``, ``^``), and a caption under the table says
what the mark means: a reused number never passes for a fresh one.

Names (variants, devices, the model, gate failures) are :class:`rich.text.Text`, never markup: a
``[bold]`` or ``[/]`` in one is shown as written (rich would style it, or stop on a closing tag).
"""
from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from edgeship.reports.formatting import headline_metric, metric_label, metric_text
from edgeship.reports.markdown import visible
from edgeship.reports.rows import accuracy_row, reuse
from edgeship.results import Accuracy, Latency, Results, VariantResult

SECOND = {"embedding": "recall_at_1_vs_float"}  # a task's second figure, shown where results hold it
MARKS = {"cache": "*", "resume": "^"}  # rows.reuse's kinds
CAPTIONS = {
    "cache": "not measured by this build: reused from the stage cache, measured by an earlier build on this machine "
             "(measured_at in results.json); --remeasure measures again",
    "resume": "not measured by this build: kept by build --resume from this folder's previous results.json "
              "(measured_at there); --remeasure measures again",
}


def results_table(results: Results) -> Table:
    """One row per variant; one p50 column per device measured; for an emulated device, whose
    times are the emulator's, the SQNR of its own outputs instead."""
    devices = list(dict.fromkeys(lat.device for v in results.variants for lat in v.latency))
    emulated = {lat.device for v in results.variants for lat in v.latency if lat.emulated is not None}
    headline, second = _headline(results), _second(results)
    table = Table(title=_text(f"{results.model.name} on {results.target}"), title_justify="left",
                  caption=_caption(results), caption_justify="left")
    figures = [metric_label(headline), *([metric_label(second)] if second else []), "SQNR dB"]
    for column in ("variant", "backend", "precision", "size", *figures):
        table.add_column(_text(column), justify="left" if column in ("variant", "backend", "precision") else "right")
    for d in devices:
        table.add_column(_text(f"SQNR dB {d} (emulated)" if d in emulated else f"p50 ms {d}"), justify="right")
    timed = [d for d in devices if d not in emulated]  # an emulator's load and memory are its own
    for d in timed:
        table.add_column(_text(f"load + 1st ms {d}"), justify="right")
        table.add_column(_text(f"memory {d}"), justify="right")
    table.add_column("gates")
    for v in results.variants:
        cells = _accuracy(v, headline)
        if second:
            cells = (cells[0], _unusable(v.accuracy) or _headline_text(v.accuracy, second), cells[1])
        texts = [v.name, v.backend, v.precision, _size(v.size_bytes), *_marked(accuracy_row(v), cells),
                 *[_marked(_row(v, d), [_device_sqnr(v, d) if d in emulated else _p50(v, d)])[0] for d in devices],
                 *[cell for d in timed for cell in _marked(_row(v, d), [_cold_start(v, d), _memory(v, d)])]]
        table.add_row(*map(_text, texts), _gates(v))
    return table


def _row(v: VariantResult, device: str) -> Latency | None:
    """The row the device's cells are read from (the first on it: the opt size's)."""
    return next((lat for lat in v.latency if lat.device == device), None)


def _marked(lat: Latency | None, cells: list[str] | tuple[str, ...]) -> list[str]:
    """``cells`` (figures from ``lat``), each one holding a figure followed by ``lat``'s reuse mark."""
    mark = MARKS.get(reuse(lat) or "", "")
    return [f"{c}{mark}" if mark and c not in ("-", "not measured", "not informative") else c for c in cells]


def _caption(results: Results) -> Text | None:
    """What the reuse marks in the table mean, one line for each kind present, and for a build --variant
    which rows it built; None when there is nothing to say."""
    kinds = {reuse(lat) for v in results.variants for lat in v.latency if lat.size is None} - {None}  # rows shown
    lines = [f"{MARKS[k]} {CAPTIONS[k]}" for k in MARKS if k in kinds]
    if results.requested_variants is not None:
        kept = [v.name for v in results.variants if not results.built(v)]
        lines.append(f"built: {', '.join(results.requested_variants)} (build --variant)" + (
            f"; kept from the earlier build in this folder (they do not decide the exit status): {', '.join(kept)}"
            if kept else ""))
    return _text("\n".join(lines)) if lines else None


def print_results(results: Results, console: Console | None = None) -> None:
    console = console or Console()
    if not console.is_terminal:
        console.width = max(console.width, 180)  # a log file or pipe: do not wrap the table
    console.print(results_table(results))


def _text(value: str) -> Text:
    """A cell or heading shown as written (no markup, no control characters)."""
    return Text(visible(value))


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / 1024:.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.2f} MiB"


def _headline(results: Results) -> str:
    """The accuracy field or task metric the table shows beside SQNR (top1 for classification)."""
    task = results.model.task
    if task == "classification":
        return "top1"
    present = [k for v in results.variants if v.accuracy and v.accuracy.task for k in v.accuracy.task.values]
    return headline_metric(task, present)


def _second(results: Results) -> str | None:
    """The task's second figure when any variant's results hold it (recall@1 for embeddings)."""
    name = SECOND.get(results.model.task)
    held = any(v.accuracy and v.accuracy.task and v.accuracy.task.values.get(name) is not None
               for v in results.variants)
    return name if name and held else None


def _accuracy(v: VariantResult, headline: str) -> tuple[str, ...]:
    a = v.accuracy
    unusable = _unusable(a)
    if unusable is not None:
        return unusable, unusable
    return _headline_text(a, headline), _sqnr_text(a)


def _unusable(a: Accuracy | None) -> str | None:
    """The cell for an accuracy block without a usable figure, or None."""
    if a is None:
        return "-"
    if not a.informative:
        return "not informative"
    return "NaN/inf" if a.non_finite else None


def _sqnr_text(a: Accuracy) -> str:
    if a.sqnr_db is not None:
        return f"{a.sqnr_db:.1f}"
    return "exact" if a.max_abs_err == 0.0 else "-"


def _headline_text(a: Accuracy, headline: str) -> str:
    if headline == "top1":
        return "-" if a.top1 is None else f"{100 * a.top1:.2f}%"
    value = a.cosine if headline == "cosine" else (a.task.values.get(headline) if a.task else None)
    return "-" if value is None else metric_text(headline, value)


def _device_sqnr(v: VariantResult, device: str) -> str:
    """The SQNR of the outputs ``device`` returned (the eager float model runs on the host only)."""
    row = next((lat for lat in v.latency if lat.device == device), None)
    if v.is_reference:
        return "-"
    if row is None or row.accuracy is None:
        return "not measured"
    return _unusable(row.accuracy) or _sqnr_text(row.accuracy)


def _p50(v: VariantResult, device: str) -> str:
    row = next((lat for lat in v.latency if lat.device == device), None)
    if row is None or row.p50_ms is None:
        return "not measured"
    return f"{row.p50_ms:.3f}"


def _cold_start(v: VariantResult, device: str) -> str:
    """The artifact's load + the first inference after it (``12.3 + 4.5``), ``-`` for a part not measured
    (report.md says why)."""
    row = next((lat for lat in v.latency if lat.device == device), None)
    if row is None or (row.load_ms is None and row.first_inference_ms is None):
        return "not measured"
    return " + ".join("-" if t is None else f"{t:.1f}" for t in (row.load_ms, row.first_inference_ms))


def _memory(v: VariantResult, device: str) -> str:
    """The runner's peak resident memory above its memory before the runtime's import."""
    row = next((lat for lat in v.latency if lat.device == device), None)
    if row is None or row.rss_over_baseline_mb is None:
        return "not measured"
    return f"+{row.rss_over_baseline_mb:.0f} MiB"


def _gates(v: VariantResult) -> Text:
    if v.is_reference and v.gates.passed:
        return Text("reference")
    if v.gates.passed and not v.gates.checked:
        return Text("not measured", style="yellow")
    if v.gates.passed:
        return Text("pass", style="green")
    return Text.assemble(("FAIL", "red"), " ", _text("; ".join(v.gates.failures)[:80]))
