"""The closing block's list of docs blocks not run, with their reasons (a pytest plugin that
tests/conftest.py loads). Each page's test records its skipped blocks on its report, which also
reaches the controller of a pytest-xdist run."""
from __future__ import annotations

PROPERTY = "docs_blocks_skipped"


def skipped_lines(reports) -> list[str]:
    """One line per skipped block of the pages that ran: page:line, its first line and the reason."""
    lines = []
    for report in reports:
        for name, value in getattr(report, "user_properties", ()):
            if name == PROPERTY:
                lines += [f"  {where}: `{first}`: {reason}" for where, first, reason in value]
    return sorted(set(lines))


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if hasattr(config, "workerinput"):
        return
    reports = [r for key in ("passed", "failed") for r in terminalreporter.stats.get(key, [])
               if getattr(r, "when", None) == "call"]
    lines = skipped_lines(reports)
    if lines:
        terminalreporter.section("docs blocks not run here (tests/docs, <!-- test: skip -->)")
        terminalreporter.write_line(f"{len(lines)} block(s) of the pages tested were skipped by their pages:")
        for line in lines:
            terminalreporter.write_line(line)
