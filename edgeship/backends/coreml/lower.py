"""Core ML: an ``.mlpackage`` (ML program) converted by coremltools, for iOS and macOS.

Conversion runs anywhere; prediction needs macOS. So here every saved package is reloaded and
its interface (input and output names, shapes, types) checked against the model spec; latency
and accuracy come from a Mac through the device runner. Precisions: fp16 and fp32 compute, w8
(int8 linear weight quantization of the converted program) and int8 (w8a8: activation
quantization with coremltools.optimize.torch, calibrated on the calibration data, then
converted).

Dynamic dimensions become ``ct.RangeDim``s (one per group of equal dimensions, lower and upper
bound from the spec, default = opt); the reloaded package's ranges are checked too. Apple's
runtime runs the Neural Engine for a range-flexible model at its default shape only (other
shapes on the GPU or CPU), so opt is what a Mac or iPhone measures fastest.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from edgeship import outputs, shapes
from edgeship.backends.base import Artifact, Backend, LowerRequest, require
from edgeship.backends.coreml.bundle import runtime_needs, snippet_facts
from edgeship.backends.coreml.spec import CoremlSpec
from edgeship.errors import LoweringError
from edgeship.fsutil import atomic_output
from edgeship.lowering.capture import Captured, flat_outputs, fx_tracing
from edgeship.quantize.fx_parts import convert_parts, prepare_parts
from edgeship.results import VariantResult

if TYPE_CHECKING:
    import coremltools as ct
    import torch
    from coremltools.optimize.torch.quantization import LinearQuantizer
    from coremltools.proto.Model_pb2 import FeatureDescription, Model

    from edgeship.calibration.dataset import Dataset
    from edgeship.lowering.capture import Program
    from edgeship.spec import InputSpec, ModelSpec

W8A8_MIN_TARGETS = ("iOS17", "iOS18", "macOS14", "macOS15")  # activation quantization needs iOS 17 ops


class CoremlBackend(CoremlSpec, Backend):
    """Converts with coremltools and checks the saved package's interface; predicts only on macOS."""

    def bundle_metadata(self, row: VariantResult, options: CoremlSpec.Options,  # type: ignore[override]
                        toolchain: dict[str, str]) -> dict[str, Any]:
        return runtime_needs(row, options, toolchain)

    def snippet_facts(self, artifact: dict[str, Any], spec: ModelSpec) -> dict[str, Any]:
        return snippet_facts(artifact, spec)

    def available(self, options: CoremlSpec.Options | None = None) -> str | None:  # type: ignore[override]
        if sys.platform != "darwin":
            return "Core ML prediction needs macOS (coremltools predicts only there); measure on a Mac device"
        return None

    def job_options(self, options: CoremlSpec.Options,  # type: ignore[override]
                    precision: str = "fp32", spec: ModelSpec | None = None) -> dict[str, Any]:
        return {"compute_units": options.compute_units}

    def lower(self, request: LowerRequest) -> Artifact:
        ct = require("coremltools", self.name)
        notes: list[str] = int32_notes(request.captured.model.spec)  # refuses an int64 range beyond int32 first
        precision = request.variant.precision
        if precision == "int8":
            program: Program = self._w8a8_program(request, notes)
        else:
            program = _convertible(request.captured.program, request.captured.method)
        mlmodel = ct.convert(program, **convert_arguments(request, precision))
        if precision == "w8":
            mode = cast(CoremlSpec.Options, request.options).weight_mode
            mlmodel = quantize_weights(mlmodel, mode)
            notes.append(f"int8 weights ({mode}, per channel), fp16 activations")
        with atomic_output(request.dest) as tmp:
            mlmodel.save(str(tmp))
        details = check_interface(request.dest, request.captured.model.spec)
        notes.append("Core ML prediction needs macOS: the package was reloaded here and its interface "
                     "checked against the model spec")
        if request.captured.dynamic:
            flexible = shapes.describe(request.captured.model.spec)
            notes.append(f"flexible input shapes (ct.RangeDim, default opt): {flexible}; not run at the spec's "
                         "sizes here (Core ML predicts only on macOS)")
        return Artifact(request.dest, notes, details)

    def _w8a8_program(self, request: LowerRequest, notes: list[str]) -> torch.jit.ScriptModule:
        target = cast(CoremlSpec.Options, request.options).minimum_deployment_target
        if target not in W8A8_MIN_TARGETS:
            raise LoweringError(f"int8 (w8a8) Core ML needs minimum_deployment_target of "
                                f"{', '.join(W8A8_MIN_TARGETS)}; the variant asks for {target}")
        if request.calibration is None:
            raise LoweringError("int8 (w8a8) needs calibration data (the build provides it for static int8)")
        data = request.calibration()
        module = activation_quantized(request.captured.model.module, request.captured.example_inputs, data, notes)
        notes.append(f"w8a8: coremltools.optimize.torch LinearQuantizer, symmetric, calibrated on {len(data)} "
                     "samples; the quantized module is captured by jit.trace")
        return _recapture(module, request.captured, notes)


