"""What an app bundle needs to know of the onnx backend's artifact (model.json's ``runtime``)."""
from __future__ import annotations

from typing import Any

from edgeship.backends.onnx.spec import OnnxSpec
from edgeship.results import VariantResult


def runtime_needs(row: VariantResult, options: OnnxSpec.Options, toolchain: dict[str, str]) -> dict[str, Any]:
    """What runs this backend's artifact, for the bundle's model.json: the runtime, the version that wrote
    it and what it needs."""
    details = row.lowering.details
    opset = details.get("opset")
    qdq = row.precision == "int8"
    return {"runtime": "ONNX Runtime (on a Jetson also TensorRT, from an engine built on the device)",
            "written_by": f"torch {toolchain.get('torch', 'unknown')}", "opset": opset,
            "format": "QDQ (int8 QuantizeLinear/DequantizeLinear pairs)" if qdq else "float",
            "needs": f"a runtime that reads ONNX opset {opset}",
            "graph_optimization": options.graph_optimization, "inputs": details.get("inputs"),
            "outputs": details.get("outputs")}
