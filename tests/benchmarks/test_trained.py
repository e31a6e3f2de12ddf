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
