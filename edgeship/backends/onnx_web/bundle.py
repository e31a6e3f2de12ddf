"""What an app bundle needs to know of the onnx-web backend's artifact (model.json's ``runtime``)."""
from __future__ import annotations

from typing import Any

from edgeship.backends.onnx_web.spec import OnnxWebSpec
from edgeship.results import VariantResult


def runtime_needs(row: VariantResult, options: OnnxWebSpec.Options, toolchain: dict[str, str]) -> dict[str, Any]:
    """What runs this backend's artifact, for the bundle's model.json: the runtime, the version that wrote
    it and what it needs."""
    details = row.lowering.details
    opset = details.get("opset")
    measured = toolchain.get("onnxruntime-web")
    return {"runtime": "onnxruntime-web (WebAssembly backend: SIMD, threads when the page is cross-origin isolated)",
            "written_by": f"torch {toolchain.get('torch', 'unknown')}", "opset": opset,
            "format": "QDQ (int8 QuantizeLinear/DequantizeLinear pairs)" if row.precision == "int8" else "float",
            "build_toolchain": f"onnxruntime-web {measured}" if measured else None,
            "needs": f"onnxruntime-web with the wasm backend, reading ONNX opset {opset} (the bundle serves its own "
                     "copy from ort/)", "graph_optimization": options.graph_optimization,
            "inputs": details.get("inputs"), "outputs": details.get("outputs")}
