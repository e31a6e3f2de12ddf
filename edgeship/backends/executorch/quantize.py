"""ExecuTorch's own int8 path: PT2E quantization with the XNNPACK quantizer, lowered to XNNPACK.

Static: per-channel (or per-tensor) symmetric int8 weights and int8 activations whose ranges come
from calibration (HistogramObserver by default, as XNNPACK's symmetric config uses; or min-max).
Dynamic: int8 weights, activations quantized at run time by XNNPACK from each input's range.
Layers kept in float are filtered out of the quantizer by module name, so XNNPACK runs them in
fp32 inside the same program.
"""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, cast

from edgeship import shapes
from edgeship.backends.base import LowerRequest
from edgeship.backends.executorch.spec import EXECUTORCH_QUANTIZATION
from edgeship.cache import Cache
from edgeship.calibration.dataset import Dataset
from edgeship.lowering.capture import Captured, capture_export, free_examples
from edgeship.quantize.autokeep import AutoKeep
from edgeship.quantize.observers import CALIBRATION_BATCH, calibrate_observers
from edgeship.quantize.quantized import Quantized
from edgeship.quantize.scope import choose_scope
from edgeship.quantize.sensitivity import (
    LayerSensitivity,
    NotMeasurable,
    OneLayerRuns,
    Outputs,
    sensitivity_and_fallback,
    sqnr_of,
)
from edgeship.quantize.settings import QuantizationSettings

if TYPE_CHECKING:
    import numpy as np
    import torch
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import XNNPACKQuantizer

LAYER_OPS = ("conv", "linear")  # aten operators reported per layer (conv1d/2d/3d, convolution, linear)


def quantize_pt2e(request: LowerRequest) -> tuple[torch.export.ExportedProgram, Quantized]:
    """The variant's capture quantized for XNNPACK: an ExportedProgram ready to lower, and the facts."""
    settings = request.variant.quantization or QuantizationSettings()
    if settings.scheme == "dynamic":
        return _dynamic(request.captured, settings)
    return _static(request, settings)


def _dynamic(captured: Captured,
             settings: QuantizationSettings) -> tuple[torch.export.ExportedProgram, Quantized]:
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    program = cast("torch.export.ExportedProgram", captured.program)  # an export capture
    prepared = prepare_pt2e(program.module(), xnnpack_quantizer(settings.per_channel, None, [], dynamic=True))
    prepared(*captured.example_inputs)  # weight observers see the weights; activations stay dynamic
    program = _export(convert_pt2e(prepared), captured)
    return program, Quantized.describe("dynamic", "XNNPACK dynamic int8 (PT2E)", per_channel=settings.per_channel)


def _static(request: LowerRequest,
            settings: QuantizationSettings) -> tuple[torch.export.ExportedProgram, Quantized]:
    captured = request.captured
    method = settings.method or EXECUTORCH_QUANTIZATION.default_method
    data = request.calibration().take(settings.samples, settings.seed or 0)
    program, batch = calibration_program(captured)
    scope = choose_scope(settings.operators, graph_ops(program), "XNNPACKQuantizer")
    key = {"kind": "pt2e-xnnpack", "weights_sha256": captured.model.state_sha256, "method": method,
           "per_channel": settings.per_channel, "weighted_only": scope.weighted}
    convert = lambda excluded, key: _calibrate_and_convert(  # noqa: E731
        program, settings.per_channel, method, excluded, data, batch, request.cache, key, scope.weighted)
    prepared, converted, facts = convert([], key)
    measure = lambda sample, size: layer_sensitivity(prepared, converted, sample, size)  # noqa: E731
    one_layer = lambda sample, size: one_layer_runs(prepared, sample, size)  # noqa: E731

    def real(kept: list[str]) -> Outputs:  # the converted graph with ``kept`` in float, as the artifact is
        model = convert(kept, {**key, "kept_float": kept})[1] if kept else converted
        return run_graph(model, data, min(batch[0], len(data)) if batch[1] else batch[0])

    report, excluded = sensitivity_and_fallback(settings.sensitivity, settings.keep_float, data, batch,
                                                request.dest.parent, measure, one_layer,
                                                AutoKeep(request.budget, real))
    if excluded:
        _, converted, facts = convert(excluded, {**key, "kept_float": excluded})
    done = Quantized.describe(
        "static", "XNNPACK int8 (PT2E, XNNPACKQuantizer)", method=method, samples=len(data),
        per_channel=settings.per_channel, **scope.details(), kept_float=excluded, sensitivity=report,
        calibration={**facts, "data": data.source})
    done.notes.append(f"int8 operators: {scope.reason}")
    return _export(converted, captured), done


