"""bench.py's builds run the real command with a cold start of every cache they can fill: edgeship's
stage cache and Inductor's on-disk cache both in the model's own work folder (which a bench run empties),
not the user's cache or /tmp's, which outlive a run."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import bench  # noqa: E402


def test_a_bench_build_keeps_inductors_cache_in_the_models_folder(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "python"   # stands in for the interpreter: records what the build would see
    fake.write_text('#!/bin/sh\necho "${TORCHINDUCTOR_CACHE_DIR}|${EDGESHIP_CACHE_DIR:-unset}|$PWD" > seen\n')
    fake.chmod(0o755)
    monkeypatch.setattr(bench.sys, "executable", str(fake))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/tmp/torchinductor_someone")
    monkeypatch.setenv("EDGESHIP_CACHE_DIR", str(tmp_path / "user-cache"))
    folder = tmp_path / "resnet18"
    folder.mkdir()
    seconds, _, out = bench.run_build(tmp_path / "model.toml", "host", folder)
    inductor, stage, cwd = (folder / "seen").read_text().strip().split("|")
    assert Path(inductor) == folder / bench.INDUCTOR_CACHE and stage == "unset"   # the stage cache: cwd's artifacts/
    assert Path(cwd) == folder and out == folder / "host" and seconds >= 0
