"""TensorRT's onnxslim step and its documented fallbacks: without onnxslim's shape inference where that
crashes, the exported ONNX as it is where onnxslim crashes anyway; each step down returned and noted."""
from __future__ import annotations

import onnx
import onnxslim

from edgeship.backends.tensorrt.lower import simplify
from tests.backends.onnx.test_quantize_preprocess import reduce_then_expand


def shape_infer(model: onnx.ModelProto) -> None:
    raise TypeError("object of type 'NoneType' has no len()")  # as onnxslim's shape inference would


def test_simplify_runs_without_onnxslims_shape_inference_where_it_crashes(tmp_path, monkeypatch) -> None:
    path = reduce_then_expand(tmp_path / "model.onnx")
    calls = []

    def slim(model: str, **options: bool) -> onnx.ModelProto:
        calls.append(options)
        if not options.get("no_shape_infer"):
            shape_infer(onnx.load(model))
        return onnx.load(model)

    monkeypatch.setattr(onnxslim, "slim", slim)
    notes: list[str] = []
    [step] = simplify(path, notes)
    assert calls == [{}, {"no_shape_infer": True}]
    assert step.note() == ("slim: shape inference failed (TypeError in shape_infer: object of type 'NoneType' has "
                           "no len()); ran without it")
    assert notes == [f"onnxslim {onnxslim.__version__}: 4 -> 4 nodes (without shape inference)", step.note()]


def test_simplify_keeps_the_exported_onnx_where_onnxslim_crashes_anyway(tmp_path, monkeypatch) -> None:
    path = reduce_then_expand(tmp_path / "model.onnx")
    before = path.read_bytes()

    def slim(model: str, **options: bool) -> onnx.ModelProto:
        raise ValueError("fusion pattern failed")

    monkeypatch.setattr(onnxslim, "slim", slim)
    notes: list[str] = []
    steps = simplify(path, notes)
    assert path.read_bytes() == before and [s.record()["to"] for s in steps] == [
        "without shape inference", "without simplification"]
    assert notes[-1] == ("slim: simplification failed (ValueError in slim: fusion pattern failed); "
                         "ran without it")
