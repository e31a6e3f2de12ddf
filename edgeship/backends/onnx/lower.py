"""ONNX: an ``.onnx`` model checked with onnx.checker and run by ONNX Runtime.

From a torch.export capture the dynamo exporter writes opset 18 or later; from a TorchScript
capture (trace, script) the TorchScript exporter writes older opsets too. The batch dimension is
dynamic unless the profile says otherwise; the spec's dynamic dimensions are always free, named
as edgeship.shapes groups them (the same name wherever two dimensions must be equal), and an
artifact with them is run at the min, opt and max sizes before it is kept.
"""
from __future__ import annotations

import contextlib
import io
import re
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from edgeship import outputs, shapes
from edgeship.backends.base import Artifact, Backend, LowerRequest, require
from edgeship.backends.fallback import lifted
from edgeship.backends.onnx.bundle import runtime_needs
from edgeship.backends.onnx.cpu import choose_reduce_range
from edgeship.backends.onnx.quantize import quantize_dynamic_onnx, quantize_qdq
from edgeship.backends.onnx.spec import ONNX_QUANTIZATION, OnnxSpec
from edgeship.errors import LoweringError
from edgeship.fsutil import atomic_output
from edgeship.lowering.capture import Captured, check_sizes
from edgeship.quantize.cpu_choice import cpu_details, this_machine
from edgeship.quantize.quantized import Quantized
from edgeship.quantize.settings import QuantizationSettings
from edgeship.results import VariantResult

if TYPE_CHECKING:
    import onnx
    import torch

    from edgeship.spec import ModelSpec

DYNAMO_MIN_OPSET = 18


class OnnxLowering:
    """How the ONNX backends (onnx, onnx-web) lower: export, or export then quantize; checked. A
    backend says how its int8 picks ``reduce_range`` (``choose_int8``), what else it refuses
    (``check_model``) and how it runs the spec's sizes (``check_sizes``)."""

    def wants_dynamic_batch(self, options: OnnxSpec.Options) -> bool:
        return bool(options.dynamic_batch)

    def job_options(self, options: OnnxSpec.Options, precision: str = "fp32",
                    spec: ModelSpec | None = None) -> dict[str, Any]:
        return {"graph_optimization": options.graph_optimization}

    def choose_int8(self, request: LowerRequest) -> tuple[bool, str, dict]:
        return choose_for_cpus(request)

    def host_level(self, options: OnnxSpec.Options) -> str:
        """The graph optimization level ONNX Runtime on the build machine runs the int8 model at when
        the quantizer compares it with float (sensitivity, keep_float = "auto"): the artifact's own."""
        return options.graph_optimization

    def check_model(self, model: onnx.ModelProto) -> None:
        """Refuse a checked model this backend's runtime cannot load (LoweringError); default: none."""

    def check_sizes(self, request: LowerRequest) -> str | None:
        """The artifact run at the spec's min, opt and max sizes; a note, or None when not run here."""
        raise NotImplementedError

    def lower(self, request: LowerRequest) -> Artifact:
        onnx = require("onnx", self.name)
        opts = cast(OnnxSpec.Options, request.options)
        notes: list[str] = []
        details: dict[str, Any] = {}
        if request.variant.precision == "int8":
            quantized = lower_int8(request, choose=self.choose_int8, level=self.host_level(opts))
            notes, details = list(quantized.notes), lifted(quantized.details)
            details["quantization"] = quantized.details
        else:
            export_onnx(request.captured, opts.opset, opts.dynamic_batch, request.dest)
        model = onnx.load(str(request.dest), load_external_data=False)
        onnx.checker.check_model(str(request.dest))
        self.check_model(model)
        if request.captured.dynamic:
            notes += [note for note in [self.check_sizes(request)] if note]
        return Artifact(request.dest, notes, {**graph_details(model), **details})


class OnnxBackend(OnnxLowering, OnnxSpec, Backend):  # type: ignore[misc]  # the mixin takes OnnxSpec.Options
    """Exports with the dynamo (export) or TorchScript (trace, script) exporter; int8 by ONNX Runtime."""

    def bundle_metadata(self, row: VariantResult, options: OnnxSpec.Options,  # type: ignore[override]
                        toolchain: dict[str, str]) -> dict[str, Any]:
        return runtime_needs(row, options, toolchain)

    def available(self, options: OnnxSpec.Options | None = None) -> str | None:  # type: ignore[override]
        try:
            require("onnxruntime", self.name)
        except LoweringError as e:
            return str(e)
        return None

    def check_sizes(self, request: LowerRequest) -> str | None:
        if self.available() is not None:
            return None
        return check_sizes(request.captured, self.load(request.dest, request.options, threads=1),
                           request.variant.precision)


def lower_int8(request: LowerRequest, choose: Callable[[LowerRequest], tuple[bool, str, dict]] | None = None,
               level: str | None = None) -> Quantized:
    """Export the float model to a temporary file, then quantize it into ``request.dest``. Static
    int8's ``reduce_range`` comes from ``choose`` (default: the profile's, else chosen for the
    target CPUs, ``request.cpus``), which returns it, why, and details to record."""
    settings = request.variant.quantization or QuantizationSettings()
    opts = cast(OnnxSpec.Options, request.options)
    with tempfile.TemporaryDirectory(prefix="edgeship-onnx-") as work:
        fp32 = Path(work) / "fp32.onnx"
        export_onnx(request.captured, opts.opset, opts.dynamic_batch, fp32)
        if settings.scheme == "dynamic":
            return quantize_dynamic_onnx(fp32, request.dest, per_channel=settings.per_channel)
        data = request.calibration().take(settings.samples, settings.seed or 0)
        reduce_range, why, chosen = (choose or choose_for_cpus)(request)
        quantized = quantize_qdq(fp32, request.dest, data, activations=opts.activations,
                                 reduce_range=reduce_range,
                                 per_channel=settings.per_channel,
                                 method=settings.method or ONNX_QUANTIZATION.default_method,
                                 percentile=settings.percentile, keep_float=settings.keep_float,
                                 sensitivity=settings.sensitivity, cache=request.cache,
                                 graph_optimization=level,
                                 operators=settings.operators, budget=request.budget)
    quantized.notes.append(why)
    quantized.details.update(reduce_range_reason=why, **chosen)
    return quantized


