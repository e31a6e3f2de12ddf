"""ExecuTorch: a ``.pte`` program, delegated to XNNPACK, to Core ML (for Apple devices), or
portable operators only, on request.

Dynamic dimensions come from the capture (torch.export with the spec's ranges): ExecuTorch plans
memory for the upper bounds (max), and a size beyond max is refused by the runtime. A program
with dynamic dimensions is run at min, opt and max before it is kept, where this machine runs it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from edgeship.backends.base import Artifact, Backend, LowerRequest, require
from edgeship.backends.executorch.bundle import runtime_needs
from edgeship.backends.executorch.quantize import quantize_pt2e
from edgeship.backends.executorch.spec import ExecutorchSpec
from edgeship.fsutil import atomic_write_bytes
from edgeship.lowering.capture import check_sizes
from edgeship.results import VariantResult

if TYPE_CHECKING:
    import torch
    from executorch.exir.backend.partitioner import Partitioner


class ExecutorchBackend(ExecutorchSpec, Backend):
    """Lowers an exported program with ``to_edge_transform_and_lower`` and the chosen partitioner."""

    def bundle_metadata(self, row: VariantResult, options: ExecutorchSpec.Options,  # type: ignore[override]
                        toolchain: dict[str, str]) -> dict[str, Any]:
        return runtime_needs(row, options, toolchain)

    def available(self, options: ExecutorchSpec.Options | None = None) -> str | None:  # type: ignore[override]
        if options is not None and options.partitioner == "coreml":
            return ("the ExecuTorch Core ML delegate runs only on Apple platforms (this runtime has no "
                    "CoreMLBackend); measure on a Mac or iPhone")
        try:
            require("executorch.runtime", self.name)
        except Exception as e:
            return str(e)
        return None

    def lower(self, request: LowerRequest) -> Artifact:
        exir = require("executorch.exir", self.name)
        opts = cast(ExecutorchSpec.Options, request.options)
        program = cast("torch.export.ExportedProgram", request.captured.program)  # an export capture
        notes: list[str] = []
        details: dict[str, Any] = {}
        if request.variant.precision == "int8":
            program, quantized = quantize_pt2e(request)
            notes, details = list(quantized.notes), {"quantization": quantized.details}
        partitioners = self._partitioners(opts, request.variant.precision)
        edge = exir.to_edge_transform_and_lower(program, partitioner=partitioners)
        details = {**delegation_details(edge.exported_program().graph_module), **details}
        atomic_write_bytes(request.dest, edge.to_executorch().buffer)
        if details["non_delegated_ops"] and partitioners:
            notes.append(f"not delegated to {opts.partitioner} (portable kernels): "
                         + ", ".join(details["non_delegated_ops"]))
        if request.captured.dynamic:
            notes.append(self._check_sizes(request))
        return Artifact(request.dest, notes, details)

    def _check_sizes(self, request: LowerRequest) -> str:
        """Run the program at min, opt and max (fp32 compared with the float model; int8 checked for
        shapes), or say why it cannot run here."""
        options = cast(ExecutorchSpec.Options, request.options)
        reason = self.available(options)
        if reason is not None:
            return f"not run at the spec's sizes here: {reason}"
        predict = self.load(request.dest, options)  # threads=None: the process's XNNPACK pool stays
        return check_sizes(request.captured, predict, request.variant.precision)

    @staticmethod
    def _partitioners(options: ExecutorchSpec.Options, precision: str) -> list[Partitioner]:
        if options.partitioner == "portable":
            return []
        if options.partitioner == "coreml":
            return [coreml_partitioner(options, precision)]
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        return [XnnpackPartitioner()]


def coreml_partitioner(options: ExecutorchSpec.Options, precision: str) -> Partitioner:
    """ExecuTorch's Core ML partitioner with the deployment target, compute units and precision."""
    import coremltools as ct
    from executorch.backends.apple.coreml.compiler import CoreMLBackend
    from executorch.backends.apple.coreml.partition import CoreMLPartitioner

    specs = CoreMLBackend.generate_compile_specs(
        compute_precision=ct.precision.FLOAT16 if precision == "fp16" else ct.precision.FLOAT32,
        minimum_deployment_target=getattr(ct.target, options.minimum_deployment_target),
        compute_unit=getattr(ct.ComputeUnit, options.compute_units))
    return CoreMLPartitioner(compile_specs=specs)


def delegation_details(graph_module: torch.fx.GraphModule) -> dict[str, Any]:
    """How many operator nodes were delegated, and which operators were not."""
    from executorch.devtools.backend_debug import get_delegation_info

    info = get_delegation_info(graph_module)
    not_delegated = sorted(b.op_type for b in info.delegation_by_operator.values()
                           if b.non_delegated and b.op_type != "getitem")
    return {"delegated_subgraphs": int(info.num_delegated_subgraphs),
            "delegated_nodes": int(info.num_delegated_nodes),
            "non_delegated_nodes": int(info.num_non_delegated_nodes),
            "non_delegated_ops": not_delegated}
