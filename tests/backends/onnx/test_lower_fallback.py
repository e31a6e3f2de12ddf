"""onnx int8 of a sentence-embedding wrapper ONNX Runtime's symbolic shape inference crashes on
(tests/models/embedder.py): the variant builds without that pass, the step down recorded in
lowering.details["fallbacks"] and the notes; a build judges its gates as any other."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from edgeship.calibration import Dataset
from tests.quantize.conftest import lowerer

MODELS = Path(__file__).resolve().parents[2] / "models"
STEP_DOWN = "quant_pre_process: symbolic shape inference failed (TypeError in _infer_Expand at operator Expand"


def embedder_project(folder: Path) -> Path:
    """tests/models/embedder.py beside its model.toml: the spec file."""
    from tests.models.embedder import SPEC

    folder.mkdir()
    shutil.copy(MODELS / "embedder.py", folder / "embedder.py")
    (folder / "model.toml").write_text(SPEC)
    return folder / "model.toml"


@pytest.mark.slow  # ~20 s: transformers' import and the dynamo export of the BERT
def test_onnx_int8_lowers_the_embedding_wrapper_without_symbolic_shape_inference(tmp_path) -> None:
    from edgeship.model import load_model
    from edgeship.spec import load_spec
    from tests.models.embedder import calibration

    model = load_model(load_spec(embedder_project(tmp_path / "project")))
    samples = list(calibration())
    data = Dataset({name: np.concatenate([s[name] for s in samples]) for name in samples[0]}, None, "sentences")
    artifact, predict = lowerer(model, data, tmp_path)("onnx", "export", quantization={"sensitivity": False},
                                                      dynamic_batch=False)
    [record] = artifact.details["fallbacks"]
    assert record["note"].startswith(STEP_DOWN) and record["note"].endswith("; ran without it")
    assert "fallbacks" not in artifact.details["quantization"] and record["note"] in artifact.notes
    assert artifact.details["operators"]["DequantizeLinear"] > 0
    first = samples[0]
    assert predict([first["input_ids"], first["attention_mask"]])[0].shape == (1, 32)


PROFILE = """\
    description = "onnx int8 only"
    [latency]
    warmup = 1
    iterations = 5
    threads = 1
    [[variants]]
    name = "onnx-int8"
    backend = "onnx"
    precision = "int8"
    options = { opset = 20, dynamic_batch = false, activations = "uint8" }
    quantization = { scheme = "static", method = "minmax", per_channel = true, keep_float = "auto" }
    gates = { min_cosine = 0.99, min_cosine_worst = 0.98, min_recall_at_1_vs_float = 0.95 }
    """


@pytest.mark.slow  # ~50 s: a whole build, eager and int8 measured
def test_build_of_the_embedding_wrapper_passes_its_onnx_int8_gates_after_the_step_down(tmp_path) -> None:
    spec = embedder_project(tmp_path / "project")
    profile = tmp_path / "onnx-int8.toml"
    profile.write_text(textwrap.dedent(PROFILE))
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "edgeship", "build", "--target", str(profile), "--model", str(spec),
                          "--out", str(out), "--quiet"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    row = next(v for v in json.loads((out / "results.json").read_text())["variants"] if v["name"] == "onnx-int8")
    assert row["gates"]["passed"] and row["accuracy"]["cosine"] > 0.99
    assert row["lowering"]["details"]["fallbacks"][0]["note"].startswith(STEP_DOWN)
