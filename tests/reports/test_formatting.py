"""Report cells: measured numbers formatted from results.json, "not measured" with the reason."""
from __future__ import annotations

import csv
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


def vacuous_report() -> Report:
    """The zero-head case: every output of every model is zero, so everything "matches"."""
    from edgeship.results import Accuracy
    from tests.reports.builds import results_with

    acc = Accuracy(samples=8, top1=0.25, top1_drop=0.0, agreement=1.0, cosine=None, max_abs_err=0.0,
                   informative=False, uninformative_reason="the float model's outputs are all zero")
    results = results_with(accuracy=acc, eager_accuracy=acc.model_copy())
    results.variant("ort").gates.passed = False
    results.variant("ort").gates.failures = ["accuracy not informative: ... (accuracy gates not checked)"]
    return Report.of([Build("t", results, "results.json")])


def test_accuracy_that_is_not_informative_is_never_shown_as_a_number(tmp_path: Path) -> None:
    from edgeship.reports import write_reports

    report = vacuous_report()
    for name in ("eager", "ort"):
        for key in ("top1", "top1_drop", "sqnr_db", "agreement"):
            shown = formatting.accuracy(line(report, name), key)
            assert shown.text == "not informative" and shown.why.endswith("the float model's outputs are all zero")
    assert formatting.gates(line(report, "ort")).text.startswith("FAIL: accuracy not informative")
    write_reports(report, tmp_path)
    md = (tmp_path / "report.md").read_text()
    ort = next(ln for ln in md.splitlines() if ln.startswith("| ort |"))
    assert "exact" not in ort and "100.00%" not in ort and ort.count("not informative [1]") == 4
    with open(tmp_path / "results.csv", newline="") as f:
        csv_ort = next(r for r in csv.DictReader(f) if r["variant"] == "ort")
    assert [csv_ort[k] for k in ("top1", "top1_drop", "agreement", "max_abs_err")] == ["", "", "", ""]
    assert csv_ort["accuracy_informative"] == "False" and "accuracy not informative" in csv_ort["not_measured"]


def test_non_finite_outputs_and_a_failed_reference_row_are_shown_as_such() -> None:
    from edgeship.results import Accuracy
    from tests.reports.builds import results_with

    results = results_with(accuracy=Accuracy(samples=8, non_finite=5))
    results.variant("eager").gates.passed = False
    results.variant("eager").gates.failures = ["the float model's outputs contain 5 non-finite values (NaN or inf)"]
    report = Report.of([Build("t", results, "results.json")])
    shown = formatting.accuracy(line(report, "ort"), "sqnr_db")
    assert shown.text == "NaN/inf" and "outputs contain 5 non-finite values" in shown.why
    assert formatting.gates(line(report, "eager")).text == ("FAIL: the float model's outputs contain 5 non-finite "
                                                            "values (NaN or inf)")



def _with_row(report: Report, name: str, **changes: object) -> tuple[Report, object]:
    """The report with ``name``'s first latency row changed, and that row's line."""
    results = report.builds[0].results.model_copy(deep=True)
    row = results.variant(name).latency[0]
    for key, value in changes.items():
        setattr(row, key, value)
    changed = Report.of([Build("twodev", results, "test")])
    return changed, line(changed, name)


def test_load_and_memory_cells_show_the_rows_own_figures(report: Report) -> None:
    onnx = line(report, "onnx-fp32")
    for device in report.devices:
        lat = onnx.latency(device)
        assert formatting.cold_start(onnx, device).text == (f"{formatting.ms(lat.load_ms)} + "
                                                           f"{formatting.ms(lat.first_inference_ms)} ms")
        assert formatting.memory(onnx, device) == formatting.Shown(formatting.mib(lat.rss_over_baseline_mb))
    assert formatting.mib(38.4) == "+38 MiB" and formatting.mib(2.44) == "+2.4 MiB"


def test_load_and_memory_not_measured_give_the_runners_reason(report: Report) -> None:
    why = "rss_over_baseline_mb, first_inference_ms not measured: the program prints neither"
    changed, onnx = _with_row(report, "onnx-fp32", first_inference_ms=None, rss_over_baseline_mb=None, notes=[why])
    device = onnx.variant.latency[0].device
    load = formatting.cold_start(onnx, device)
    assert load.text == f"{formatting.ms(onnx.latency(device).load_ms)} ms + not measured"
    assert load.why == f"first_inference_ms not measured on {device}: the program prints neither"
    memory = formatting.memory(onnx, device)
    assert memory.text == formatting.NOT_MEASURED
    assert memory.why == f"rss_over_baseline_mb not measured on {device}: the program prints neither"


def test_load_and_memory_of_a_row_from_an_older_edgeship_say_it_did_not_record_them(report: Report) -> None:
    changed, onnx = _with_row(report, "onnx-fp32", load_ms=None, first_inference_ms=None, rss_over_baseline_mb=None,
                              notes=[])
    device = onnx.variant.latency[0].device
    for shown in (formatting.cold_start(onnx, device), formatting.memory(onnx, device)):
        assert shown.text == formatting.NOT_MEASURED and "did not record it" in shown.why


def test_load_and_memory_of_an_emulated_device_are_labelled_emulated(report: Report) -> None:
    changed, onnx = _with_row(report, "onnx-fp32", emulated="qemu-x86_64 7.2 -cpu Haswell (TCG)")
    device = onnx.variant.latency[0].device
    load, memory = formatting.cold_start(onnx, device), formatting.memory(onnx, device)
    assert load.text == memory.text == formatting.EMULATED
    assert "emulated" in load.why and "the emulator's own" in memory.why
