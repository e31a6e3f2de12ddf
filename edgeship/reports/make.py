"""Making reports: report.md, report.html and results.csv written from results files and, with a
results store, compared across devices and builds."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from edgeship.config import usable_folder
from edgeship.errors import ReportError
from edgeship.fsutil import atomic_write_text
from edgeship.reports.compare import Comparison, compare, describe, store_rows
from edgeship.reports.csvfile import render_csv
from edgeship.reports.render import render_html, render_markdown
from edgeship.reports.rows import Report, load_builds

REPORT_FILES = ("report.md", "report.html", "results.csv")
DEFAULT_OUT = Path("artifacts") / "report"


@dataclass
class WrittenReport:
    """The files written, what was compared (regressions included), and notes for the reader (a
    results store at an older revision, read as it is)."""

    paths: list[Path]
    comparison: Comparison
    notes: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[str]:
        return [describe(c) for c in self.comparison.regressions]


def write_reports(report: Report, out_dir: Path, comparison: Comparison | None = None) -> list[Path]:
    """Write report.md, report.html and results.csv into ``out_dir`` (atomically); return their paths."""
    texts = (render_markdown(report, comparison), render_html(report, comparison), render_csv(report))
    paths = [Path(out_dir) / name for name in REPORT_FILES]
    for path, text in zip(paths, texts):
        atomic_write_text(path, text)
    return paths


def make_report(paths: list[Path], out: Path | None = None, db: str | None = None, model: str | None = None,
                target: str | None = None, threshold_pct: float = 10.0, top1_tolerance: float = 0.0) -> WrittenReport:
    """Report on results files and, with ``db``, the results store; compare devices and builds."""
    if not paths and db is None:
        raise ReportError("edgeship report: give one or more results.json files, or --db URL")
    if threshold_pct < 0 or top1_tolerance < 0:
        raise ReportError(f"--threshold {threshold_pct} / --top1-tolerance {top1_tolerance}: must be 0 or more")
    builds = load_builds([Path(p) for p in paths])
    notes: list[str] = []
    rows, sources = store_rows(builds, db, model, target, notes)  # a store it cannot read: no folder made
    comparison = compare(rows, sources, threshold_pct, top1_tolerance)
    if out is None:
        out = Path(paths[0]).parent if len(paths) == 1 and db is None else DEFAULT_OUT
    usable_folder(Path(out), "report folder (--out)")
    return WrittenReport(write_reports(Report.of(builds), Path(out), comparison), comparison, notes)
