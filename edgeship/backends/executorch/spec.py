"""The executorch backend's declaration (ExecuTorch): name, suffix, runtime, capture methods,
precisions, its int8 quantizer, its Options model and its answers to the shared hooks."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from edgeship.backends.coreml.spec import COMPUTE_UNITS, COREML_DEPLOYMENT_TARGETS
from edgeship.backends.spec import BackendSpec
from edgeship.config import StrictModel
from edgeship.quantize.settings import QuantizationSupport

EXECUTORCH_QUANTIZATION = QuantizationSupport(
    schemes=("static", "dynamic"), methods=("histogram", "minmax"), default_method="histogram",
    engines="PT2E with the XNNPACK quantizer")


APPLE_ONLY_PARTITIONERS = ("coreml", "mps")  # delegates whose programs run on Apple platforms only


class ExecutorchSpec(BackendSpec):
    """ExecuTorch: a ``.pte`` program delegated to XNNPACK, to Core ML, or portable operators only."""

    name = "executorch"
    suffix = ".pte"
    runtime = "executorch"
    toolchain = ("executorch", "torchao")
    extra = "executorch"
    requires = ("executorch", "torchao")
    unsupported_op_patterns = (r"Missing out variants: \{'(?P<ns>\w+)::(?P<op>\w+)",)  # to_executorch's check
    device_modules = ("device",)
    native_program = "executor_runner"  # native.py
    runs_in_arm_root = True
    capture_methods = ("export",)
    bundle_platforms = ("android", "ios")
    bundle_templates = {"ModelLoader.kt": "app/ModelLoader.kt.j2",
                        "ModelLoader.kt:runtime": "app/ModelLoader.runtime.kt.j2",
                        "ModelLoader.swift": "app/ModelLoader.swift.j2",
                        "ModelLoader.swift:imports": "app/ModelLoader.imports.swift.j2",
                        "README.md:android-runtime": "app/README.android-runtime.md.j2",
                        "README.md:ios-steps": "app/README.ios-steps.md.j2"}
    precisions = ("fp32", "fp16", "int8")
    quantization = EXECUTORCH_QUANTIZATION
    dynamic_shapes = None  # upper-bounded: memory is planned for the max sizes

    class Options(StrictModel):
        """Options of the executorch backend."""

        partitioner: Literal["xnnpack", "coreml", "portable"] = Field(
            "xnnpack", description="xnnpack delegates what XNNPACK runs; coreml delegates to Core ML (Apple "
                                   "devices; fp16 or fp32); portable keeps ExecuTorch's portable operators.")
        minimum_deployment_target: Literal[COREML_DEPLOYMENT_TARGETS] = Field(  # type: ignore[valid-type]
            "iOS16", description="With partitioner coreml: the oldest OS the delegated program runs on.")
        compute_units: COMPUTE_UNITS = Field(  # type: ignore[valid-type]
            "ALL", description="With partitioner coreml: compute units Core ML may use.")

    @classmethod
    def platform_problem(cls, platform: str, options: dict[str, Any]) -> str | None:
        partitioner = options.get("partitioner")
        if platform == "android" and partitioner in APPLE_ONLY_PARTITIONERS:
            return f"an ExecuTorch program delegated to {partitioner} runs only on Apple platforms"
        return None

    @classmethod
    def variant_problems(cls, precision: str, options: dict[str, Any]) -> list[str]:
        partitioner = options.get("partitioner", "xnnpack")
        if precision == "fp16" and partitioner != "coreml":
            return ['precision "fp16" needs options.partitioner = "coreml" (XNNPACK and portable run fp32 or int8)']
        if precision == "int8" and partitioner == "coreml":
            return ['precision "int8" quantizes for XNNPACK (PT2E); with partitioner "coreml" use fp16 or fp32']
        return []
