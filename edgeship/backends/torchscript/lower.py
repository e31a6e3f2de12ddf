"""TorchScript for full LibTorch: the traced or scripted module, frozen, saved with
``torch.jit.save`` for ``torch::jit::load`` in a C++ application (the whole of ATen, unlike the
lite interpreter's ``.ptl``). Its operator list is recorded; operators outside ATen and prim
(``torchvision::nms``) need their library linked into the application.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, cast

from edgeship.backends.base import Artifact, Backend, LowerRequest
from edgeship.backends.torchscript.spec import TorchscriptSpec
from edgeship.fsutil import atomic_output_named
from edgeship.lowering.capture import check_sizes

if TYPE_CHECKING:
    import torch

LIBTORCH_NAMESPACES = ("aten", "prim", "quantized", "_quantized", "prepacked", "mkldnn", "mkldnn_prepacked")


class TorchscriptBackend(TorchscriptSpec, Backend):
    """Freezes the captured ScriptModule (optionally optimizes it for inference) and saves it."""

    def lower(self, request: LowerRequest) -> Artifact:
        import torch

        opts, notes = cast(TorchscriptSpec.Options, request.options), []
        module = cast(torch.jit.ScriptModule, request.captured.program).eval()  # a trace or script capture
        if opts.freeze:
            module = torch.jit.freeze(module)
        if opts.optimize_for_inference:
            module = torch.jit.optimize_for_inference(module)
            notes.append("torch.jit.optimize_for_inference applied (oneDNN layouts where this torch has them)")
        with atomic_output_named(request.dest) as tmp:
            torch.jit.save(module, str(tmp))
        operators = operator_list(module)
        foreign = [op for op in operators if op.split("::")[0] not in LIBTORCH_NAMESPACES]
        if foreign:
            notes.append(f"calls {', '.join(foreign)}: the C++ application must link the library that registers "
                         "them (torchvision's C++ ops for torchvision::)")
        if request.captured.dynamic:
            notes.append(check_sizes(request.captured, self.load(request.dest, opts), request.variant.precision))
        return Artifact(request.dest, notes, {"operators": operators, "frozen": opts.freeze})


def operator_list(module: torch.jit.ScriptModule) -> list[str]:
    """The root operators the module calls (``torch.jit.export_opnames``), overload names dropped."""
    import torch

    return sorted({name.split(".")[0] for name in torch.jit.export_opnames(module)})
