"""End to end, through the installed command, as a user runs it."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from edgeship.devices.hashing import sha256_file
from tests.conftest import REPO

HOST_BACKENDS = {"eager", "pytorch-mobile", "executorch", "onnx", "openvino"}


def edgeship(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgeship", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=900)


def check_host_results(results: dict, min_top1: float | None) -> None:
    rows = results["variants"]
    assert rows[0]["backend"] == "eager" and {r["backend"] for r in rows} == HOST_BACKENDS
    for row in rows:
        assert row["accuracy"]["samples"] > 0 and row["latency"][0]["device"] == "host"
        assert row["latency"][0]["p50_ms"] > 0 and row["gates"]["passed"], row
        if row["backend"] != "eager":
            min_sqnr = 20 if row["precision"] == "int8" else 60  # host.toml's int8 ONNX variant
            assert row["accuracy"]["sqnr_db"] >= min_sqnr and row["size_bytes"] > 0 and len(row["sha256"]) == 64
    if min_top1 is not None:
        assert rows[0]["accuracy"]["top1"] >= min_top1


@pytest.mark.slow
def test_build_host_for_a_model_the_project_has_never_seen(tiny_project: Path, tmp_path: Path) -> None:
    proc = edgeship("build", "--target", "host", "--model", str(tiny_project / "model.toml"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out_dir = tmp_path / "artifacts" / "host" / "tiny"
    results = json.loads((out_dir / "results.json").read_text())
    check_host_results(results, min_top1=None)
    assert results["model"]["name"] == "tiny" and results["variants"][0]["accuracy"]["samples"] == 32
    for row in results["variants"][1:]:
        assert (out_dir / row["file"]).exists()  # a file, or a folder (an OpenVINO IR)
    assert "tiny on host" in proc.stdout and "executorch" in proc.stdout
    check_manifest(out_dir, results)


def check_manifest(out_dir: Path, results: dict) -> None:
    """The build folder's manifest lists every file of the build with its sha256, and nothing is staged."""
    manifest = json.loads((out_dir / ".edgeship-build.json").read_text())
    assert manifest["build_key"] == results["build_key"]
    files = set()
    for row in results["variants"][1:]:  # a folder artifact (an OpenVINO IR) is listed file by file
        path = out_dir / row["file"]
        files |= {p.relative_to(out_dir).as_posix() for p in path.rglob("*") if p.is_file()} if path.is_dir() \
            else {row["file"]}
    assert files and files | {"results.json", "report.md"} <= set(manifest["files"])
    assert all(sha256_file(out_dir / rel) == sha for rel, sha in manifest["files"].items())
    assert not (out_dir / ".edgeship-incomplete.json").exists() and not (out_dir / ".work" / ".staged").exists()


@pytest.mark.slow
def test_build_host_demo_reaches_its_accuracy(tmp_path: Path) -> None:
    proc = edgeship("build", "--target", "host", "--out", str(tmp_path / "out"), cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_host_results(json.loads((tmp_path / "out" / "results.json").read_text()), min_top1=0.97)
