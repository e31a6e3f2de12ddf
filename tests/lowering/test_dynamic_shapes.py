"""Dynamic dimensions through capture and every backend: tiny models with a variable sequence length
(embedding + linear, two inputs sharing the length) and a conv net with variable height and width,
lowered, run at the spec's min, opt and max sizes and compared with the float model."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from edgeship import metrics, shapes
from edgeship.backends.base import LowerRequest
from edgeship.backends.registry import BACKENDS
from edgeship.backends.tensorrt import engine as tensorrt_engine
from edgeship.calibration.datasets import random_batch, random_dataset
from edgeship.errors import LoweringError
from edgeship.lowering.capture import CaptureFailed, Capturer
from edgeship.model import load_model
from edgeship.profile import Variant
from edgeship.spec import ModelSpec
from tests import system

HERE = "tests.lowering.test_dynamic_shapes"


class SeqNet(nn.Module):
    """Token embeddings masked by attention_mask, then a linear layer per position: [1, L] -> [1, L, 4]."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(100, 16)
        self.head = nn.Linear(16, 4)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(input_ids) * attention_mask.unsqueeze(-1).to(torch.float32))


class ConvNet(nn.Module):
    """Two convolutions over any height and width: [1, 3, H, W] -> [1, 4, H, W]."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 3, padding=1))

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.body(image)


class FixedLength(nn.Module):
    """Reads the sequence length as a Python int: a trace keeps the example's length."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = int(x.shape[1])
        return self.head(x.reshape(1, length, 16))


def build_seq() -> SeqNet:
    return SeqNet()


def build_conv() -> ConvNet:
    return ConvNet()


def build_fixed() -> FixedLength:
    return FixedLength()


SEQ = {"name": "seq", "entry": f"{HERE}:build_seq", "inputs": [
    {"name": "input_ids", "shape": [1, 16], "dtype": "int64", "dynamic": {"1": {"min": 1, "max": 64}},
     "range": [0, 100]},
    {"name": "attention_mask", "shape": [1, 16], "dtype": "int64", "dynamic": {"1": {"min": 1, "max": 64}},
     "range": [0, 2]}]}
CONV = {"name": "conv", "entry": f"{HERE}:build_conv", "inputs": [
    {"name": "image", "shape": [1, 3, 16, 16], "dynamic": {"2": {"min": 8, "max": 32}, "3": {"min": 8, "max": 24}}}]}


def loaded(data: dict) -> object:
    return load_model(ModelSpec.model_validate(data))


@pytest.fixture(scope="module")
def seq_model():
    return loaded(SEQ)


@pytest.fixture(scope="module")
def conv_model():
    return loaded(CONV)


def lower(model, backend_name: str, method: str, tmp_path: Path, precision: str = "fp32", **options):
    """Capture, lower one variant, and return (artifact, predict)."""
    backend = BACKENDS[backend_name]
    parsed = backend.parse_options(options)
    variant = Variant(name=f"d-{backend_name}-{precision}", backend=backend_name, precision=precision,
                      options=options)
    captured = Capturer(model).get(method, backend.wants_dynamic_batch(parsed))
    dest = tmp_path / variant.name / f"model{backend.suffix}"
    request = LowerRequest(captured, variant, parsed, dest, calibration=lambda: random_dataset(model.spec, 16))
    artifact = backend.lower(request)
    predict = backend.load(artifact.path, parsed, threads=1) if backend.available(parsed) is None else None
    return artifact, predict


def assert_matches_eager_at_every_size(model, predict, min_sqnr_db: float = 60.0) -> None:
    """The artifact at min, opt and max against the float model on the same seeded inputs."""
    assert set(shapes.sizes(model.spec)) == {"min", "opt", "max"}
    for size in ("min", "opt", "max"):
        arrays = random_batch(model.spec, size, seed=7)
        with torch.no_grad():
            ref = model.module(*[torch.from_numpy(a) for a in arrays]).numpy()
        out = predict(arrays)[0]
        assert out.shape == ref.shape, size
        sqnr = metrics.sqnr_db(ref, out)
        assert sqnr is None or sqnr >= min_sqnr_db, (size, sqnr)