def _convertible(program: Program, method: str) -> Program:
    """coremltools takes ExportedPrograms after ATen decomposition, and traced TorchScript."""
    return cast("torch.export.ExportedProgram", program).run_decompositions({}) if method == "export" else program


def _recapture(module: torch.nn.Module, captured: Captured, notes: list[str]) -> torch.jit.ScriptModule:
    """The fake-quantized module, traced: torch.export cannot trace quantized tensors
    ("quantized nyi in meta tensors"), and coremltools converts the traced form. Dict outputs
    (torchvision's segmenters return {"out": ...}) are flattened first, as for the float trace."""
    import torch

    return torch.jit.trace(flat_outputs(module, captured.example_inputs, notes), captured.example_inputs,
                           strict=False)


def convert_arguments(request: LowerRequest, precision: str) -> dict[str, Any]:
    """ct.convert's arguments from the spec (names, shapes, float32 I/O) and the options."""
    import coremltools as ct
    import numpy as np

    spec = request.captured.model.spec
    opts = cast(CoremlSpec.Options, request.options)
    return {
        "inputs": [ct.TensorType(name=i.name, shape=shape, dtype=np.dtype(package_dtype(i.dtype)).type)
                   for i, shape in zip(spec.inputs, input_shapes(spec))],
        "outputs": output_types(request.captured),
        "convert_to": "mlprogram",
        "compute_precision": ct.precision.FLOAT32 if precision == "fp32" else ct.precision.FLOAT16,
        "minimum_deployment_target": getattr(ct.target, opts.minimum_deployment_target),
        "compute_units": getattr(ct.ComputeUnit, opts.compute_units),
    }


def output_types(captured: Captured) -> list[ct.TensorType]:
    """One ct.TensorType per flattened output, named as the float model's (edgeship.outputs); float
    outputs are float32 whatever the compute precision, others keep Core ML's own type."""
    import coremltools as ct
    import numpy as np

    values = [value for _, value in outputs.flatten(captured.float_output())]
    return [ct.TensorType(name=outputs.graph_name(name), dtype=np.float32 if value.is_floating_point() else None)
            for name, value in zip(captured.output_names(), values)]


def input_shapes(spec: ModelSpec) -> list[tuple[int, ...] | ct.Shape]:
    """Each input's shape for ct.TensorType: a tuple when fixed, else a ct.Shape whose dynamic
    dimensions are RangeDims, one object per group (a shared symbol: those dimensions are equal)."""
    import coremltools as ct

    # No symbol= names: coremltools allows a symbol once per process (a second Core ML variant of the
    # build would fail); the shared RangeDim object is what makes grouped dimensions equal.
    ranges = {d.name: ct.RangeDim(lower_bound=d.min, upper_bound=d.max, default=d.opt)
              for d in shapes.dynamic_dims(spec)}
    names = shapes.dim_names(spec)
    out = []
    for inp in spec.inputs:
        free = names[inp.name]
        dims = [ranges[free[i]] if i in free else size for i, size in enumerate(inp.shape)]
        out.append(ct.Shape(dims) if free else tuple(inp.shape))
    return out


