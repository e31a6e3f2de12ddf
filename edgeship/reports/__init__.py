"""Renderings of results: the console table, report.md, report.html (with charts) and results.csv,
and comparisons across devices and builds (from results files and the results store)."""
from __future__ import annotations

from edgeship.reports.compare import Comparison, compare, store_rows
from edgeship.reports.make import REPORT_FILES, WrittenReport, make_report, write_reports
from edgeship.reports.rows import Build, Report, load_builds

__all__ = ["REPORT_FILES", "Build", "Comparison", "Report", "WrittenReport", "compare", "load_builds", "make_report",
           "store_rows", "write_reports"]