# --- capture ---------------------------------------------------------------------------------------------------------

def test_capture_export_shares_one_dim_between_inputs_that_must_be_equal(seq_model) -> None:
    program = Capturer(seq_model).get("export").program
    for length in (1, 64):
        ids, mask = torch.zeros(1, length, dtype=torch.int64), torch.ones(1, length, dtype=torch.int64)
        assert program.module()(ids, mask).shape == (1, length, 4)
    bounds = sorted((int(r.lower), int(r.upper)) for r in program.range_constraints.values())
    assert bounds == [(1, 64)]  # one symbol for both inputs' length


def test_capture_export_frees_a_dimension_whose_opt_is_one(tmp_path: Path) -> None:
    data = {**SEQ, "inputs": [{**i, "shape": [1, 1]} for i in SEQ["inputs"]]}
    program = Capturer(loaded(data)).get("export").program
    out = program.module()(torch.zeros(1, 40, dtype=torch.int64), torch.ones(1, 40, dtype=torch.int64))
    assert out.shape == (1, 40, 4)


def test_capture_export_explains_dimensions_the_model_requires_equal() -> None:
    data = {**SEQ, "inputs": [SEQ["inputs"][0], {**SEQ["inputs"][1], "dynamic": {"1": {"min": 1, "max": 64,
                                                                                          "name": "mask_len"}}}]}
    with pytest.raises(CaptureFailed, match="does not take the spec's dynamic dimensions.*must always be equal"):
        Capturer(loaded(data)).get("export")


def test_capture_export_with_dynamic_batch_keeps_the_spec_dims(conv_model) -> None:
    program = Capturer(conv_model).get("export", dynamic_batch=True).program
    assert program.module()(torch.rand(3, 3, 8, 24)).shape == (3, 4, 8, 24)


# --- onnx -------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("method", ["export", "trace"])
def test_onnx_dynamic_seq_runs_at_min_opt_max_with_named_dims(seq_model, tmp_path: Path, method: str) -> None:
    artifact, predict = lower(seq_model, "onnx", method, tmp_path, dynamic_batch=False)
    inputs = {i["name"]: i["shape"] for i in artifact.details["inputs"]}
    assert inputs == {"input_ids": [1, "input_ids_dim1"], "attention_mask": [1, "input_ids_dim1"]}
    assert artifact.details["outputs"][0]["name"] == "output"
    assert any(n.startswith("ran at the spec's sizes") for n in artifact.notes)
    assert_matches_eager_at_every_size(seq_model, predict)


def test_onnx_export_names_batch_and_spec_dims_in_inputs_and_outputs(conv_model, tmp_path: Path) -> None:
    artifact, predict = lower(conv_model, "onnx", "export", tmp_path)
    assert artifact.details["inputs"][0]["shape"] == ["batch", 3, "image_dim2", "image_dim3"]
    assert artifact.details["outputs"][0]["shape"] == ["batch", 4, "image_dim2", "image_dim3"]
    assert_matches_eager_at_every_size(conv_model, predict)
    assert predict([np.random.default_rng(0).random((2, 3, 8, 24), dtype=np.float32)])[0].shape == (2, 4, 8, 24)


def test_onnx_int8_static_takes_every_size(conv_model, tmp_path: Path) -> None:
    artifact, predict = lower(conv_model, "onnx", "export", tmp_path, precision="int8")
    assert artifact.details["inputs"][0]["shape"][2:] == ["image_dim2", "image_dim3"]
    assert_matches_eager_at_every_size(conv_model, predict, min_sqnr_db=20.0)


# --- executorch -----------------------------------------------------------------------------------------------------

