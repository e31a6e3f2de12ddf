"""ExecuTorch: a ``.pte`` program, delegated to XNNPACK (or portable operators only, on request)."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from edgeship.config import StrictModel
from edgeship.fsutil import atomic_write_bytes
from edgeship.lowering import register
from edgeship.lowering.base import Artifact, Backend, LowerRequest, require
from edgeship.quantize.executorch import SUPPORT as EXECUTORCH_QUANTIZATION, quantize_pt2e


@register
class ExecutorchBackend(Backend):
    name = "executorch"
    suffix = ".pte"
    runtime = "executorch"
    capture_methods = ("export",)

    class Options(StrictModel):
        """Options of the executorch backend."""

        partitioner: Literal["xnnpack", "portable"] = Field(
            "xnnpack", description="xnnpack delegates what XNNPACK runs; portable keeps ExecuTorch's portable operators.")

    def available(self, options: Any = None) -> str | None:
        try:
            require("executorch.runtime", self.name)
        except Exception as e:
            return str(e)
        return None

    precisions = ("fp32", "int8")
    quantization = EXECUTORCH_QUANTIZATION

    def lower(self, request: LowerRequest) -> Artifact:
        exir = require("executorch.exir", self.name)
        program, notes, details = request.captured.program, [], {}
        if request.variant.precision == "int8":
            program, quantized = quantize_pt2e(request)
            notes, details = list(quantized.notes), {"quantization": quantized.details}
        partitioners = self._partitioners(request.options)
        edge = exir.to_edge_transform_and_lower(program, partitioner=partitioners)
        details = {**delegation_details(edge.exported_program().graph_module), **details}
        atomic_write_bytes(request.dest, edge.to_executorch().buffer)
        if details["non_delegated_ops"] and partitioners:
            notes.append("not delegated to XNNPACK (portable kernels): " + ", ".join(details["non_delegated_ops"]))
        return Artifact(request.dest, notes, details)

    @staticmethod
    def _partitioners(options: Any) -> list[Any]:
        if options.partitioner == "portable":
            return []
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        return [XnnpackPartitioner()]


def delegation_details(graph_module: Any) -> dict[str, Any]:
    """How many operator nodes were delegated, and which operators were not."""
    from executorch.devtools.backend_debug import get_delegation_info

    info = get_delegation_info(graph_module)
    not_delegated = sorted(b.op_type for b in info.delegation_by_operator.values()
                           if b.non_delegated and b.op_type != "getitem")
    return {"delegated_subgraphs": int(info.num_delegated_subgraphs),
            "delegated_nodes": int(info.num_delegated_nodes),
            "non_delegated_nodes": int(info.num_non_delegated_nodes),
            "non_delegated_ops": not_delegated}