def quantize_weights(mlmodel: ct.models.MLModel, mode: str) -> ct.models.MLModel:
    """int8 linear weight quantization of every weight (coremltools.optimize.coreml)."""
    from coremltools.optimize.coreml import OpLinearQuantizerConfig, OptimizationConfig, linear_quantize_weights

    config = OptimizationConfig(global_config=OpLinearQuantizerConfig(mode=mode, weight_threshold=0))
    return linear_quantize_weights(mlmodel, config)


def activation_quantized(module: torch.nn.Module, example_inputs: tuple[torch.Tensor, ...], data: Dataset,
                         notes: list[str]) -> torch.nn.Module:
    """A copy of ``module`` with int8 weights and activations whose ranges come from ``data``; a
    model torch.fx cannot trace whole is quantized by parts (edgeship.quantize.fx_parts).

    Observers run in eval mode: in train mode batch norm would re-estimate its statistics from
    single calibration batches and ruin the float model being quantized.
    """

    import torch

    quantizers: dict[int, LinearQuantizer] = {}

    def prepare(part: torch.nn.Module, inputs: tuple[torch.Tensor, ...], non_traceable: list[str],
                scope: str) -> torch.fx.GraphModule:
        from coremltools.optimize.torch.quantization import (
            LinearQuantizer,
            LinearQuantizerConfig,
            ModuleLinearQuantizerConfig,
        )

        # coremltools quantizes the weights of the modules it does not trace as well; those modules
        # become parts of their own, quantized there, so here they are left alone.
        untouched = {name: None for name, _ in part.named_modules()
                     if any(name == leaf or name.startswith(leaf + ".") for leaf in non_traceable)}
        config = LinearQuantizerConfig(global_config=ModuleLinearQuantizerConfig(
            quantization_scheme="symmetric", milestones=[0, 0, 1_000_000, 1_000_000]),
            non_traceable_module_names=non_traceable, module_name_configs=untouched)
        # LinearQuantizer is a quantization-aware training tool: prepare() puts the model in train
        # mode before torch.fx traces it, and FX keeps the training branch of every module it traces
        # through (torchvision's StochasticDepth drew random masks inside efficientnet_b0's graph).
        # Calibration is post-training, so the model is traced as it is evaluated: train() does nothing.
        # The no-op is taken away again: the module is still called (and switched to eval) when a
        # prepare fails and its parts are quantized instead.
        part.train = lambda mode=True: part  # type: ignore[method-assign]
        try:
            quantizer = LinearQuantizer(part, config)
            prepared = quantizer.prepare(example_inputs=inputs, inplace=True)
        finally:
            del part.train
        quantizer.step()
        quantizers[id(prepared)] = quantizer
        return prepared

    with fx_tracing("Core ML w8a8 (coremltools.optimize.torch LinearQuantizer)",
                    "Use precision w8 (int8 weights, quantized after conversion, no tracing) for this model."):
        found = prepare_parts(module, example_inputs, prepare)
    if not found.whole:
        notes.append(found.note())
    prepared = found.module.eval()
    batch = example_inputs[0].shape[0]
    with torch.no_grad():
        for part in data.batches(batch):
            prepared(*[torch.from_numpy(a) for a in part.values()])
    return convert_parts(found, lambda graph: _finalize(quantizers[id(graph)], graph)).eval()


def _finalize(quantizer: LinearQuantizer, graph: torch.nn.Module) -> torch.nn.Module:
    """``quantizer.finalize`` of one part. It marks every quantized layer below the graph as
    compressed (a buffer ``..._compression_type`` listing the compressions), including the layers of
    parts inside it that their own finalize marked already; a layer marked twice reads as joint
    compression, which only iOS 18 takes. The inner parts' marks are put back as they were."""
    marks = {(module, name): value.clone() for module in graph.modules() for name, value in module._buffers.items()
             if name.endswith("compression_type") and value is not None}
    finalized = quantizer.finalize(inplace=True).eval()
    for (module, name), value in marks.items():
        module._buffers[name] = value
    return finalized