def test_executorch_xnnpack_runs_at_min_opt_max_and_refuses_beyond_max(seq_model, tmp_path: Path) -> None:
    artifact, predict = lower(seq_model, "executorch", "export", tmp_path)
    assert any(n.startswith("ran at the spec's sizes") for n in artifact.notes)
    assert artifact.details["delegated_nodes"] > 0
    assert_matches_eager_at_every_size(seq_model, predict)
    too_long = [np.zeros((1, 65), np.int64), np.ones((1, 65), np.int64)]
    with pytest.raises(Exception, match="set_inputs"):
        predict(too_long)


def test_executorch_conv_hw_runs_at_min_opt_max(conv_model, tmp_path: Path) -> None:
    _, predict = lower(conv_model, "executorch", "export", tmp_path)
    assert_matches_eager_at_every_size(conv_model, predict)


def test_executorch_int8_takes_every_size(conv_model, tmp_path: Path) -> None:
    """The PT2E-quantized module is exported again with the spec's Dims, so the .pte takes the range."""
    assert BACKENDS["executorch"].dynamic_shape_problems("int8", {}) == []
    _, predict = lower(conv_model, "executorch", "export", tmp_path, precision="int8")
    assert_matches_eager_at_every_size(conv_model, predict, min_sqnr_db=20.0)


# --- pytorch-mobile ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("method", ["trace", "script"])
def test_mobile_seq_runs_at_min_opt_max(seq_model, tmp_path: Path, method: str) -> None:
    artifact, predict = lower(seq_model, "pytorch-mobile", method, tmp_path)
    assert any(n.startswith("ran at the spec's sizes") for n in artifact.notes)
    assert_matches_eager_at_every_size(seq_model, predict)


def test_mobile_int8_fx_conv_takes_every_size(conv_model, tmp_path: Path) -> None:
    _, predict = lower(conv_model, "pytorch-mobile", "trace", tmp_path, precision="int8", engine="x86")
    assert_matches_eager_at_every_size(conv_model, predict, min_sqnr_db=20.0)


def test_mobile_trace_that_keeps_the_example_length_fails_naming_the_size(tmp_path: Path) -> None:
    model = loaded({"name": "fixed", "entry": f"{HERE}:build_fixed", "inputs": [
        {"name": "x", "shape": [1, 8, 16], "dynamic": {"1": {"min": 4, "max": 32}}}]})
    with pytest.raises(LoweringError, match=r"does not run at the min size \(x \[1, 4, 16\]\)"):
        lower(model, "pytorch-mobile", "trace", tmp_path)


# --- tensorrt ---------------------------------------------------------------------------------------------------------

def test_tensorrt_engine_settings_and_trtexec_carry_min_opt_max(seq_model, tmp_path: Path) -> None:
    artifact, _ = lower(seq_model, "tensorrt", "export", tmp_path)
    settings = json.loads((artifact.path.parent / "engine.json").read_text())
    assert settings["shapes"] == {"min": {"input_ids": [1, 1], "attention_mask": [1, 1]},
                                  "opt": {"input_ids": [1, 16], "attention_mask": [1, 16]},
                                  "max": {"input_ids": [1, 64], "attention_mask": [1, 64]}}
    command = tensorrt_engine.trtexec_command(settings)
    assert "--minShapes=input_ids:1x1,attention_mask:1x1" in command
    assert "--optShapes=input_ids:1x16,attention_mask:1x16" in command
    assert "--maxShapes=input_ids:1x64,attention_mask:1x64" in command
    assert "--shapes=input_ids:1x16,attention_mask:1x16" in command
    assert "--shapes=input_ids:1x64,attention_mask:1x64" in tensorrt_engine.trtexec_command(
        {**settings, "run_size": "max"})
    assert any(n.startswith("ONNX Runtime (host proxy) ran at the spec's sizes") for n in artifact.notes)
    model = onnx.load(str(artifact.path))
    assert [d.dim_param for d in model.graph.input[0].type.tensor_type.shape.dim] == ["", "input_ids_dim1"]