def choose_for_cpus(request: LowerRequest) -> tuple[bool, str, dict]:
    """``reduce_range`` as the profile sets it, else from the CPUs the artifact will run on."""
    cpus = this_machine() if request.cpus is None else request.cpus
    opts = cast(OnnxSpec.Options, request.options)
    reduce_range, why = choose_reduce_range(opts.reduce_range, opts.activations, cpus)
    return reduce_range, why, {"cpus": cpu_details(cpus)}


def export_onnx(captured: Captured, opset: int, dynamic_batch: bool, dest: Path) -> None:
    """Write ``captured`` as ONNX to ``dest`` (atomically) with the spec's input names, the float
    model's output names (edgeship.outputs) and the spec's free dimensions named."""
    import torch

    spec = captured.model.spec
    names, output_names = [i.name for i in spec.inputs], onnx_output_names(captured)
    axes = shapes.dim_names(spec, dynamic_batch)
    with atomic_output(dest) as tmp:
        if captured.method == "export":
            if opset < DYNAMO_MIN_OPSET:
                raise LoweringError(f"opset {opset}: the torch.export ONNX exporter writes opset "
                                    f"{DYNAMO_MIN_OPSET} or later; put trace or script first in this "
                                    "variant's capture order for older opsets")
            forget_pending_unbacked_symbols(cast("torch.export.ExportedProgram", captured.program))
            with contextlib.redirect_stdout(io.StringIO()):
                program = torch.onnx.export(captured.program, dynamo=True, opset_version=opset,
                                            input_names=names, output_names=output_names, verbose=False)
            program.save(str(tmp))
        else:
            dynamic_axes = {**axes, **({n: {0: axes[names[0]][0]} for n in output_names} if dynamic_batch else {})}
            with contextlib.redirect_stdout(io.StringIO()):
                torch.onnx.export(captured.program, captured.example_inputs, str(tmp), dynamo=False,
                                  opset_version=opset, input_names=names, output_names=output_names,
                                  dynamic_axes={k: v for k, v in dynamic_axes.items() if v} or None)
        name_dims(tmp, axes)


def forget_pending_unbacked_symbols(program: torch.export.ExportedProgram) -> None:
    """Let ``program`` be exported to ONNX again. Exporting runs its decompositions, which leave the
    unbacked symbols of data-dependent sizes (NMS's box count) pending in the program's shape
    environment; the next export of the same program (the int8 variant's fp32 graph, TensorRT's)
    then fails with PendingUnbackedSymbolNotFound ("Pending unbacked symbols {u6, u7} not in returned
    outputs"). They belong to the finished export, so they are dropped."""
    for node in program.graph.nodes:
        fake_mode = getattr(node.meta.get("val"), "fake_mode", None)
        shape_env = getattr(fake_mode, "shape_env", None)
        if shape_env is not None and hasattr(shape_env, "pending_fresh_unbacked_symbols"):
            shape_env.pending_fresh_unbacked_symbols.clear()
            return


def onnx_output_names(captured: Captured) -> list[str]:
    """The float model's output names as an ONNX graph carries them (``output``; ``output0``, ...;
    a dict's keys), from its output on the example inputs."""
    return [outputs.graph_name(n) for n in captured.output_names()]


def name_dims(path: Path, names: dict[str, dict[int, str]]) -> None:
    """Give the free input dimensions the names in ``names`` (input -> index -> name), and the same
    names wherever the exporter's symbols for them appear in the outputs (the dynamo exporter calls
    them s0, s27, ...; an output may carry an expression of them)."""
    import onnx

    model = onnx.load(str(path))
    rename = {}
    for value in model.graph.input:
        dims = value.type.tensor_type.shape.dim
        for index, name in names.get(value.name, {}).items():
            if index < len(dims) and dims[index].dim_param:
                rename[dims[index].dim_param] = name
    if all(old == new for old, new in rename.items()):
        return
    symbol = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
    for value in [*model.graph.input, *model.graph.output, *model.graph.value_info]:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param:
                dim.dim_param = symbol.sub(lambda m: rename.get(m.group(0), m.group(0)), dim.dim_param)
    onnx.save(model, str(path))


def graph_details(model: onnx.ModelProto) -> dict[str, Any]:
    """Opset, input and output signatures, and operator counts of an ONNX model."""
    import onnx

    def signature(values: Sequence[onnx.ValueInfoProto]) -> list[dict[str, Any]]:
        return [{"name": v.name,
                 "shape": [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim],
                 "dtype": onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type).name}
                for v in values]

    ops: dict[str, int] = {}
    for node in model.graph.node:
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    return {"opset": opset, "inputs": signature(model.graph.input), "outputs": signature(model.graph.output),
            "nodes": len(model.graph.node), "operators": dict(sorted(ops.items()))}