def check_interface(path: Path, spec: ModelSpec) -> dict[str, Any]:
    """Reload a saved package and compare its inputs and outputs with the model spec."""
    import coremltools as ct

    loaded = ct.models.MLModel(str(path), skip_model_load=True).get_spec()
    inputs = [_feature(f) for f in loaded.description.input]
    outputs = [_feature(f) for f in loaded.description.output]
    want = [expected_feature(i) for i in spec.inputs]
    problems = [f"input {w['name']}: expected {w}, package has {got}" for w, got in zip(want, inputs) if w != got]
    if len(inputs) != len(want):
        problems.append(f"package has {len(inputs)} inputs, the spec {len(want)}")
    if problems:
        raise LoweringError("Core ML package interface differs from the model spec: " + "; ".join(problems))
    return {"inputs": inputs, "outputs": outputs, "spec_version": loaded.specificationVersion,
            "operators": _program_ops(loaded)}


ARRAY_TYPES = {65568: "float32", 65552: "float16", 131104: "int32", 65600: "float64"}
INT32 = (-2**31, 2**31 - 1)


def package_dtype(dtype: str) -> str:
    """The dtype a Core ML package takes for a spec input: its MLMultiArray has no int64, so int64
    inputs (token ids, masks) are int32 in the package and the app feeds int32."""
    return "int32" if dtype == "int64" else dtype


def int32_notes(spec: ModelSpec) -> list[str]:
    """What the variant's notes say about int64 inputs taken as int32, and whether their values fit."""
    notes = []
    for inp in spec.inputs:
        if inp.dtype != "int64":
            continue
        if inp.range is None:
            fits = "the spec gives no range: the app must keep values within int32"
        elif INT32[0] <= inp.range[0] and inp.range[1] - 1 <= INT32[1]:
            fits = f"the spec's range [{inp.range[0]:g}, {inp.range[1]:g}) fits"
        else:
            raise LoweringError(f"input {inp.name}: range [{inp.range[0]:g}, {inp.range[1]:g}) does not fit in int32, "
                                "and Core ML takes integer inputs only as int32")
        notes.append(f"input {inp.name}: int64 in the model, int32 in the Core ML package (Core ML has no int64 "
                     f"inputs); {fits}")
    return notes


def expected_feature(inp: InputSpec) -> dict[str, Any]:
    """What the package should say of an input: name, default shape (opt), dtype, and for dynamic
    dimensions the [lower, upper] range of every dimension."""
    feature = {"name": inp.name, "shape": shapes.shape_at(inp, "opt"), "dtype": package_dtype(inp.dtype)}
    if inp.dynamic:
        feature["ranges"] = [list(r) for r in zip(shapes.shape_at(inp, "min"), shapes.shape_at(inp, "max"))]
    return feature


def _feature(feature: FeatureDescription) -> dict[str, Any]:
    array = feature.type.multiArrayType
    out = {"name": feature.name, "shape": [int(d) for d in array.shape],
           "dtype": ARRAY_TYPES.get(array.dataType, str(array.dataType))}
    ranges = array.shapeRange.sizeRanges
    if ranges and any(r.lowerBound != r.upperBound for r in ranges):
        out["ranges"] = [[int(r.lowerBound), int(r.upperBound)] for r in ranges]
    return out


def _program_ops(spec: Model) -> dict[str, int]:
    counts: dict[str, int] = {}
    for function in spec.mlProgram.functions.values():
        for block in function.block_specializations.values():
            for op in block.operations:
                if op.type != "const":
                    counts[op.type] = counts.get(op.type, 0) + 1
    return dict(sorted(counts.items()))
