"""What a build reuses is what it checked: results.json in --out is read once (the bytes whose signed
record is found are the bytes parsed), an unchanged build's artifacts are compared with the signed
results.json (not the folder's unsigned manifest), and the stage cache's float reference is checked as
it is read, not opened again by name after the entry was checked (issue 51, review of case 4)."""
from __future__ import annotations

import builtins
import hashlib
import io
import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import edgeship.cache as cache_module
from edgeship.cli import main
from edgeship.pipeline.output import MANIFEST, RESULTS
from tests.conftest import make_tiny_project, write_profile

ORT = """
[[variants]]
name = "ort"
backend = "onnx"
"""
FORGED_MS = 777.777


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory):
    """One build of the tiny model into ``first.out``, its stage cache ``first.cache`` (the tests build again
    from copies of the folder, so each pays for one build only)."""
    root = tmp_path_factory.mktemp("reuse-trust")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("EDGESHIP_CACHE_DIR", str(root / "cache"))
        spec, profile = make_tiny_project(root / "tiny") / "model.toml", write_profile(root, ORT)
        out = root / "first"
        assert main(["build", "--target", str(profile), "--model", str(spec), "--out", str(out), "--quiet"]) == 0
        yield SimpleNamespace(spec=spec, profile=profile, out=out, cache=root / "cache")


def _build(first, out: Path, capsys) -> tuple[int, str]:
    code = main(["build", "--target", str(first.profile), "--model", str(first.spec), "--out", str(out)])
    _, err = capsys.readouterr()
    return code, " ".join(err.split())


def _copy(first, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(first.out, out)
    return out


def _forged_at_first_read(monkeypatch, path: Path, forged: bytes) -> None:
    """An attacker who can write --out swaps ``path``, made deterministic: the first read of it sees
    ``forged``; every later read sees the file on disk (put back)."""
    real, armed = builtins.open, [True]

    def opening(file, mode="r", *args, **kwargs):
        if armed and "r" in mode and "+" not in mode and isinstance(file, (str, os.PathLike)) \
                and os.path.abspath(os.fspath(file)) == str(path):
            armed.clear()
            data = io.BytesIO(forged)
            return data if "b" in mode else io.TextIOWrapper(data, encoding="utf-8")
        return real(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", opening)
    monkeypatch.setattr(io, "open", opening)


def test_unchanged_build_reads_results_json_once_so_a_swap_after_the_parse_is_not_taken(
        first, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("EDGESHIP_CACHE_DIR", str(first.cache))
    out = _copy(first, tmp_path)
    doc = json.loads((out / RESULTS).read_bytes())
    for row in doc["variants"]:
        for lat in row["latency"]:
            lat["p50_ms"] = FORGED_MS
    (out / "report.md").unlink()   # stale: an unchanged build writes it again from results.json
    _forged_at_first_read(monkeypatch, out / RESULTS, json.dumps(doc).encode())
    code, said = _build(first, out, capsys)
    assert code == 0 and "unchanged since" not in said, said
    assert str(FORGED_MS) not in (out / "report.md").read_text()
    assert all(lat["p50_ms"] != FORGED_MS for row in json.loads((out / RESULTS).read_text())["variants"]
               for lat in row["latency"])


def test_unchanged_build_compares_artifacts_with_the_signed_results_not_the_manifest(
        first, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("EDGESHIP_CACHE_DIR", str(first.cache))
    out = _copy(first, tmp_path)
    artifact = out / "ort" / "model.onnx"
    honest = artifact.read_bytes()
    artifact.write_bytes(b"attacker's model")
    manifest = json.loads((out / MANIFEST).read_text())
    manifest["files"]["ort/model.onnx"] = hashlib.sha256(artifact.read_bytes()).hexdigest()
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))
    code, said = _build(first, out, capsys)
    assert code == 0 and "unchanged since" not in said, said
    assert artifact.read_bytes() == honest


def test_reference_stage_checks_the_cached_reference_as_it_reads_it(first, tmp_path, capsys, monkeypatch) -> None:
    """reference.npz (the float outputs and the labels) swapped after Cache.get checked the entry: the
    entry is discarded and the reference computed again, so SQNR and top-1 are the honest ones."""
    monkeypatch.setenv("EDGESHIP_CACHE_DIR", str(first.cache))
    real = cache_module.Cache.get_or_compute

    def racing(self, namespace, key_parts, compute, redo="computing it again"):
        entry = real(self, namespace, key_parts, compute, redo)
        if namespace == "reference" and entry.hit:   # checked; now another process swaps the file
            with np.load(entry.path / "reference.npz") as npz:
                arrays = {k: npz[k] + 1.0 for k in npz.files if k != "labels"}
                arrays["labels"] = npz["out0"].argmax(axis=1)   # every label the model's answer: top-1 100%
            with open(entry.path / "reference.npz", "wb") as f:
                np.savez(f, **arrays)
        return entry

    monkeypatch.setattr(cache_module.Cache, "get_or_compute", racing)
    code, said = _build(first, tmp_path / "two", capsys)
    honest = json.loads((first.out / RESULTS).read_text())["variants"]
    again = json.loads((tmp_path / "two" / RESULTS).read_text())["variants"]
    assert code == 0, said
    assert "reference.npz: not the file its signed sha256 list holds); discarded, computing the float reference " \
           "again" in said
    assert again[1]["accuracy"]["sqnr_db"] > 100 and all(row["gates"]["passed"] for row in again)
    assert [row["accuracy"]["top1"] for row in again] == [row["accuracy"]["top1"] for row in honest]