def test_tensorrt_build_engine_adds_one_profile_from_the_settings() -> None:
    calls = []

    class Profile:
        def set_shape(self, name, low, opt, high):
            calls.append((name, low, opt, high))

    class Builder:
        def create_optimization_profile(self):
            return Profile()

    class Config:
        def add_optimization_profile(self, profile):
            calls.append("added")

    class Network:  # one input, [1, -1]: what TensorRT's parser makes of a free dimension
        num_inputs = 1

        def get_input(self, index):
            return type("Tensor", (), {"name": "x", "shape": (1, -1)})()

    settings = {"onnx": "model.onnx", "shapes": {"min": {"x": [1, 4]}, "opt": {"x": [1, 8]}, "max": {"x": [1, 32]}}}
    tensorrt_engine.add_profile(Builder(), Network(), Config(), settings)
    assert calls == [("x", (1, 4), (1, 8), (1, 32)), "added"]
    with pytest.raises(RuntimeError, match=r"model.onnx has dynamic dimensions \(x \[1, -1\]\) but the engine "
                                           "settings give no min/opt/max shapes"):
        tensorrt_engine.add_profile(Builder(), Network(), Config(), {"onnx": "model.onnx"})
    assert len(calls) == 2
    assert tensorrt_engine.shape_flags({}) == []


# --- coreml -----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("method", ["export", "trace"])
def test_coreml_package_has_the_spec_ranges(conv_model, tmp_path: Path, method: str) -> None:
    pytest.importorskip("coremltools", reason=system.reason("python", "coremltools is not installed (make setup)"))
    artifact, _ = lower(conv_model, "coreml", method, tmp_path)
    image = artifact.details["inputs"][0]
    assert image["shape"] == [1, 3, 16, 16]
    assert image["ranges"] == [[1, 1], [3, 3], [8, 32], [8, 24]]
    assert any("ct.RangeDim" in n for n in artifact.notes)


def test_coreml_takes_int64_token_ids_as_int32_with_their_range(seq_model, tmp_path: Path) -> None:
    pytest.importorskip("coremltools", reason=system.reason("python", "coremltools is not installed (make setup)"))
    artifact, _ = lower(seq_model, "coreml", "export", tmp_path)
    ids, mask = artifact.details["inputs"]
    assert (ids["name"], ids["dtype"], ids["ranges"]) == ("input_ids", "int32", [[1, 1], [1, 64]])
    assert mask["dtype"] == "int32"
    assert "input input_ids: int64 in the model, int32 in the Core ML package (Core ML has no int64 inputs); the " \
           "spec's range [0, 100) fits" in artifact.notes


def test_coreml_refuses_int64_values_beyond_int32() -> None:
    from edgeship.backends.coreml.lower import int32_notes
    from edgeship.errors import LoweringError

    spec = ModelSpec.model_validate({**SEQ, "inputs": [{**SEQ["inputs"][0], "range": [0, 2**40]}]})
    with pytest.raises(LoweringError, match=r"input input_ids: range \[0, 1.09951e\+12\) does not fit in int32"):
        int32_notes(spec)


# --- profile check ----------------------------------------------------------------------------------------------------

def test_profile_check_refuses_what_cannot_take_dynamic_dims(seq_model) -> None:
    from edgeship.profile.checks import dynamic_shape_problems
    from edgeship.profile.models import Profile

    variants = [{"name": "et-int8", "backend": "executorch", "precision": "int8"},
                {"name": "et-fp32", "backend": "executorch", "precision": "fp32"},
                {"name": "trt-dla", "backend": "tensorrt", "precision": "fp16", "options": {"dla_core": 0}},
                {"name": "onnx-int8", "backend": "onnx", "precision": "int8"},
                {"name": "mobile-int8", "backend": "pytorch-mobile", "precision": "int8"}]
    profile = Profile.model_validate({"name": "t", "variants": variants})
    problems = dynamic_shape_problems(profile, seq_model.spec)
    assert [p.split(":")[0] for p in problems] == ["variants[2] (trt-dla)"]
    assert "input_ids[1], attention_mask[1] (input_ids_dim1): 1..64, opt 16" in problems[0]
    static = ModelSpec.model_validate({"name": "s", "entry": "m:f", "inputs": [{"shape": [1, 3]}]})
    assert dynamic_shape_problems(profile, static) == []
