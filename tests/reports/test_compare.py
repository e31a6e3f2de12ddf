"""Comparisons: the same artifact across devices, the same model across builds, regressions
(p50 slower beyond a threshold, top-1 lower), from results files and from the results store."""
from __future__ import annotations

from pathlib import Path

import pytest

from edgeship.cli import main
from edgeship.reports import load_builds
from edgeship.reports.compare import across_builds, compare, store_rows
from edgeship.results import Results
from edgeship.store import ResultsStore
from tests.reports.builds import DEVICES


def row(build: str, created: str, p50: float | None, top1: float | None = 0.9, device: str = "pixel8") -> dict:
    return {"build_id": build, "created": created, "model": "m", "target": "android", "variant": "v",
            "device": device, "p50_ms": p50, "top1": top1, "artifact_sha256": f"sha-{build}"}


def test_across_builds_flags_a_p50_slower_than_the_threshold() -> None:
    rows = [row("b1", "2026-01-01", 10.0), row("b2", "2026-01-02", 11.5)]
    (change,) = across_builds(rows, threshold_pct=10.0, top1_tolerance=0.0)
    assert change.p50_change_pct == pytest.approx(15.0) and change.builds == 2
    assert change.regressions == ["p50 10.000 -> 11.500 ms (+15.0%, threshold 10%)"]
    rows[0]["cv"], rows[1]["cv"] = 0.05, 0.61
    assert across_builds(rows, 10.0, 0.0)[0].regressions == [
        "p50 10.000 -> 11.500 ms (+15.0%, threshold 10%; cv 0.05 -> 0.61)"]
    assert across_builds(rows, threshold_pct=20.0, top1_tolerance=0.0)[0].regressions == []


def test_across_builds_flags_a_lower_top1_and_compares_the_last_two_builds() -> None:
    rows = [row("b1", "2026-01-01", 12.0, 0.95), row("b2", "2026-01-02", 10.0, 0.90),
            row("b3", "2026-01-03", 10.0, 0.89)]
    (change,) = across_builds(rows, threshold_pct=10.0, top1_tolerance=0.5)
    assert (change.before["build_id"], change.after["build_id"], change.builds) == ("b2", "b3", 3)
    assert change.regressions == ["top-1 90.00% -> 89.00% (-1.00 points, tolerance 0.5)"]
    assert across_builds(rows, threshold_pct=10.0, top1_tolerance=2.0)[0].regressions == []


def test_across_builds_skips_what_was_measured_once_or_not_at_all() -> None:
    rows = [row("b1", "2026-01-01", None, None), row("b2", "2026-01-02", 10.0, None),
            row("b1", "2026-01-01", 5.0, device="orin")]
    (change,) = across_builds(rows, threshold_pct=10.0, top1_tolerance=0.0)
    assert change.key[3] == "pixel8" and change.p50_change_pct is None and change.regressions == []


def test_store_rows_compare_the_same_artifact_on_both_devices(two_device_build: Path) -> None:
    rows, sources = store_rows(load_builds([two_device_build / "results.json"]), None)
    comparison = compare(rows, sources)
    names = {d.variant for d in comparison.devices}
    assert {"executorch-fp32", "mobile-fp32", "onnx-fp32"} <= names and "eager" not in names
    onnx = next(d for d in comparison.devices if d.variant == "onnx-fp32")
    results = Results.read(two_device_build / "results.json")
    assert onnx.p50 == {lat.device: lat.p50_ms for lat in results.variant("onnx-fp32").latency}
    assert set(onnx.p50) == set(DEVICES) and comparison.changes == []


def slower_copy(results_path: Path, folder: Path, factor: float = 1.5) -> Path:
    """The same build again, one day later, with onnx-fp32 ``factor`` times slower on cpu-a."""
    results = Results.read(results_path)
    results.created = "2099-01-01T00:00:00Z"
    for lat in results.variant("onnx-fp32").latency:
        if lat.device == DEVICES[0]:
            lat.p50_ms *= factor
            lat.measured_at = "2099-01-01T00:00:00Z"
    folder.mkdir(parents=True, exist_ok=True)
    results.write(folder / "results.json")
    return folder / "results.json"


def test_report_fail_on_regression_exits_3_and_still_writes(capsys, two_device_build: Path, tmp_path: Path) -> None:
    first = two_device_build / "results.json"
    second = slower_copy(first, tmp_path / "later")
    out = tmp_path / "report"
    assert main(["report", str(first), str(second), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "regression: tiny/twodev onnx-fp32 on cpu-a" in printed and "(+50.0%, threshold 10%; cv " in printed
    assert main(["report", str(first), str(second), "--out", str(out), "--fail-on-regression"]) == 3
    assert "1 regression(s): tiny/twodev onnx-fp32 on cpu-a" in capsys.readouterr().err
    text = (out / "report.md").read_text()
    assert "**REGRESSION**: p50" in text and "## Builds" in text and (out / "report.html").is_file()


def test_report_from_the_store_alone_finds_the_regression(capsys, two_device_build: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'results.db'}"
    store = ResultsStore(url)
    store.record(Results.read(two_device_build / "results.json"))
    store.record(Results.read(slower_copy(two_device_build / "results.json", tmp_path / "later")))
    code = main(["report", "--db", url, "--out", str(tmp_path / "report"), "--fail-on-regression"])
    assert code == 3 and "onnx-fp32 on cpu-a" in capsys.readouterr().err
    assert main(["report", "--db", url, "--out", str(tmp_path / "report"), "--threshold", "60"]) == 0
    assert "regression" not in capsys.readouterr().out


def test_across_builds_does_not_call_a_reused_row_a_new_measurement() -> None:
    # a measured 1.0 ms; b (another output folder) measured 0.8 ms; c resumed a's folder and reused
    # a's row (same measured_at and artifact): c measured nothing new, so nothing regressed
    a = row("a", "2026-01-01T00:00:00Z", 1.0) | {"measured_at": "2026-01-01T00:00:00Z", "artifact_sha256": "sha"}
    b = row("b", "2026-01-02T00:00:00Z", 0.8) | {"measured_at": "2026-01-02T00:00:00Z", "artifact_sha256": "sha"}
    c = a | {"build_id": "c", "created": "2026-01-03T00:00:00Z"}
    (change,) = across_builds([a, b, c], threshold_pct=10.0, top1_tolerance=0.0)
    assert change.regressions == [] and change.builds == 2
    assert (change.before["build_id"], change.after["build_id"]) == ("a", "b")
    fresh = c | {"measured_at": "2026-01-03T00:00:00Z", "p50_ms": 1.0}  # measured again: compared
    assert across_builds([a, b, fresh], 10.0, 0.0)[0].regressions[0].startswith("p50 0.800 -> 1.000 ms")


def test_report_at_build_time_flags_no_regression_for_rows_reused_from_an_older_build(tmp_path: Path) -> None:
    from edgeship.reports.rows import Build
    from tests.reports.builds import results_with

    older, newer = results_with(p50=1.0, created="2026-01-01T00:00:00Z"), results_with(p50=0.8,
                                                                                         created="2026-01-02T00:00:00Z")
    store = ResultsStore(f"sqlite:///{tmp_path / 'results.db'}")
    store.record(older)
    store.record(newer)
    resumed = older.model_copy(deep=True, update={"created": "2026-01-03T00:00:00Z"})  # reused older's row
    store.record(resumed)
    comparison = compare(*store_rows([Build("resumed", resumed, "results.json")], store.url, "m", "t"))
    assert comparison.regressions == []
