"""ONNX Runtime's int8 path: QDQ static quantization (U8S8, S8S8), dynamic, cache, fallback."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from edgeship import metrics
from edgeship.backends.onnx import quantize as qonnx
from edgeship.cache import Cache
from tests.quantize.conftest import keeps_the_culprit


def _run(path: Path, x: np.ndarray, level: str = "all") -> np.ndarray:
    from edgeship.devices.runner import open_runner

    return open_runner("onnxruntime", str(path), {"graph_optimization": level}, 1).infer([x])[0]


def _ops(path: Path) -> dict[str, int]:
    ops: dict[str, int] = {}
    for node in onnx.load(str(path)).graph.node:
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
    return ops


def test_quantize_qdq_u8s8_writes_qdq_close_to_float(tiny_onnx, calib_data, tmp_path) -> None:
    dest = tmp_path / "int8" / "model.onnx"
    done = qonnx.quantize_qdq(tiny_onnx, dest, calib_data)
    model = onnx.load(str(dest))
    activation_q = [n for n in model.graph.node if n.op_type == "QuantizeLinear"]
    assert activation_q and _ops(dest)["DequantizeLinear"] > len(activation_q)
    zero_point = next(i for i in model.graph.initializer if i.name == activation_q[0].input[2])
    assert zero_point.data_type == onnx.TensorProto.UINT8
    x = calib_data.inputs["image"][:4]
    assert metrics.sqnr_db(_run(tiny_onnx, x), _run(dest, x)) > 20
    assert done.details["format"] == "QDQ" and done.details["per_channel"] is True
    assert "U8S8" in done.notes[0] and "minmax calibration on 32 samples" in done.notes[0]


def test_quantize_qdq_s8s8_is_symmetric_and_reads_well_unoptimized(tiny_onnx, calib_data, tmp_path) -> None:
    dest = tmp_path / "s8s8.onnx"
    qonnx.quantize_qdq(tiny_onnx, dest, calib_data, activations="int8-symmetric", per_channel=True)
    model = onnx.load(str(dest))
    inits = {i.name: i for i in model.graph.initializer}
    zero_points = [onnx.numpy_helper.to_array(inits[n.input[2]]) for n in model.graph.node
                   if n.op_type == "QuantizeLinear" and len(n.input) > 2 and n.input[2] in inits]
    assert zero_points and all(z.dtype == np.int8 and not z.any() for z in zero_points)
    per_channel = [n for n in model.graph.node if n.op_type == "DequantizeLinear"
                   and onnx.numpy_helper.to_array(inits[n.input[1]]).size > 1] if inits else []
    assert per_channel, "per-channel weight scales expected"
    x = calib_data.inputs["image"][:4]
    assert metrics.sqnr_db(_run(tiny_onnx, x), _run(dest, x, level="disabled")) > 20


def test_quantize_qdq_calibrates_once_per_key(tiny_onnx, calib_data, tmp_path, monkeypatch) -> None:
    calls = []
    real = qonnx.calibrate_ranges
    monkeypatch.setattr(qonnx, "calibrate_ranges", lambda *a: calls.append(a[3]) or real(*a))
    cache = Cache(tmp_path / "cache")
    first = qonnx.quantize_qdq(tiny_onnx, tmp_path / "a.onnx", calib_data, cache=cache, sensitivity=False)
    second = qonnx.quantize_qdq(tiny_onnx, tmp_path / "b.onnx", calib_data, cache=cache, sensitivity=False)
    assert calls == ["minmax"]
    assert (first.details["calibration"]["cache"], second.details["calibration"]["cache"]) == ("miss", "hit")
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()
    qonnx.quantize_qdq(tiny_onnx, tmp_path / "c.onnx", calib_data, cache=cache, sensitivity=False, method="entropy")
    assert calls == ["minmax", "entropy"]


def test_quantize_qdq_keep_float_leaves_the_worst_nodes_unquantized(tiny_onnx, calib_data, tmp_path) -> None:
    dest = tmp_path / "kf" / "model.onnx"
    done = qonnx.quantize_qdq(tiny_onnx, dest, calib_data, keep_float=1, method="percentile")
    report = json.loads((dest.parent / "sensitivity.json").read_text())
    sqnrs = [row["own_sqnr_db"] for row in report["layers"] if row["own_sqnr_db"] is not None]
    assert sqnrs == sorted(sqnrs) and report["layers"][0]["layer"] == done.details["kept_float"][0]
    assert report["keep_float_ranking"] == "own" and all("sqnr_db" in row for row in report["layers"])
    kept = next(n for n in onnx.load(str(dest)).graph.node if n.name == done.details["kept_float"][0])
    assert kept.op_type in ("Conv", "Gemm") and not kept.input[1].endswith("DequantizeLinear_Output")
    quantized = [n for n in onnx.load(str(dest)).graph.node if n.op_type == kept.op_type and n.name != kept.name]
    assert all(n.input[1].endswith("DequantizeLinear_Output") for n in quantized)


def test_quantize_dynamic_onnx_quantizes_gemm_only(tiny_onnx, tmp_path) -> None:
    dest = tmp_path / "dyn.onnx"
    done = qonnx.quantize_dynamic_onnx(tiny_onnx, dest)
    ops = _ops(dest)
    assert "DynamicQuantizeLinear" in ops and "Conv" in ops and done.details["scheme"] == "dynamic"
    x = np.random.default_rng(1).random((2, 3, 16, 16), dtype=np.float32)
    assert metrics.sqnr_db(_run(tiny_onnx, x), _run(dest, x)) > 20


@pytest.mark.parametrize("method", ["percentile", "entropy"])
def test_quantize_qdq_histogram_methods_calibrate(tiny_onnx, calib_data, tmp_path, method) -> None:
    done = qonnx.quantize_qdq(tiny_onnx, tmp_path / f"{method}.onnx", calib_data, method=method, sensitivity=False)
    assert done.details["method"] == method and (tmp_path / f"{method}.onnx").stat().st_size > 0


def test_quantize_qdq_keep_float_keeps_the_layer_whose_own_error_costs_most(lower_culprit, culprit_model) -> None:
    kept, all_int8, one_float = keeps_the_culprit(lower_culprit, culprit_model, "onnx", "export")
    model = onnx.load(str(kept.path))
    (first,) = [n for n in model.graph.node if n.name == kept.details["quantization"]["kept_float"][0]]
    assert first.input[0] == model.graph.input[0].name  # the first layer, reading the float input
    assert one_float > all_int8 + 8, (all_int8, one_float)
