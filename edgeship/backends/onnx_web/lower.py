"""onnxruntime-web: the ``.onnx`` a web page runs with onnxruntime-web's WebAssembly backend.

The artifact is written exactly as the onnx backend writes it (same exporter, same QDQ int8 by ONNX
Runtime's quantizer, with the build's calibration data); what differs is where it runs. The wasm
backend is ONNX Runtime's CPU engine compiled with Emscripten (WASM SIMD, threads through
SharedArrayBuffer), so an op the native engine runs, it runs too, and a model it cannot load fails
in the browser with onnxruntime-web's own message, which names the op. Artifacts are measured in
a browser device (``transport = "browser"``: Chromium driven by playwright, devices/browser.py),
never on the host's native ONNX Runtime: the host runs them only to check a dynamic model's sizes
(labelled as such).

int8 weights stay 8-bit (``reduce_range`` off): the wasm SIMD QGEMM kernel widens both operands to
16 bits and multiply-adds into 32 bits, like the SSE2 path, so nothing saturates; it does not
depend on the visitor's CPU the way native VNNI kernels do.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from edgeship.backends.base import Backend, LowerRequest, require
from edgeship.backends.onnx.lower import OnnxLowering
from edgeship.backends.onnx_web.bundle import runtime_needs
from edgeship.backends.onnx_web.spec import OnnxWebSpec
from edgeship.devices.base import BROWSER_ONLY
from edgeship.errors import LoweringError
from edgeship.lowering.capture import check_sizes
from edgeship.results import VariantResult

if TYPE_CHECKING:
    import onnx

# The newest ONNX IR version onnxruntime-web 1.30's wasm backend loads (a newer one fails in the
# page: "Unsupported model IR version: 14, max supported IR version: 13").
WEB_MAX_IR_VERSION = 13
WEB_REDUCE_RANGE = ("8-bit weights (reduce_range off): onnxruntime-web's wasm SIMD int8 kernel widens to 16 bits "
                    "and adds in 32, so nothing saturates, whatever CPU the visitor has")


class OnnxWebBackend(OnnxLowering, OnnxWebSpec, Backend):  # type: ignore[misc]  # the mixin takes OnnxSpec.Options
    """Lowers like the onnx backend; int8 with 8-bit weights; IR versions the wasm backend loads."""

    def bundle_metadata(self, row: VariantResult, options: OnnxWebSpec.Options,  # type: ignore[override]
                        toolchain: dict[str, str]) -> dict[str, Any]:
        return runtime_needs(row, options, toolchain)

    # the engine the wasm build compiles, for checks on the build machine only; every figure of an
    # onnx-web variant is measured in a browser
    build_runtime = "onnxruntime"

    def available(self, options: OnnxWebSpec.Options | None = None) -> str | None:  # type: ignore[override]
        return BROWSER_ONLY

    def choose_int8(self, request: LowerRequest) -> tuple[bool, str, dict]:
        return web_reduce_range(request)

    def host_level(self, options: OnnxWebSpec.Options) -> str:  # type: ignore[override]
        """Q/DQ run as written on the build machine: the wasm kernels widen to 16 bits, which x86's
        fused int8 kernels without VNNI do not (they would saturate 8-bit weights the browser takes)."""
        return "disabled"

    def check_model(self, model: onnx.ModelProto) -> None:
        check_ir_version(model)

    def check_sizes(self, request: LowerRequest) -> str | None:
        """The spec's min, opt and max sizes run through native ONNX Runtime (the same engine the
        wasm build compiles), since the browser is a device, not part of the build."""
        require("onnxruntime", self.name)
        note = check_sizes(request.captured, self.load(request.dest, request.options, threads=1),
                           request.variant.precision)
        return note + " (checked with native ONNX Runtime on the build machine)"


def check_ir_version(model: onnx.ModelProto) -> None:
    """Refuse a model the wasm backend cannot load, before it reaches a browser."""
    if model.ir_version > WEB_MAX_IR_VERSION:
        raise LoweringError(f"ONNX IR version {model.ir_version}: onnxruntime-web loads IR versions up to "
                            f"{WEB_MAX_IR_VERSION}; export with an older onnx package or a lower opset")


def web_reduce_range(request: LowerRequest) -> tuple[bool, str, dict]:
    """The profile's ``reduce_range`` (default off) and why; the visitor's CPU does not decide it."""
    if cast(OnnxWebSpec.Options, request.options).reduce_range:
        return True, "7-bit weights (reduce_range): set by the profile", {}
    return False, WEB_REDUCE_RANGE, {}
