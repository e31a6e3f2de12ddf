"""The tensorrt backend's declaration (TensorRT, from ONNX): name, suffix, runtime, capture methods,
precisions, its int8 quantizer, its Options model and its answers to the shared hooks."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from edgeship.backends.onnx.spec import OnnxSpec
from edgeship.backends.spec import BackendSpec
from edgeship.config import StrictModel
from edgeship.quantize.settings import QuantizationSupport

TENSORRT_QUANTIZATION = QuantizationSupport(
    schemes=("static",), methods=("minmax", "percentile", "entropy"), default_method="minmax",
    engines="TensorRT explicit quantization (ONNX Runtime QDQ, S8S8)")

# Highest ONNX opset each TensorRT release's parser takes (onnx-tensorrt docs/operators.md).
TENSORRT_MAX_OPSET = {"8.5": 17, "8.6": 17, "10.3": 20, "10.7": 20}


class TensorrtSpec(BackendSpec):
    """TensorRT: the ONNX model an engine is built from on the device, and the builder settings."""

    name = "tensorrt"
    suffix = ".onnx"
    runtime = "tensorrt"
    toolchain = ("onnx", "onnxscript", "tensorrt")
    # Building here takes the ONNX tools (TensorRT builds the engine on the device, from JetPack or the
    # tensorrt extra on another NVIDIA machine); ONNX Runtime quantizes int8 and runs the host's stand-in.
    extra = "onnx"
    requires = ("onnx", "onnxruntime", "onnxscript", "onnxslim")
    unsupported_op_patterns = OnnxSpec.unsupported_op_patterns  # its model is torch's ONNX export
    device_modules = ("device", "engine")  # engine.py (tensorrt_engine.py there) builds engines
    runs_in_arm_root = True  # its ONNX, by the ONNX Runtime proxy, as on any device without TensorRT
    capture_methods = ("export", "trace", "script")
    bundle_platforms = ("jetson",)
    bundle_templates = {"README.md:jetson-runs": "app/README.jetson-runs.md.j2"}
    precisions = ("fp32", "fp16", "int8")
    quantization = TENSORRT_QUANTIZATION
    dynamic_shapes = None  # one optimization profile: min, opt and max shapes

    @classmethod
    def dynamic_shape_problems(cls, precision: str, options: dict[str, Any]) -> list[str]:
        if options.get("dla_core") is not None:
            return ["options.dla_core with dynamic dimensions: the DLA takes no dynamic dimensions (TensorRT "
                    "needs min = opt = max for it); leave dla_core unset to build for the GPU"]
        return []

    class Options(StrictModel):
        """Options of the tensorrt backend (settings the device-side builder applies)."""

        tensorrt_version: Literal[tuple(TENSORRT_MAX_OPSET)] = Field(  # type: ignore[valid-type]
            "10.3", description="TensorRT on the device: 8.5 (JetPack 5.1), 8.6 (JetPack 6.0), 10.3 (JetPack "
                                "6.1/6.2), 10.7.")
        opset: int | None = Field(
            None, ge=9, le=99,
            description="ONNX opset; unset: the highest this TensorRT parses, at most 18 (17 needs a trace capture).")
        simplify: bool = Field(True, description="Simplify the graph with onnxslim (constant folding, dead nodes).")
        workspace_mb: int = Field(2048, ge=16, le=1 << 20, description="Builder workspace memory pool limit, MiB.")
        builder_optimization_level: int | None = Field(
            None, ge=0, le=5, description="TensorRT 8.6+: 0-5; unset: TensorRT's default (3).")
        timing_cache: bool = Field(
            True, description="Keep a timing cache beside the engine so rebuilds on the device are quick.")
        dla_core: int | None = Field(
            None, ge=0, le=15, description="Build for this DLA core (Jetson Orin/Xavier); unset: the GPU.")
        gpu_fallback: bool = Field(True, description="With dla_core: let layers DLA cannot run fall back to the GPU.")

        @model_validator(mode="after")
        def _fits_version(self) -> TensorrtSpec.Options:
            top = TENSORRT_MAX_OPSET[self.tensorrt_version]
            if self.opset is not None and self.opset > top:
                raise ValueError(f"opset {self.opset}: TensorRT {self.tensorrt_version} parses opsets 9-{top}")
            version = tuple(map(int, self.tensorrt_version.split(".")))
            if self.builder_optimization_level is not None and version < (8, 6):
                raise ValueError(f"builder_optimization_level needs TensorRT 8.6 or later, not {self.tensorrt_version}")
            return self

        def chosen_opset(self) -> int:
            return self.opset if self.opset is not None else min(TENSORRT_MAX_OPSET[self.tensorrt_version], 18)
