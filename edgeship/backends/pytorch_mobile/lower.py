"""PyTorch Mobile: frozen TorchScript saved for the lite interpreter (``.ptl``).

Apps pin an older lite runtime (the last Android/iOS releases are 1.13.x), so the artifact's
bytecode version and operator list are recorded, and a profile may name the bytecode version its
runtime reads; the artifact is then backported, or the variant fails with the reason.

TorchScript records no size ranges: a traced graph may keep sizes of the example. So an artifact
for a spec with dynamic dimensions is run in the lite interpreter at min, opt and max and
compared with the float model; one that fails there, or differs, fails the variant with the size.
"""
from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from edgeship.backends.base import Artifact, Backend, LowerRequest
from edgeship.backends.pytorch_mobile.bundle import runtime_needs
from edgeship.backends.pytorch_mobile.spec import PytorchMobileSpec
from edgeship.errors import LoweringError, first_line
from edgeship.fsutil import atomic_output_named
from edgeship.lowering.capture import check_sizes
from edgeship.results import VariantResult

if TYPE_CHECKING:
    import torch

    from edgeship.spec import ModelSpec


class PytorchMobileBackend(PytorchMobileSpec, Backend):
    """Lowers to a ``.ptl`` (fp32, or int8 by the FX quantizer for the chosen engine)."""

    def bundle_metadata(self, row: VariantResult, options: PytorchMobileSpec.Options,  # type: ignore[override]
                        toolchain: dict[str, str]) -> dict[str, Any]:
        return runtime_needs(row, options, toolchain)

    def job_options(self, options: PytorchMobileSpec.Options,  # type: ignore[override]
                    precision: str = "fp32", spec: ModelSpec | None = None) -> dict[str, Any]:
        return {"quantized_engine": options.engine}  # int8 kernels are packed for it when loaded

    def lower(self, request: LowerRequest) -> Artifact:
        if request.variant.precision == "int8":
            return self._lower_int8(request)
        return self._save(request, cast("torch.jit.ScriptModule", request.captured.program), [], {})  # trace, script

    def _lower_int8(self, request: LowerRequest) -> Artifact:
        """Quantize the float module with the engine set, capture it as the variant asks, save it."""
        from edgeship.backends.pytorch_mobile.quantize import capture_like, quantize_module, quantized_engine

        engine = cast(PytorchMobileSpec.Options, request.options).engine
        with quantized_engine(engine):
            module, quantized = quantize_module(request, engine)
            program = capture_like(request.captured, module)
            return self._save(request, program, quantized.notes, {"quantization": quantized.details})

    def _save(self, request: LowerRequest, program: torch.jit.ScriptModule, notes: list[str],
              details: dict[str, Any]) -> Artifact:
        import torch

        opts = cast(PytorchMobileSpec.Options, request.options)
        notes = list(notes)
        frozen = torch.jit.freeze(program.eval())
        if opts.optimize:
            frozen = self._optimize(frozen, notes)
        with atomic_output_named(request.dest) as tmp:
            frozen._save_for_lite_interpreter(str(tmp))
            version = self._meet_bytecode_version(tmp, opts.bytecode_version, notes)
        details = {"bytecode_version": version, "operators": operator_list(request.dest), **details}
        foreign = custom_operators(details["operators"])
        if foreign:
            request.dest.unlink()
            raise LoweringError(f"the graph calls {', '.join(foreign)}, which PyTorch Mobile's lite interpreter does "
                                "not have (its runtime holds ATen, prim and quantized operators; custom operators "
                                "need a runtime built with them)")
        if request.captured.dynamic:
            notes.append(self._check_sizes(request))
        return Artifact(request.dest, notes, details)

    def _check_sizes(self, request: LowerRequest) -> str:
        """The saved .ptl run at min, opt and max (fp32 compared with the float model; int8 checked
        for shapes), with the variant's quantized engine, which is restored afterwards."""
        from edgeship.backends.pytorch_mobile.quantize import quantized_engine

        opts = cast(PytorchMobileSpec.Options, request.options)
        with quantized_engine(opts.engine):
            predict = self.load(request.dest, opts, threads=None)
            return check_sizes(request.captured, predict, request.variant.precision)

    @staticmethod
    def _optimize(frozen: torch.jit.ScriptModule, notes: list[str]) -> torch.jit.ScriptModule:
        from torch.utils.mobile_optimizer import optimize_for_mobile

        try:
            with contextlib.redirect_stderr(io.StringIO()):
                optimized = optimize_for_mobile(frozen)
        except RuntimeError as e:
            reason = "this torch build has no XNNPACK" if "XNNPACK" in str(e) else first_line(e)[:120]
            notes.append(f"optimize_for_mobile skipped: {reason}; the artifact is frozen TorchScript")
            return frozen
        notes.append("optimize_for_mobile applied (XNNPACK prepacked kernels, fused ops)")
        return optimized

    @staticmethod
    def _meet_bytecode_version(path: Path, wanted: int | None, notes: list[str]) -> int:
        from torch.jit.mobile import _backport_for_mobile, _get_model_bytecode_version

        current = _get_model_bytecode_version(str(path))
        if wanted is None or wanted >= current:
            return current
        backported = path.with_name(path.name + ".bp")
        try:
            if not _backport_for_mobile(str(path), str(backported), wanted):
                raise LoweringError(f"cannot bring bytecode version {current} down to {wanted}: "
                                    f"this torch cannot backport that far")
            before, after = path.stat().st_size, backported.stat().st_size
            backported.replace(path)
        finally:
            backported.unlink(missing_ok=True)
        grew = (f"; the file grew from {before / 2**20:.1f} to {after / 2**20:.1f} MiB (before version 8 the "
                "TorchScript part and the bytecode cannot share tensors, so each is stored twice)"
                if after > 1.2 * before else "")
        notes.append(f"backported from bytecode version {current} to {wanted}{grew}")
        return _get_model_bytecode_version(str(path))


# Operator namespaces in the PyTorch Mobile runtime libraries apps link (pytorch_android, LibTorch-Lite).
MOBILE_NAMESPACES = ("aten", "prim", "quantized", "_quantized", "prepacked", "sparse")


def custom_operators(operators: list[str]) -> list[str]:
    """The operators (``torchvision::nms``) from namespaces the lite interpreter's runtime lacks."""
    return [op for op in operators if op.split("::")[0] not in MOBILE_NAMESPACES]


def operator_list(path: Path) -> list[str]:
    """The root operators a lite-interpreter artifact needs (what a selective build must include)."""
    from torch.jit.mobile import _export_operator_list, _load_for_lite_interpreter

    return sorted(_export_operator_list(_load_for_lite_interpreter(str(path))))
