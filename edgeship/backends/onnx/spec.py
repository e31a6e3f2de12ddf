"""The onnx backend's declaration (ONNX Runtime): name, suffix, runtime, capture methods, precisions,
its int8 quantizer, its Options model and its answers to the shared hooks."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from edgeship.backends.spec import BackendSpec, TargetCpu, Variant
from edgeship.config import StrictModel
from edgeship.quantize.settings import QuantizationSupport, needs_calibration

ONNX_QUANTIZATION = QuantizationSupport(
    schemes=("static", "dynamic"), methods=("minmax", "percentile", "entropy"), default_method="minmax",
    engines="ONNX Runtime quantization")


class OnnxSpec(BackendSpec):
    """ONNX: an ``.onnx`` model run by ONNX Runtime."""

    name = "onnx"
    suffix = ".onnx"
    runtime = "onnxruntime"
    toolchain = ("onnx", "onnxruntime", "onnxscript")
    extra = "onnx"
    requires = ("onnx", "onnxruntime", "onnxscript")
    # What torch's ONNX exporters say of an operator they cannot export: TorchScript-based, dynamo.
    unsupported_op_patterns = (r"Exporting the operator '(?P<ns>\w+)::(?P<op>\w+)'",
                               r"No ONNX function found for <OpOverload\(op='(?P<ns>\w+)\.(?P<op>\w+)'")
    device_modules = ("device",)
    runs_in_arm_root = True
    capture_methods = ("export", "trace", "script")
    bundle_platforms = ("jetson", "x86")
    # run_onnxruntime.py (numpy and onnxruntime): loads a model, runs it on .npy inputs, prints and times it.
    bundle_programs = {"x86": {"python/run_onnxruntime.py": "app/run_onnxruntime.py"}}
    bundle_templates = {"README.md:jetson-runs": "app/README.jetson-runs.md.j2"}
    precisions = ("fp32", "int8")
    quantization = ONNX_QUANTIZATION
    dynamic_shapes = None  # free dimensions named by the spec's groups

    class Options(StrictModel):
        """Options of the onnx backend."""

        opset: int = Field(20, ge=7, le=23, description="ONNX opset; below 18 needs a trace or script capture.")
        dynamic_batch: bool = Field(True, description="Leave the batch dimension free (named 'batch').")
        graph_optimization: Literal["disabled", "basic", "extended", "all"] = Field(
            "all", description="ONNX Runtime graph optimization level when the artifact is run.")
        activations: Literal["uint8", "int8-symmetric"] = Field(
            "uint8", description="int8 static: uint8 activations (U8S8, fast on CPUs) or symmetric int8 (S8S8, "
                                 "TensorRT's form).")
        reduce_range: bool | None = Field(
            None, description="int8 static: 7-bit weights; unset: chosen from the target CPUs, on when one is x86 "
                              "without VNNI (its kernels saturate otherwise) or unknown, off when all have VNNI or "
                              "are ARM.")

    @classmethod
    def reads_cpus(cls, variant: Variant) -> bool:
        """Static int8 with reduce_range left unset: lowering picks reduce_range by the target CPUs."""
        return (needs_calibration(variant.precision, variant.quantization)
                and cls.parse_options(variant.options).reduce_range is None)

    @classmethod
    def cpu_dependence(cls, variant: Variant, cpus: list[TargetCpu]) -> dict[str, Any] | None:
        """The reduce_range lowering chooses on ``cpus``, and why."""
        from edgeship.backends.onnx.cpu import choose_reduce_range

        if not cls.reads_cpus(variant):
            return None
        options = cls.parse_options(variant.options)
        value, why = choose_reduce_range(options.reduce_range, options.activations, cpus)
        return {"reduce_range": {"value": value, "why": why}}
