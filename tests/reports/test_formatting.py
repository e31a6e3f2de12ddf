"""Report cells: measured numbers formatted from results.json, "not measured" with the reason."""
from __future__ import annotations

from pathlib import Path

import pytest

from edgeship.reports import Report, formatting, load_builds
from edgeship.reports.rows import Build


@pytest.fixture(scope="module")
def report(two_device_build: Path) -> Report:
    return Report.of(load_builds([two_device_build / "results.json"]))


def line(report: Report, name: str):
    return next(ln for ln in report.lines if ln.variant.name == name)


def test_speedup_is_eager_p50_over_variant_p50_on_the_same_device(report: Report) -> None:
    onnx, eager = line(report, "onnx-fp32"), line(report, "eager")
    for device in report.devices:
        expected = eager.p50(device) / onnx.p50(device)
        assert formatting.speedup(report, onnx, device).text == f"{expected:.2f}×"
        assert formatting.latency(onnx, device).text == formatting.ms(onnx.p50(device))


def test_relative_is_the_ratio_of_p50_between_devices(report: Report) -> None:
    pte = line(report, "executorch-fp32")
    a, b = report.devices
    assert formatting.relative(pte, b, a).text == f"{pte.p50(b) / pte.p50(a):.2f}×"


def test_cells_of_an_unbuilt_variant_say_not_measured_with_its_error(report: Report) -> None:
    broken = line(report, "too-old")
    for shown in (formatting.size(broken), formatting.latency(broken, "cpu-a"), formatting.accuracy(broken, "top1"),
                  formatting.speedup(report, broken, "cpu-b")):
        assert shown.text == formatting.NOT_MEASURED
        assert shown.why.startswith("too-old was not built: lowering failed") and "bytecode" in shown.why
    assert formatting.gates(broken).text.startswith("FAIL: ")


def test_speedup_not_measured_when_eager_was_not_timed_on_the_device(report: Report) -> None:
    results = report.builds[0].results.model_copy(deep=True)
    eager = results.variant("eager")
    eager.latency = [lat for lat in eager.latency if lat.device != "cpu-b"]
    changed = Report.of([Build("twodev", results, "test")])
    shown = formatting.speedup(changed, line(changed, "onnx-fp32"), "cpu-b")
    assert shown.text == formatting.NOT_MEASURED and "float model was not timed on cpu-b" in shown.why


def test_sqnr_of_identical_outputs_shows_exact_not_a_number(report: Report) -> None:
    assert formatting.accuracy(line(report, "eager"), "sqnr_db").text == "exact"
    pte = line(report, "executorch-fp32")
    assert formatting.accuracy(pte, "sqnr_db").text == f"{pte.variant.accuracy.sqnr_db:.1f}"
