"""The table printed at the end of a build: per device, the load + first inference and the memory."""
from __future__ import annotations

import re

from rich.console import Console

from edgeship.reports.console import results_table
from edgeship.results import Latency, ModelInfo, Results, VariantResult
from tests.reports.test_task_report import console_text


def _build() -> Results:
    timed = Latency(device="host", runtime="r", warmup=1, iterations=4, p50_ms=1.0, load_ms=12.34,
                    first_inference_ms=4.56, rss_over_baseline_mb=38.4)
    unknown = Latency(device="host", runtime="r", warmup=1, iterations=4, p50_ms=2.0, load_ms=7.0)
    emulated = Latency(device="arm", runtime="r", warmup=1, iterations=4, p50_ms=90.0, load_ms=300.0,
                       first_inference_ms=200.0, rss_over_baseline_mb=500.0, emulated="qemu-aarch64 (TCG)")
    variants = [VariantResult(name="eager", backend="eager", precision="fp32", latency=[timed, emulated]),
                VariantResult(name="ort", backend="onnx", precision="fp32", size_bytes=2048, latency=[unknown])]
    return Results(target="t", created="2026-01-01T00:00:00Z", toolchain={}, variants=variants,
                   model=ModelInfo(name="m", entry="m:build", inputs=[], params=1))


def test_console_shows_load_first_inference_and_memory_per_timed_device() -> None:
    text = console_text(_build())
    assert "load + 1st ms host" in text and "memory host" in text
    assert "load + 1st ms arm" not in text and "memory arm" not in text  # an emulator's load and memory are its own
    assert re.search(r"eager .* 12\.3 \+ 4\.6 .* \+38 MiB ", text)
    assert re.search(r"ort .* 7\.0 \+ - .* not measured ", text)  # no first inference, no memory: never a blank


def test_console_shows_names_with_rich_markup_as_written() -> None:
    """Rich markup in a variant, device, model or failure (``[bold]``, a ``[/]`` closing nothing) is
    shown as written: never styled, never a MarkupError at the end of a build."""
    r = _build()
    r.model.name, r.variants[1].name = "m [red]x[/red]", "ort [/] [bold]b[/bold]"
    r.variants[1].latency[0].device = "[blink]dev[/]"
    r.variants[1].gates.passed, r.variants[1].gates.failures = False, ["[green]pass[/green]"]
    console = Console(record=True, width=400, color_system=None)
    console.print(results_table(r))
    text = console.export_text()
    for written in ("m [red]x[/red] on t", "ort [/] [bold]b[/bold]", "p50 ms [blink]dev[/]",
                    "FAIL [green]pass[/green]"):
        assert written in text


def test_console_marks_each_reused_figure_and_says_what_the_mark_means() -> None:
    """A row the stage cache supplied (``*``) and one build --resume kept (``^``): their p50, top-1 and
    SQNR carry the mark and a caption under the table explains each; a fresh build has neither."""
    from tests.reports.builds import results_with, reused_results

    text = console_text(reused_results())
    assert re.search(r"ort .* 50\.00%\* .* 250\.0\* .* 0\.001\* ", text), text
    assert re.search(r"eager .* 50\.00%\^ .* 250\.0\^ .* 2\.000\^ ", text), text
    assert "* not measured by this build: reused from the stage cache" in text
    assert "^ not measured by this build: kept by build --resume" in text
    fresh = console_text(results_with())
    assert "not measured by this build" not in fresh and not re.search(r"\d[*^] ", fresh)
