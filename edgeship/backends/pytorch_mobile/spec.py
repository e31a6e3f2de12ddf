"""The pytorch-mobile backend's declaration (PyTorch Mobile): name, suffix, runtime, capture methods,
precisions, its int8 quantizer, its Options model and its answers to the shared hooks."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from edgeship.backends.spec import BackendSpec
from edgeship.config import StrictModel
from edgeship.quantize.settings import QuantizationSupport

MOBILE_QUANTIZATION = QuantizationSupport(
    schemes=("static", "dynamic"), methods=("histogram", "minmax"), default_method="histogram",
    engines="PyTorch quantization (FX graph mode, dynamic)")


class PytorchMobileSpec(BackendSpec):
    """PyTorch Mobile: frozen TorchScript for the lite interpreter (``.ptl``)."""

    name = "pytorch-mobile"
    suffix = ".ptl"
    runtime = "pytorch-mobile"
    device_modules = ("device",)
    native_program = "speed_benchmark_torch"  # native.py
    runs_in_arm_root = True
    capture_methods = ("trace", "script")
    bundle_platforms = ("android",)
    bundle_templates = {"ModelLoader.kt": "app/ModelLoader.kt.j2",
                        "ModelLoader.kt:runtime": "app/ModelLoader.runtime.kt.j2",
                        "README.md:android-runtime": "app/README.android-runtime.md.j2"}
    precisions = ("fp32", "int8")
    quantization = MOBILE_QUANTIZATION
    dynamic_shapes = None  # TorchScript keeps sizes symbolic where the code does; lowering runs min, opt and max

    class Options(StrictModel):
        """Options of the pytorch-mobile backend."""

        bytecode_version: int | None = Field(
            None, ge=3, le=99,
            description="Bytecode version the app's lite runtime reads; the artifact is backported to it.")
        optimize: bool = Field(True, description="Run optimize_for_mobile where this torch build supports it.")
        engine: Literal["qnnpack", "x86", "fbgemm"] = Field(
            "qnnpack", description="Quantized engine int8 variants are built for and run with: qnnpack (ARM "
                                   "phones), x86 or fbgemm.")
