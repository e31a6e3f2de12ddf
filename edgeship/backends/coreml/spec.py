"""The coreml backend's declaration (Core ML): name, suffix, runtime, capture methods, precisions, its
int8 quantizer, its Options model and its answers to the shared hooks."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from edgeship.backends.spec import BackendSpec
from edgeship.config import StrictModel

COREML_DEPLOYMENT_TARGETS = ("iOS16", "iOS17", "iOS18", "macOS13", "macOS14", "macOS15")
COMPUTE_UNITS = Literal["ALL", "CPU_ONLY", "CPU_AND_GPU", "CPU_AND_NE"]


class CoremlSpec(BackendSpec):
    """Core ML: an ``.mlpackage`` ML program for iOS and macOS."""

    name = "coreml"
    suffix = ".mlpackage"
    runtime = "coreml"
    toolchain = ("coremltools",)
    extra = "coreml"
    requires = ("coremltools",)
    unsupported_op_patterns = (
        r"convert function for op [`'](?P<op>\w+)[`']",
        r"(?:lowering for Torch|converting) [`'](?P<op>\w+)[`'] op",
        # the converter of one torch op failed inside (its traceback: convert_single_node, then the op's function)
        r'in convert_single_node\n(?:(?!\s*File ).*\n)*'
        r'\s*File "[^"]*frontend/torch/ops\.py", line \d+, in _?(?P<op>\w+)',
    )
    device_modules = ("device",)
    capture_methods = ("export", "trace")
    bundle_platforms = ("ios",)
    bundle_templates = {"ModelLoader.swift": "app/ModelLoader.swift.j2",
                        "ModelLoader.swift:imports": "app/ModelLoader.imports.swift.j2",
                        "README.md:ios-files": "app/README.ios-files.md.j2"}
    precisions = ("fp16", "fp32", "w8", "int8")
    dynamic_shapes = None  # ct.RangeDim per dynamic dimension

    class Options(StrictModel):
        """Options of the coreml backend."""

        minimum_deployment_target: Literal[COREML_DEPLOYMENT_TARGETS] = Field(  # type: ignore[valid-type]
            "iOS16", description="Oldest OS the package must run on (ML programs need iOS 16 / macOS 13 or later "
                                 "here).")
        compute_units: COMPUTE_UNITS = Field(  # type: ignore[valid-type]
            "ALL", description="Compute units Core ML may use when the package is loaded and timed.")
        weight_mode: Literal["linear_symmetric", "linear"] = Field(
            "linear_symmetric", description="int8 weight quantization mode (w8 and int8 precisions).")
