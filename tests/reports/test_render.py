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
    notes = text.split("## Notes")[1].split("##")[0]
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


def _tags_and_text(html: str) -> tuple[list[tuple[str, dict[str, str | None]]], str]:
    """Every start tag (name, attributes) of ``html`` and its text, whitespace collapsed."""
    from html.parser import HTMLParser

    tags: list[tuple[str, dict[str, str | None]]] = []
    text: list[str] = []

    class Reader(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            tags.append((tag, dict(attrs)))

        def handle_data(self, data: str) -> None:
            text.append(data)

    Reader(convert_charrefs=True).feed(html)
    return tags, " ".join("".join(text).split())


def test_report_md_and_html_show_every_field_as_text_when_it_holds_markdown_or_html() -> None:
    """Markdown, HTML and math in every string of the results (names, backend, precision, created,
    devices, runtimes, notes, failures, toolchain): report.md rendered as GitHub does (CommonMark
    with tables) and report.html gain no heading, link, image, emphasis, list or quote; each shows
    the value, on one line, as it was written."""
    from markdown_it import MarkdownIt

    from edgeship.reports import compare, store_rows
    from edgeship.reports.rows import Build
    from tests.reports.builds import HOSTILE, hostile_results

    builds = [Build("hostile", hostile_results(), "results.json")]
    report, comparison = Report.of(builds), compare(*store_rows(builds, None))
    literal = " ".join(HOSTILE.split())
    md = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(render_markdown(report, comparison))
    tags, text = _tags_and_text(md)
    names = [name for name, _ in tags]
    assert not {"a", "img", "strong", "blockquote", "hr", "s", "del", "ul", "h3"} & set(names), names
    assert names.count("h1") == 1 and names.count("ol") == 1  # the title; the list of reasons
    assert names.count("em") == 1  # the template's own "*Notes*"
    assert names.count("code") == 1  # the artifact's sha256 (its backtick and | inside the span)
    assert text.count(literal) >= 10 and "ab`|aaaa" in text
    html_tags, html_text = _tags_and_text(render_html(report, comparison))
    assert not [t for t, a in html_tags if t in ("img", "script") or (t == "a" and not a["href"].startswith("#"))]
    assert html_text.count(literal) >= 10


def _rendered(results) -> tuple[str, str]:
    from edgeship.reports.rows import Build

    report = Report.of([Build("t", results, "results.json")])
    return render_markdown(report), render_html(report)


def _cells(markdown: str, section: str, variant: str) -> list[str]:
    """The cells of ``variant``'s row in the table under ``## section`` of report.md."""
    part = markdown.split(f"## {section}\n")[1].split("\n## ")[0]
    return [c.strip() for c in next(ln for ln in part.splitlines() if ln.startswith(f"| {variant} |")).split("|")]


def _note(markdown: str, cell: str) -> str:
    """The footnote ``cell`` ("250.0 [3]") points to, as report.md lists it (escaped)."""
    number = re.fullmatch(r".* \[(\d+)\]", cell)[1]
    return re.search(rf"^{number}\. (.*)$", markdown.split("## Notes\n")[1], re.M)[1]


def test_report_variants_table_footnotes_accuracy_from_a_reused_measurement() -> None:
    """top-1, SQNR and agreement of a variant come from its first device's outputs: reused from the
    stage cache, each carries the reuse footnote in report.md and report.html, as its p50 does."""
    from edgeship.reports.formatting import REUSED_WHY
    from edgeship.reports.markdown import md_text
    from tests.reports.builds import reused_results

    markdown, html = _rendered(reused_results())
    header, ort = _cells(markdown, "Variants", "variant"), _cells(markdown, "Variants", "ort")
    for column in ("top-1", "SQNR (dB)", "agreement"):
        cell = ort[header.index(column)]
        assert re.fullmatch(r".* \[\d+\]", cell), f"{column}: {cell} has no footnote"
        assert cell.split(" [")[0] in ("50.00%", "250.0", "100.00%") and _note(markdown, cell) == md_text(REUSED_WHY)
    variants = html.split('<h2 id="variants">')[1].split("<h2 ")[0]
    assert variants.count(f'title="{REUSED_WHY}">250.0</span>') == 1


def test_report_marks_a_row_build_resume_kept_with_its_own_note() -> None:
    """A row build --resume kept from the previous results.json (the scheduler's own note) is
    footnoted in report.md and report.html (its p50 and the accuracy from it) and flagged in
    results.csv, with wording of its own, not the stage cache's."""
    from edgeship.reports.csvfile import render_csv
    from edgeship.reports.rows import Build
    from tests.reports.builds import reused_results

    results = reused_results()
    markdown, html = _rendered(results)
    eager_p50, eager_top1 = _cells(markdown, "Latency (ms)", "eager")[2], _cells(markdown, "Variants", "eager")[6]
    assert eager_p50.startswith("2.000 [") and eager_top1.startswith("50.00% ["), (eager_p50, eager_top1)
    resumed = _note(markdown, eager_p50)
    assert "kept by build --resume" in resumed and "stage cache" not in resumed
    assert _note(markdown, eager_top1) == resumed
    assert re.search(r'title="[^"]*kept by build --resume[^"]*">2\.000</span>', html)
    csv = render_csv(Report.of([Build("t", results, "results.json")]))
    assert [line.rsplit(",", 1)[1] for line in csv.splitlines()[1:]] == ["build --resume", "stage cache"]


def test_report_lists_a_reused_measurement_s_note_under_notes_not_under_not_measured() -> None:
    """A reused number was measured: its footnote sits under "Notes" (with the reasons for what was
    not measured), never under a heading that says "Not measured"."""
    from edgeship.reports.formatting import REUSED_WHY
    from tests.reports.builds import reused_results

    markdown, html = _rendered(reused_results())
    assert "## Not measured" not in markdown and "Not measured</h2>" not in html
    assert REUSED_WHY.split(" (")[0] in markdown.split("\n## Notes\n")[1].split("\n## ")[0]
    assert '<h2 id="notes">Notes</h2>' in html and 'href="#notes"' in html


def test_report_lists_vendor_fallbacks_after_the_cpu_choices_escaped() -> None:
    """A variant whose vendor step stepped down (lowering.details.fallbacks) gets a line under
    "Fallbacks", after "Chosen for the target CPUs", in report.md and report.html; its note shown as
    written (no link); no section for a build without any."""
    from markdown_it import MarkdownIt
    from markupsafe import escape

    from edgeship.backends.fallback import Crash, StepDown
    from tests.reports.builds import results_with

    crash = Crash("TypeError", "object of type 'NoneType' has no len() [it](http://e)", "_infer_Expand", "Expand")
    step = StepDown("ONNX Runtime", "quant_pre_process", "full", "symbolic shape inference", crash,
                    "without symbolic shape inference")
    note = step.note()
    results = results_with()
    results.variants[1].lowering.details.update(fallbacks=[step.record()], quantization={"activations_reason": "VNNI"})
    markdown, html = _rendered(results)
    assert markdown.index("## Chosen for the target CPUs") < markdown.index("## Fallbacks") < markdown.index(
        "## Latency")
    section = markdown.split("## Fallbacks\n")[1].split("\n## ")[0]
    assert "a vendor step crashed on this model; edgeship ran the alternative its vendor documents" in section.lower()
    rendered = MarkdownIt("commonmark").render(section)
    assert "<a " not in rendered and f"ort: {note}" in rendered
    assert '<h2 id="fallbacks">Fallbacks</h2>' in html and f"<li>ort: {escape(note)}</li>" in html
    assert "Fallbacks" not in "".join(_rendered(results_with()))


def test_report_md_writes_a_placeholder_dash_in_a_table_cell_as_it_is() -> None:
    """The "-" of a device's agreement with itself is a plain "-" in report.md's raw text (a table
    cell starts no block, so it needs no escape)."""
    from edgeship.results import Accuracy
    from tests.reports.builds import results_with

    acc = Accuracy(samples=8, top1=0.5, sqnr_db=40.0)
    results = results_with(accuracy=acc, eager_accuracy=acc)
    for row in results.variants:  # the same outputs on a second device: the per-device table
        row.latency.append(row.latency[0].model_copy(deep=True, update={"device": "dev2"}))
    markdown, _ = _rendered(results)
    row = next(ln for ln in markdown.split("## Accuracy on each device")[1].splitlines() if ln.startswith("| ort |"))
    assert "| - |" in row and "\\-" not in row
