"""A whole build with int8 candidates and budgeted selection, through the Python API: every
candidate is measured and kept, one is selected, and a second build does not calibrate again."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgeship import api
from edgeship.backends.onnx import quantize as qonnx
from edgeship.backends.onnx.cpu import choose_reduce_range
from edgeship.devices.cpu import cpu_facts
from edgeship.errors import GateFailure
from tests.conftest import write_profile

VARIANTS = """
[[variants]]
name = "onnx-fp32"
backend = "onnx"
precision = "fp32"

[[variants]]
name = "onnx-int8"
backend = "onnx"
precision = "int8"
quantization = { method = "minmax", sensitivity = false }
candidates = { per_channel = [true, false] }
gates = { min_sqnr_db = 15.0 }
"""
SELECTION = '[selection]\nselect = "fastest-within-budget"\nmax_top1_drop = {budget}\n[calibration]\nsamples = 12\n'


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("EDGESHIP_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _build(tmp_path: Path, project: Path, budget: float, out: str):
    profile = write_profile(tmp_path, VARIANTS, extra=SELECTION.format(budget=budget))
    return api.build(str(profile), str(project / "model.toml"), out=tmp_path / out, quiet=True)


def test_build_selects_one_candidate_and_calibrates_once(tmp_path, tiny_project, cache_dir, monkeypatch) -> None:
    calls = []
    real = qonnx.calibrate_ranges
    monkeypatch.setattr(qonnx, "calibrate_ranges", lambda *a: calls.append(1) or real(*a))
    results = _build(tmp_path, tiny_project, 100.0, "first")
    doc = json.loads((tmp_path / "first" / "results.json").read_text())
    rows = {r["name"]: r for r in doc["variants"]}
    assert set(rows) == {"eager", "onnx-fp32", "onnx-int8-per-channel", "onnx-int8-per-tensor"}
    assert sum(r["selected"] for r in rows.values()) == 1 and doc["selection"]["selected"] in rows
    assert rows[doc["selection"]["selected"]]["selected"] is True
    int8 = rows["onnx-int8-per-tensor"]
    assert int8["quantization"] == "static" and int8["accuracy"]["sqnr_db"] > 15 and int8["latency"][0]["p50_ms"] > 0
    details = int8["lowering"]["details"]["quantization"]
    assert details["per_channel"] is False and details["samples"] == 12
    assert details["calibration"]["data"].startswith(str(tiny_project / "calib.npz"))  # the spec's own data
    assert "minmax calibration on 12 samples" in int8["lowering"]["notes"][0]
    # reduce_range chosen for the build's one device, this machine; every row names the CPU it ran on
    assert (details["reduce_range"], details["reduce_range_reason"]) == choose_reduce_range(None, "uint8", [
        ("host", cpu_facts())])
    assert details["reduce_range_reason"] in int8["lowering"]["notes"]
    assert all(lat["cpu"] == cpu_facts() for r in rows.values() for lat in r["latency"])
    assert rows["onnx-fp32"]["quantization"] == "none" and len(calls) == 1  # both candidates share the ranges
    _build(tmp_path, tiny_project, 100.0, "second")
    again = json.loads((tmp_path / "second" / "results.json").read_text())
    int8_rows = [r for r in again["variants"] if r["precision"] == "int8"]
    # The stage cache hands back both int8 artifacts whole: nothing is calibrated again, and the
    # rows keep what the first build recorded about its calibration (computed once, then shared).
    assert all(any("reused from the stage cache" in n for n in r["lowering"]["notes"]) for r in int8_rows)
    caches = sorted(r["lowering"]["details"]["quantization"]["calibration"]["cache"] for r in int8_rows)
    assert caches == ["hit", "miss"] and len(calls) == 1 and results.selection is not None


@pytest.mark.slow
def test_build_with_no_candidate_inside_the_budget_exits_3_and_keeps_every_row(
        tmp_path, tiny_project, cache_dir) -> None:
    profile = write_profile(tmp_path, VARIANTS,
                            extra=SELECTION.format(budget=0.0).replace("max_top1_drop = 0.0",
                                                                       "max_top1_drop = 0.0\nmin_sqnr_db = 200.0"))
    with pytest.raises(GateFailure, match="no variant is inside the budget") as e:
        api.build(str(profile), str(tiny_project / "model.toml"), out=tmp_path / "none", quiet=True)
    doc = json.loads((tmp_path / "none" / "results.json").read_text())
    assert len(doc["variants"]) == 4 and not any(r["selected"] for r in doc["variants"])
    assert doc["selection"]["selected"] is None and e.value.results is not None
