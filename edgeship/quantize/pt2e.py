"""PT2E helpers shared by the backends that quantize an exported program with a torchao quantizer
(each backend's ``quantize.py`` passes its own): calibrate and convert, the
per-layer sensitivity of the converted graph against the float one, keep_float's search, and the
quantized module exported again. What differs per backend is only the quantizer."""
from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from edgeship import shapes
from edgeship.backends.base import LowerRequest
from edgeship.cache import Cache
from edgeship.calibration.dataset import Dataset
from edgeship.lowering.capture import Captured, free_examples
from edgeship.quantize.autokeep import AutoKeep
from edgeship.quantize.observers import calibrate_observers
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

LAYER_OPS = ("conv", "linear")  # aten operators reported per layer (conv1d/2d/3d, convolution, linear)


def calibrate_and_convert(program: torch.export.ExportedProgram, quantizer: Any, data: Dataset,
                          batch: tuple[int, bool], cache: Cache | None, key: dict[str, Any],
                          ) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule, dict[str, Any]]:
    """prepare_pt2e with ``quantizer``, calibrate (or restore from the cache), convert_pt2e; the float
    reference (the prepared graph before conversion: batch norm folded, as convert sees it) too."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    prepared = prepare_pt2e(program.module(), quantizer)
    facts = calibrate_observers(prepared, data, batch[0], cache, key, flexible=batch[1])
    reference = copy.deepcopy(prepared)
    return reference, convert_pt2e(prepared), facts


def static_with_fallback(request: LowerRequest, settings: QuantizationSettings, program: torch.export.ExportedProgram,
                         batch: tuple[int, bool], data: Dataset, key: dict[str, Any],
                         quantizer_for: Callable[[list[str]], Any],
                         ) -> tuple[torch.fx.GraphModule, dict[str, Any], list[str], Any]:
    """Static PT2E int8 of ``program``: calibrated and converted with ``quantizer_for([])``, each
    layer's sensitivity measured, and the layers keep_float (or its "auto" search within the
    variant's budget) keeps in float converted again with ``quantizer_for(kept)``. Returns the
    converted module, the calibration facts, the layers kept in float and the sensitivity report."""
    convert = lambda kept, key: calibrate_and_convert(  # noqa: E731
        program, quantizer_for(kept), data, batch, request.cache, key)
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
    return converted, facts, excluded, report


def graph_ops(program: torch.export.ExportedProgram) -> set[str]:
    """The aten operators an exported program calls (what ``quantize/scope.py`` reads)."""
    return {str(n.target) for n in program.graph_module.graph.nodes if n.op == "call_function"}


def run_graph(module: torch.fx.GraphModule, data: Dataset, batch: int) -> Outputs:
    """Every output of a (converted) graph module on ``data``, ``batch`` samples a call."""
    from edgeship.quantize.observers import OneLayer, run_one_layer

    return run_one_layer(module, OneLayer(), data, batch)



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
    through. This is the converted graph's arithmetic, not the runtime's int8 kernels (which may round
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



def export_quantized(module: torch.nn.Module, captured: Captured) -> torch.export.ExportedProgram:
    """The quantized module exported again, with the spec's dynamic dimensions (if any) kept free."""
    import torch

    dynamic = shapes.export_dynamic_shapes(captured.model.spec)
    if dynamic is None:
        return torch.export.export(module, captured.example_inputs)
    return torch.export.export(module, free_examples(captured.example_inputs, dynamic), dynamic_shapes=dynamic)
