"""onnx: checked models with named inputs, a dynamic batch and the opset the profile asks for."""
from __future__ import annotations

import onnx
import pytest

from edgeship.errors import LoweringError
from tests.lowering.conftest import sqnr_against_eager


def test_onnx_export_has_spec_names_and_dynamic_batch(lower, tiny_model) -> None:
    artifact, predict = lower("onnx", "export")
    details = artifact.details
    assert details["opset"] == 20 and details["inputs"][0]["name"] == "image"
    assert details["inputs"][0]["shape"][0] == "batch" and details["outputs"][0]["name"] == "output"
    assert sqnr_against_eager(tiny_model, predict, batch=3) >= 60


def test_onnx_trace_capture_writes_older_opsets(lower, tiny_model) -> None:
    artifact, predict = lower("onnx", "trace", opset=13)
    assert onnx.load(str(artifact.path)).opset_import[0].version == 13
    assert sqnr_against_eager(tiny_model, predict, batch=2) >= 60


def test_onnx_old_opset_from_export_capture_explains_the_fix(lower) -> None:
    with pytest.raises(LoweringError, match="opset 13: .* put trace or script first"):
        lower("onnx", "export", opset=13)


def test_onnx_static_batch_when_asked(lower) -> None:
    artifact, _ = lower("onnx", "export", dynamic_batch=False)
    assert artifact.details["inputs"][0]["shape"][0] == 1


def test_onnx_exports_a_data_dependent_program_twice(tmp_path) -> None:
    """An output whose length depends on the data (detections after NMS) leaves unbacked symbols
    in the program; the fp32 variant and the int8 variant's fp32 graph both export it."""
    import torch

    from edgeship.backends.onnx.lower import export_onnx
    from edgeship.lowering.capture import Capturer
    from edgeship.model import LoadedModel
    from edgeship.spec import ModelSpec

    class Keep(torch.nn.Module):
        def forward(self, x):
            scores = x.flatten()
            return scores[torch.nonzero(scores > 0.5).flatten()]

    spec = ModelSpec(name="m", entry="m:build", inputs=[{"name": "x", "shape": [1, 16]}])
    model = LoadedModel(spec, Keep().eval(), (torch.rand(1, 16, generator=torch.Generator().manual_seed(0)),), 0)
    captured = Capturer(model).get("export")
    for name in ("fp32.onnx", "again.onnx"):
        export_onnx(captured, 20, False, tmp_path / name)
    import onnxruntime as ort

    x = model.example_inputs[0].numpy()
    out = ort.InferenceSession(str(tmp_path / "again.onnx")).run(None, {"x": x})[0]
    assert (out == x.ravel()[x.ravel() > 0.5]).all()
