"""The onnx-web backend's declaration (onnxruntime-web in the browser): name, suffix, runtime, capture
methods, precisions, its int8 quantizer, its Options model and its answers to the shared hooks."""
from __future__ import annotations

from typing import Any

from pydantic import Field

from edgeship.backends.onnx.spec import ONNX_QUANTIZATION, OnnxSpec
from edgeship.backends.spec import BackendSpec

# fp16 in onnxruntime-web's wasm backend, measured in Chromium (make bench-web-settings, resnet18, 2
# threads, docs/ARCHITECTURE.md "Browser"): no faster than fp32, and below the fp32 gate.
WEB_FP16_REFUSAL = ("precision \"fp16\" is refused for onnx-web: measured in Chromium, onnxruntime-web's wasm "
                    "backend ran resnet18 in fp16 no faster than in fp32 (96.4 vs 92.4 ms, 0.97x [0.87, 1.00]) at "
                    "57.0 dB, below the 60 dB fp32 gate; its only gain was half the file, and web-int8 is a quarter "
                    "of it and 1.8x faster (28.3 dB): ship web-fp32 or web-int8")


class OnnxWebSpec(BackendSpec):
    """onnxruntime-web: an ``.onnx`` for the browser's WebAssembly backend, run in Chromium."""

    name = "onnx-web"
    suffix = ".onnx"
    runtime = "onnxruntime-web"
    toolchain = ("onnx", "onnxscript")
    extra = "web"
    requires = ("onnx", "onnxruntime", "onnxscript")  # ONNX Runtime: int8 and the build machine's checks
    unsupported_op_patterns = OnnxSpec.unsupported_op_patterns  # the same exporters
    capture_methods = ("export", "trace", "script")
    bundle_platforms = ("web",)
    bundle_templates = {"README.md:web": "app/README.web.md.j2"}
    precisions = ("fp32", "fp16", "int8")
    quantization = ONNX_QUANTIZATION
    dynamic_shapes = None  # the same free dimensions as the onnx backend; wasm sessions take any size

    class Options(OnnxSpec.Options):
        """Options of the onnx-web backend: the onnx backend's, with the browser's defaults."""

        opset: int = Field(20, ge=7, le=21, description="ONNX opset (onnxruntime-web 1.30 runs opsets 7-21).")
        dynamic_batch: bool = Field(False, description="Leave the batch dimension free (named 'batch').")
        reduce_range: bool = Field(
            False, description="int8 static: 7-bit weights. Off: the wasm SIMD int8 kernels widen to 16 bits "
                               "before they add, so 8-bit weights do not saturate there.")

    @classmethod
    def toolchain_others(cls) -> dict[str, str]:
        from edgeship.webfiles import ort_web_version

        version = ort_web_version()
        return {"onnxruntime-web": version} if version else {}

    @classmethod
    def variant_problems(cls, precision: str, options: dict[str, Any]) -> list[str]:
        return [WEB_FP16_REFUSAL] if precision == "fp16" else []
