"""The worked examples build with `edgeship build` as their READMEs say (slow: real models)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgeship.cli import main
from tests.conftest import REPO, write_profile

pytestmark = pytest.mark.slow

ONNX = """
[[variants]]
name = "ort"
backend = "onnx"
"""


def build(capsys, tmp_path: Path, spec: str) -> tuple[int, dict]:
    out = tmp_path / "out"
    code = main(["build", "--target", str(write_profile(tmp_path, ONNX)), "--model", str(REPO / spec),
                 "--out", str(out), "--quiet"])
    capsys.readouterr()
    return code, json.loads((out / "results.json").read_text())


def test_bert_example_is_validated_at_three_lengths(capsys, tmp_path) -> None:
    code, results = build(capsys, tmp_path, "examples/transformers/bert.toml")
    ort = next(v for v in results["variants"] if v["name"] == "ort")
    assert code == 0 and [lat["size"] for lat in ort["latency"]] == [None, "min", "max"]
    assert all(lat["accuracy"]["task"]["values"]["cosine_worst"] > 0.9999 for lat in ort["latency"])


def test_ssdlite_host_example_matches_the_float_detections(capsys, tmp_path) -> None:
    code, results = build(capsys, tmp_path, "examples/detection/ssdlite-host.toml")
    ort = next(v for v in results["variants"] if v["name"] == "ort")
    assert code == 0 and ort["accuracy"]["task"]["values"]["map50_vs_float"] >= 0.99