def graph_ops(program: torch.export.ExportedProgram) -> set[str]:
    """The aten operators an exported program calls (what ``quantize/scope.py`` reads)."""
    return {str(n.target) for n in program.graph_module.graph.nodes if n.op == "call_function"}


def run_graph(module: torch.fx.GraphModule, data: Dataset, batch: int) -> Outputs:
    """Every output of a (converted) graph module on ``data``, ``batch`` samples a call."""
    from edgeship.quantize.observers import OneLayer, run_one_layer

    return run_one_layer(module, OneLayer(), data, batch)


def calibration_program(captured: Captured) -> tuple[torch.export.ExportedProgram, tuple[int, bool]]:
    """The program to quantize and its calibration batch: exported with a free batch dimension when
    the model allows it (observers cost per call, so 32 samples a call calibrate far faster), else
    the variant's own capture at the model's batch size. The result is exported again at that size."""
    try:
        return capture_export(captured.model, True, []), (CALIBRATION_BATCH, True)
    except Exception:  # batch-specific code: calibrate at the model's own batch size
        program = cast("torch.export.ExportedProgram", captured.program)  # an export capture
        return program, (int(captured.example_inputs[0].shape[0]), False)


def _calibrate_and_convert(program: torch.export.ExportedProgram, per_channel: bool, method: str,
                           excluded: list[str], data: Dataset, batch: tuple[int, bool], cache: Cache | None,
                           key: dict[str, Any], weighted: bool = False,
                           ) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule, dict[str, Any]]:
    """prepare_pt2e, calibrate (or restore from the cache), convert_pt2e; the float reference too."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    prepared = prepare_pt2e(program.module(), xnnpack_quantizer(per_channel, method, excluded, weighted=weighted))
    facts = calibrate_observers(prepared, data, batch[0], cache, key, flexible=batch[1])
    reference = copy.deepcopy(prepared)  # float numerics with batch norm folded, as convert sees it
    return reference, convert_pt2e(prepared), facts


def xnnpack_quantizer(per_channel: bool, method: str | None, excluded: list[str], dynamic: bool = False,
                      weighted: bool = False) -> XNNPACKQuantizer:
    """XNNPACKQuantizer with its symmetric config; min-max activations on request; layers filtered
    out; with ``weighted``, only the convolutions and linear layers (no add, mul, cat, pooling)."""
    import dataclasses

    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        CONV_TARGETS,
        CONV_TRANSPOSE_TARGETS,
        LINEAR_TARGETS,
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e import MinMaxObserver
    from torchao.quantization.pt2e.quantizer.utils import get_module_name_filter

    config = get_symmetric_quantization_config(is_per_channel=per_channel, is_dynamic=dynamic)
    if method == "minmax":
        spec = dataclasses.replace(config.input_activation,
                                   observer_or_fake_quant_ctr=MinMaxObserver.with_args(eps=2**-12))
        config = dataclasses.replace(config, input_activation=spec, output_activation=spec)
    quantizer = XNNPACKQuantizer()
    if weighted:
        for target in (*LINEAR_TARGETS, *CONV_TARGETS, *CONV_TRANSPOSE_TARGETS):
            quantizer.set_operator_type(target, config)
    else:
        quantizer.set_global(config)
    if excluded:
        filters = [get_module_name_filter(name) for name in excluded]
        quantizer.set_filter_function(lambda node: not any(f(node) for f in filters))
    return quantizer


def layer_sensitivity(reference: torch.fx.GraphModule, converted: torch.fx.GraphModule, data: Dataset,
                      batch: int) -> list[LayerSensitivity]:
    """Each conv / linear output (after its quantize-dequantize, as the next layer sees it) in the
    converted model against the same node in the float (prepared) model; named by owning module."""
    layers = layer_nodes(reference)
    seen = {_after_qdq(n).name: n.name for n in converted.graph.nodes if n.name in layers}
    ref = node_outputs(reference, {name: name for name in layers}, data, batch)
    out = node_outputs(converted, seen, data, batch)
    return [LayerSensitivity(_owner(node), str(node.target).split(".")[1], sqnr_of(ref[name], out[name]))
            for name, node in layers.items() if name in out]


def layer_nodes(prepared: torch.fx.GraphModule) -> dict[str, torch.fx.Node]:
    """The conv / linear calls of a prepared graph that belong to a module, by node name."""
    return {n.name: n for n in prepared.graph.nodes if n.op == "call_function"
            and any(k in str(n.target) for k in LAYER_OPS) and n.meta.get("nn_module_stack")}


def _owner(node: torch.fx.Node) -> str:
    """The module a node's call belongs to (the name the quantizer's filter takes)."""
    return list(node.meta["nn_module_stack"].values())[-1][0]


def one_layer_runs(reference: torch.fx.GraphModule, data: Dataset, batch: int) -> OneLayerRuns:
    """The float model's outputs and, for any layer (module), those of the calibrated prepared graph
    with only that module's observers quantizing: its input activations and weights (on its own
    edges) and its output (after a fused activation), each with the observer's own
    ``calculate_qparams()``, the parameters convert_pt2e writes into the quantize-dequantize pairs it
    puts there, through the same quantized_decomposed ops; every other observer passes its input
    through. This is the converted graph's arithmetic, not XNNPACK's int8 kernels (which may round
    requantization differently by a step). Batch norm is folded as the prepared graph has it."""
    import functools

    from edgeship.quantize.observers import OneLayer, QuantParams, one_layer_plan, run_one_layer

    by_module: dict[str, list[torch.fx.Node]] = {}
    for node in layer_nodes(reference).values():
        by_module.setdefault(_owner(node), []).append(node)
    qparams = functools.cache(QuantParams.of)

    def only(name: str) -> Outputs:
        if name not in by_module:
            raise NotMeasurable(f"no conv or linear call of module {name} in the prepared graph")
        return run_one_layer(reference, one_layer_plan(reference, by_module[name], qparams), data, batch)

    def without(kept: list[str]) -> Outputs:  # the observers of every other layer quantizing
        nodes = [node for name, found in by_module.items() if name not in set(kept) for node in found]
        return run_one_layer(reference, one_layer_plan(reference, nodes, qparams), data, batch)

    return OneLayerRuns(run_one_layer(reference, OneLayer(), data, batch), only, without)


def _after_qdq(node: torch.fx.Node) -> torch.fx.Node:
    """The dequantize that follows ``node``'s quantize, when its output is quantized; else ``node``."""
    users = list(node.users)
    if len(users) == 1 and "quantize_per" in str(users[0].target) and len(users[0].users) == 1:
        return next(iter(users[0].users))
    return node


def node_outputs(module: torch.fx.GraphModule, watch: dict[str, str], data: Dataset,
                 batch: int) -> dict[str, list[np.ndarray]]:
    """The outputs of the nodes named in ``watch`` (recorded under its values) over every sample."""
    import torch

    recorded: dict[str, list[np.ndarray]] = {label: [] for label in watch.values()}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            result = super().run_node(n)
            if n.name in watch:
                recorded[watch[n.name]].append(result.detach().numpy().copy())
            return result

    with torch.no_grad():
        for part in data.batches(batch):
            Recorder(module).run(*[torch.from_numpy(a) for a in part.values()])
    return recorded


def _export(module: torch.nn.Module, captured: Captured) -> torch.export.ExportedProgram:
    """The quantized module exported again, with the spec's dynamic dimensions (if any) kept free."""
    import torch

    dynamic = shapes.export_dynamic_shapes(captured.model.spec)
    if dynamic is None:
        return torch.export.export(module, captured.example_inputs)
    return torch.export.export(module, free_examples(captured.example_inputs, dynamic), dynamic_shapes=dynamic)
