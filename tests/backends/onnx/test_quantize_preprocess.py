"""ONNX Runtime's pre-processing and its documented fallbacks: a graph its symbolic shape inference
cannot follow, or crashes on, is pre-processed without it (recorded as a step down), one the rest fails
on is quantized as exported; what ORT dumps on a failure stays out of the user's folder."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgeship.backends.onnx import quantize as qonnx
from edgeship.calibration import Dataset


def reduce_then_expand(path: Path) -> Path:
    """A valid model ONNX Runtime 1.32's symbolic shape inference crashes on: an Expand of a ReduceMax
    whose axes are an input (opset 18 and later), which it leaves without a shape (TypeError in
    _infer_Expand). y = (x - max(x)) @ w, as a softmax-style centring before a linear layer."""
    nodes = [helper.make_node("ReduceMax", ["x", "axes"], ["peak"], name="peak", keepdims=1),
             helper.make_node("Expand", ["peak", "shape"], ["peaks"], name="peaks"),
             helper.make_node("Sub", ["x", "peaks"], ["centred"], name="centre"),
             helper.make_node("MatMul", ["centred", "w"], ["y"], name="head")]
    constants = [numpy_helper.from_array(np.array([-1], np.int64), "axes"),
                 numpy_helper.from_array(np.array([1, 4], np.int64), "shape"),
                 numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32), "w")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])]
    graph = helper.make_graph(nodes, "reduce-then-expand", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])], constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path


def test_preprocess_falls_back_without_symbolic_inference_and_leaves_the_cwd_clean(tmp_path, monkeypatch) -> None:
    import onnxruntime.quantization.shape_inference as shape_inference

    calls = []

    def fake(src: str, dest: str, skip_symbolic_shape: bool = False) -> None:
        calls.append(skip_symbolic_shape)
        if not skip_symbolic_shape:  # what ORT does: dump the half-inferred model into the cwd, then raise
            Path("sym_shape_infer_temp.onnx").write_bytes(b"x")
            raise Exception("Incomplete symbolic shape inference")
        Path(dest).write_bytes(b"model")

    monkeypatch.setattr(shape_inference, "quant_pre_process", fake)
    user, work = tmp_path / "user", tmp_path / "work"
    user.mkdir(), work.mkdir()
    monkeypatch.chdir(user)
    done = qonnx.preprocess(Path("m.onnx"), work / "pre.onnx")
    assert calls == [False, True] and done.value.read_bytes() == b"model"
    assert os.listdir(user) == [] and Path.cwd() == user
    assert [s.note() for s in done.steps] == [
        "quant_pre_process: pre-processing failed (Exception in fake: Incomplete symbolic shape inference); "
        "ran without symbolic shape inference"]


def test_preprocess_steps_down_without_symbolic_inference_when_it_crashes_on_an_expand(tmp_path) -> None:
    done = qonnx.preprocess(reduce_then_expand(tmp_path / "m.onnx"), tmp_path / "pre.onnx")
    assert done.rung == "without symbolic shape inference" and onnx.load(str(done.value)).graph.node
    [step] = done.steps
    assert step.note().startswith("quant_pre_process: symbolic shape inference failed (TypeError in _infer_Expand "
                                  "at operator Expand (node 'peaks'): object of type 'NoneType' has no len()")
    assert step.note().endswith("; ran without it")


def test_preprocess_quantizes_the_model_as_exported_when_every_pass_fails(tmp_path, monkeypatch) -> None:
    import onnxruntime.quantization.shape_inference as shape_inference

    def broken(src: str, dest: str, **skip: bool) -> None:
        raise RuntimeError("optimizer: unsupported graph")

    monkeypatch.setattr(shape_inference, "quant_pre_process", broken)
    src = reduce_then_expand(tmp_path / "m.onnx")
    done = qonnx.preprocess(src, tmp_path / "pre.onnx")
    assert done.rung == "without pre-processing" and done.value.read_bytes() == src.read_bytes()
    assert [s.note() for s in done.steps] == [
        "quant_pre_process: pre-processing failed (RuntimeError in broken: optimizer: unsupported graph); "
        "ran without symbolic shape inference",
        "quant_pre_process: ONNX shape inference or graph optimization failed (RuntimeError in broken: optimizer: "
        "unsupported graph); ran without pre-processing"]


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_quantize_onnx_records_the_step_down_when_symbolic_inference_crashes(tmp_path, scheme) -> None:
    src, dest = reduce_then_expand(tmp_path / "m.onnx"), tmp_path / "q" / "model.onnx"
    if scheme == "static":
        data = Dataset({"x": np.random.default_rng(1).standard_normal((8, 4)).astype(np.float32)}, None, "test")
        done = qonnx.quantize_qdq(src, dest, data, sensitivity=False)
    else:
        done = qonnx.quantize_dynamic_onnx(src, dest)
    [record] = done.details["fallbacks"]
    assert (record["vendor"], record["step"], record["operator"], record["to"]) == (
        "ONNX Runtime", "quant_pre_process", "Expand", "without symbolic shape inference")
    assert record["note"] in done.notes
    quantized = {"static": "DequantizeLinear", "dynamic": "DynamicQuantizeLinear"}[scheme]
    assert quantized in {n.op_type for n in onnx.load(str(dest)).graph.node}
