"""report.md and report.html: devices side by side, reasons for what was not measured, no network."""
from __future__ import annotations

import re
from pathlib import Path

from edgeship.reports import Report, load_builds
from edgeship.reports.render import render_html, render_markdown
from tests.reports.builds import DEVICES


def test_build_writes_reports_even_when_it_exits_3(two_device_build: Path) -> None:
    for name in ("report.md", "report.html", "results.csv"):
        assert (two_device_build / name).stat().st_size > 0


def test_markdown_puts_the_devices_side_by_side(two_device_build: Path) -> None:
    text = (two_device_build / "report.md").read_text()
    a, b = DEVICES
    header = next(line for line in text.splitlines() if line.startswith("| variant | " + f"{a} p50"))
    assert f"| {b} p50 | {b} p90 | {b} speed-up vs eager | {b} / {a} |" in header
    rows = [line for line in text.splitlines() if line.startswith("| executorch-fp32 |")]
    # variants, accuracy per device, latency, load and memory
    assert len(rows) == 4 and rows[2].count("|") == header.count("|")
    assert rows[1].endswith("| bit-equal |")  # the same file's outputs on the second device: bit for bit the first's
    assert "## Same artifact on several devices" in text and "## Accuracy on each device" in text


def test_markdown_shows_each_devices_load_and_memory(two_device_build: Path) -> None:
    """A load column (the load + the first inference, in ms) and a memory column (the peak above the
    runner's memory before the runtime's import) per device, from the build's own rows."""
    text = (two_device_build / "report.md").read_text()
    a, b = DEVICES
    section = text.split("## Load and memory")[1].split("\n## ")[0]
    assert f"| variant | {a} load + first inference | {a} memory | {b} load + first inference | {b} memory |" in section
    row = next(line for line in section.splitlines() if line.startswith("| executorch-fp32 |"))
    cells = [c.strip() for c in row.strip("|").split("|")][1:]
    assert len(cells) == 4
    for load, memory in (cells[:2], cells[2:]):
        assert re.fullmatch(r"\d+\.\d+ \+ \d+\.\d+ ms", load) and re.fullmatch(r"\+\d+(\.\d)? MiB", memory), cells
    failed = next(line for line in section.splitlines() if line.startswith("| too-old |"))
    assert failed.count("not measured [1]") == 4  # its reason: not built


def test_markdown_lists_each_not_measured_reason_once(two_device_build: Path) -> None:
    text = (two_device_build / "report.md").read_text()
    notes = text.split("## Not measured")[1].split("##")[0]
    items = [line for line in notes.splitlines() if re.match(r"\d+\. ", line)]
    assert len(items) == 1 and items[0].startswith("1. too-old was not built: lowering failed")
    assert text.count("not measured [1]") >= 5


def test_html_loads_nothing_from_outside_the_page(two_device_build: Path) -> None:
    html = render_html(Report.of(load_builds([two_device_build / "results.json"])))
    assert "<script" not in html and "<link" not in html and "@import" not in html
    assert not re.search(r"""(src|href)\s*=\s*["'](?!#)""", html), "every link stays inside the page"
    assert "default-src 'none'" in html and html.count("<svg") == 3
    assert 'title="too-old was not built: lowering failed' in html


def test_markdown_escapes_pipes_in_reasons(two_device_build: Path) -> None:
    results = load_builds([two_device_build / "results.json"])
    results[0].results.variant("too-old").error = "a | b"
    text = render_markdown(Report.of(results))
    assert "too-old was not built: a \\| b" in text


def test_report_into_an_unusable_folder_exits_2_naming_it(two_device_build: Path, tmp_path: Path, capsys) -> None:
    from edgeship.cli import main

    (tmp_path / "afile").write_text("mine")
    for out, says in ((tmp_path / "afile", "is a file; expected a folder"), (Path("/proc/edgeship-report"),
                                                                             "cannot be written")):
        assert main(["report", str(two_device_build / "results.json"), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"report folder (--out) {out}: {says}" in err and "Traceback" not in err
    assert (tmp_path / "afile").read_text() == "mine"
