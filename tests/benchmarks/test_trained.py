"""benchmarks/trained.py takes bench.py's builds of a model (make bench runs both) only where they are
of the same spec and every profile it needs; else it builds them itself."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import trained  # noqa: E402


def bench_folder(tmp_path: Path, spec: Path, profiles: list[str]) -> Path:
    """A bench.py work folder as it leaves a model: builds.json, and a results.json per profile."""
    folder = tmp_path / "work" / "digitnet"
    for profile in profiles:
        (folder / profile).mkdir(parents=True)
        (folder / profile / "results.json").write_text("{}")
    cost = {p: {"cold_build_seconds": 10.0 + i, "rebuild_seconds": 0.5} for i, p in enumerate(profiles)}
    (folder / "builds.json").write_text(json.dumps({"spec": str(spec.resolve()), "build_cost": cost}))
    return tmp_path / "work"


@pytest.fixture
def built_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    made: list[str] = []
    monkeypatch.setattr(trained, "WORK", tmp_path / "trained")
    monkeypatch.setattr(trained, "build", lambda spec, profile, folder: made.append(profile) or (1.0, folder / profile))
    return made


def test_trained_reuses_bench_builds_of_the_same_spec(tmp_path: Path, built_here: list[str]) -> None:
    work = bench_folder(tmp_path, trained.MODELS["digitnet"], ["host", "android", "linux", "x86"])
    folder, seconds, reused = trained.builds_of("digitnet", ["host", "android", "x86"], work)
    assert folder == (work / "digitnet").resolve() and reused == str(folder)
    assert seconds == {"host": 10.0, "android": 11.0, "x86": 13.0} and built_here == []


def test_trained_builds_itself_where_bench_lacks_a_profile_or_built_another_spec(tmp_path: Path,
                                                                                 built_here: list[str]) -> None:
    work = bench_folder(tmp_path, trained.MODELS["digitnet"], ["host", "android"])
    assert trained.builds_of("digitnet", ["host", "android", "x86"], work)[2] is None
    assert built_here == ["host", "android", "x86"]
    other = bench_folder(tmp_path / "other", trained.MODELS["minilm"], ["host"])
    assert trained.builds_of("digitnet", ["host"], other)[2] is None


class RecordedTiming:
    """The parts of harness.Timing that trained.row_of reads, from fixed per-job p50s (one round)."""

    def __init__(self, p50: dict[str, float]) -> None:
        self.values, self.failed = p50, {}

    def p50(self, name: str) -> float | None:
        return self.values.get(name)

    def paired(self, a: str, b: str) -> tuple[list[float], list[float]]:
        return [self.values[a]] * 6, [self.values[b]] * 6

    def cold_start(self, name: str) -> dict:
        return {"not_measured": "recorded timing"}


def test_trained_rows_from_bench_take_each_file_as_bench_timed_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """make bench writes trained.json from its own rounds: a row whose file bench.py timed as another
    candidate's (byte-identical, an earlier profile) reads that candidate's p50, even where this
    script's own profiles would have timed it under its own name; and an int8 row's ratio to its fp32
    sibling comes from the same rounds."""
    def row(runtime: str, precision: str) -> dict:
        return {"backend": runtime, "runtime": runtime, "built_precision": precision, "size_bytes": 1,
                "figures": {}, "kept_float": None}

    found = {"eager": row("eager", "fp32"), "x86/onnx-fp32": row("onnxruntime", "fp32"),
             "x86/onnx-int8": row("onnxruntime", "int8")}
    monkeypatch.setattr(trained, "candidates", lambda spec, folder, profiles: (found, []))
    timed = {"eager": {}, "x86/onnx-fp32": {"same_as": "linux/onnx-fp32"}, "x86/onnx-int8": {}}
    timing = RecordedTiming({"eager": 10.0, "linux/onnx-fp32": 5.0, "x86/onnx-int8": 2.0})
    rows = trained.bench_rows(Path("model.toml"), Path("work"), ["x86"], timed, timing)
    assert rows["x86/onnx-fp32"]["p50_ms"] == 5.0 and rows["x86/onnx-fp32"]["vs_eager"]["value"] == 2.0
    assert rows["x86/onnx-int8"]["fp32_sibling"] == "x86/onnx-fp32"
    assert rows["x86/onnx-int8"]["p50_over_fp32"]["value"] == 0.4
