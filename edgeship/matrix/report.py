"""The matrix report: models × targets × devices, each with the fastest variant that passed its
gates on that device, its p50 and its accuracy, read from each build's results.json under --out;
``matrix.md`` for people, ``matrix.json`` for tools. A build that failed says why; a device a
build has no passing measurement on says that, never a number; a measurement the build reused
(stage cache, build --resume) is marked. Every name and message in matrix.md is escaped
(reports.markdown.md_text): a model, target, device or variant name is shown as written."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from edgeship.fsutil import atomic_write_text
from edgeship.matrix.outcome import CellResult
from edgeship.matrix.spec import Matrix
from edgeship.reports.markdown import md_text
from edgeship.reports.rows import reuse
from edgeship.results import Latency, Results, VariantResult

REPORT_MD, REPORT_JSON = "matrix.md", "matrix.json"
REUSED_MARK = "*"
REUSED_LEGEND = ("* not measured by this run's build: reused from the stage cache or kept by build --resume (the "
                 "build's report.md says which, results.json's measured_at when it was measured)")


def best_on(results: Results, device: str) -> tuple[VariantResult, Latency] | None:
    """The passing non-eager variant with the lowest p50 on ``device`` (its opt-size row), or None
    (also on an emulated device, whose times are the emulator's)."""
    best: tuple[VariantResult, Latency] | None = None
    for row in results.variants:
        if row.is_reference or not row.gates.passed:
            continue
        for lat in row.latency:
            if lat.device == device and lat.size is None and lat.timed:
                if best is None or lat.p50_ms < best[1].p50_ms:
                    best = (row, lat)
    return best


def no_best_why(results: Results | None, device: str) -> str:
    """Why no variant is the fastest on ``device``: an emulated device's times are no speed."""
    emulated = next((lat.emulated for row in (results.variants if results else []) for lat in row.latency
                     if lat.device == device and lat.emulated), None)
    if emulated:
        return f"{device} is emulated ({emulated}): its times are the emulator's, so no variant is fastest there"
    return "no passing variant measured"


def accuracy_text(results: Results, variant: VariantResult, device: str) -> str:
    """The variant's accuracy on ``device`` as the build's report shows it (reports/formatting.py: the
    task's headline metric, "not measured" / "not informative" instead of a number where the results
    hold none): classification top-1 and its drop where there are labels, else SQNR."""
    from edgeship.reports.formatting import (
        ACCURACY_LABELS,
        accuracy,
        headline_metric,
        measured,
        metric_label,
        task_metric,
        task_metric_names,
    )
    from edgeship.reports.rows import Build, Line

    line = Line(Build(results.model.name, results, ""), variant, variant.name)
    if line.task == "classification":
        top1 = accuracy(line, "top1", device)
        if measured(top1):
            return f"top-1 {top1.text} (drop {accuracy(line, 'top1_drop', device).text} points)"
        metric = "sqnr_db"
    else:
        metric = headline_metric(line.task, task_metric_names([line]))
    cell = accuracy(line, metric, device) if metric in ACCURACY_LABELS else task_metric(line, metric, device)
    return f"{metric_label(metric)} {cell.text}"


def matrix_rows(matrix: Matrix, out: Path, cells: list[CellResult]) -> list[dict[str, Any]]:
    rows = []
    for cell in cells:
        path = out / cell.folder / "results.json"
        results = Results.read(path) if path.exists() else None
        for device in matrix.devices:
            row: dict[str, Any] = {"model": cell.model, "target": cell.target, "device": device, "state": cell.state,
                                   "folder": cell.folder, "built_on": cell.node}
            found = best_on(results, device) if results is not None else None
            if found is None:
                why = cell.error.splitlines()[0] if cell.error and results is None else no_best_why(results, device)
                row.update(best=None, p50_ms=None, accuracy=None, why=why)
            else:
                variant, lat = found
                row.update(best=variant.name, backend=variant.backend, precision=variant.precision,
                           p50_ms=lat.p50_ms, runtime=lat.runtime, accuracy=accuracy_text(results, variant, device),
                           sha256=variant.sha256, reused=reuse(lat))
            rows.append(row)
    return rows


def write_matrix_report(matrix: Matrix, out: Path, cells: list[CellResult], engine: str, seconds: float) -> Path:
    """matrix.md and matrix.json in ``out``; returns the Markdown file's path."""
    rows = matrix_rows(matrix, out, cells)
    doc = {"matrix": str(matrix.path), "engine": engine, "seconds": round(seconds, 2),
           "builds": [asdict(c) for c in cells], "rows": rows}
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / REPORT_JSON, json.dumps(doc, indent=1) + "\n")
    atomic_write_text(out / REPORT_MD, "\n".join(matrix_markdown(matrix, cells, rows, engine, seconds)) + "\n")
    return out / REPORT_MD


def matrix_markdown(matrix: Matrix, cells: list[CellResult], rows: list[dict[str, Any]], engine: str,
                    seconds: float) -> list[str]:
    """matrix.md's lines: every name and message escaped (md_text), the reused measurements marked."""
    lines = [f"# Matrix {md_text(matrix.path.name)}", "",
             f"{len(cells)} builds ({_count(len(matrix.models), 'model')} × {_count(len(matrix.targets), 'target')}), "
             f"devices {md_text(', '.join(matrix.devices))}; {md_text(engine)}; {seconds:.1f} s.", "",
             "| model | target | device | best variant | p50 ms | accuracy | build |",
             "|---|---|---|---|---:|---|---|"]
    lines += [_table_row(r) for r in rows]
    if any(r.get("reused") for r in rows):
        lines += ["", md_text(REUSED_LEGEND)]
    failed = [c for c in cells if c.error]
    if failed:
        lines += ["", "## Builds that did not pass", ""]
        lines += [f"- {md_text(f'{c.model} × {c.target}: {c.state}: {c.error.splitlines()[0]}')}" for c in failed]
    return lines


def _table_row(r: dict[str, Any]) -> str:
    """One row of matrix.md's table; a reused measurement's p50 and accuracy marked."""
    def cell(text: object) -> str:
        return md_text(text, block_start=False)

    mark = REUSED_MARK if r.get("reused") else ""
    best = f"{r['best']} ({r['backend']} {r['precision']})" if r.get("best") else f"none: {r['why']}"
    p50 = f"{r['p50_ms']:.3f}{mark}" if r.get("p50_ms") is not None else "-"
    accuracy = f"{r['accuracy']}{mark}" if r.get("accuracy") else "-"
    build = f"{r['state']}{' on ' + r['built_on'] if r.get('built_on') else ''}"
    return "| " + " | ".join(cell(t) for t in (r["model"], r["target"], r["device"], best, p50, accuracy, build)) + " |"


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"
