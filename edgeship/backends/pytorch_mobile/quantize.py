"""PyTorch Mobile's own int8 path: FX graph mode static quantization and eager dynamic quantization.

The quantized engine (qnnpack for ARM phones, x86 or fbgemm for x86) is set before preparing, so
observers use that engine's ranges (x86 and fbgemm reduce activations to 7 bits to avoid overflow
in their kernels; qnnpack uses all 8) and weights are packed for its kernels. The quantized module
is then captured (trace or script) and saved for the lite interpreter like a float one; the
runtime must use the same engine, so the engine travels with the measurement job.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeAlias, cast

from edgeship.backends.base import LowerRequest
from edgeship.backends.pytorch_mobile.spec import MOBILE_QUANTIZATION
from edgeship.cache import Cache
from edgeship.calibration.dataset import Dataset
from edgeship.lowering.capture import Captured, flat_outputs, fx_tracing
from edgeship.quantize.autokeep import AutoKeep
from edgeship.quantize.fx_parts import (
    FxParts,
    called_modules,
    convert_parts,
    layers,
    local_names,
    prepare_parts,
    quantized_layers,
)
from edgeship.quantize.observers import (
    CALIBRATION_BATCH,
    OneLayer,
    calibrate_observers,
    one_layer_plan,
    run_batches,
    run_plans,
    run_samples,
    takes_any_batch,
)
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
    from torch.ao.quantization import QConfigMapping

    # convert(kept, copy_prepared): the quantized model, the cache facts, the parts, and the calibrated
    # prepared model when asked for a copy of it
    Converted: TypeAlias = tuple[torch.nn.Module, dict[str, Any], FxParts, Any]

ENGINES = ("qnnpack", "x86", "fbgemm")
# 7-bit activations for x86 and fbgemm on every x86 CPU, VNNI or not (unlike ONNX's reduce_range,
# quantize/cpu_choice.py): FBGEMM's int8 depthwise convolutions are AVX2 code (vpmaddubsw pairs into
# int16) even where VNNI is present.
REDUCE_RANGE = {"qnnpack": False, "x86": True, "fbgemm": True}
LAYER_TYPES = ("Conv", "Linear")  # quantized module types reported per layer (fused ones included)


@contextlib.contextmanager
def quantized_engine(engine: str) -> Iterator[None]:
    """Use ``engine``'s quantized kernels inside the block; the previous engine afterwards. Torch's
    notice that quantized tensors are deprecated (said once per layer) is kept out of the output."""
    import torch

    previous = torch.backends.quantized.engine
    torch.backends.quantized.engine = engine
    try:
        with warnings.catch_warnings():  # the whole quantized-tensor API warns it is deprecated
            warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*deprecated")
            yield
    finally:
        torch.backends.quantized.engine = previous


def quantize_module(request: LowerRequest, engine: str) -> tuple[torch.nn.Module, Quantized]:
    """The float module quantized for ``engine`` (call inside ``quantized_engine(engine)``)."""
    settings = request.variant.quantization or QuantizationSettings()
    if settings.scheme == "dynamic":
        return _dynamic(request.captured.model.module, settings, engine)
    return _static(request, settings, engine)


def _dynamic(module: torch.nn.Module, settings: QuantizationSettings, engine: str) -> tuple[torch.nn.Module, Quantized]:
    import torch
    from torch.ao.quantization import default_dynamic_qconfig, per_channel_dynamic_qconfig, quantize_dynamic

    qconfig = per_channel_dynamic_qconfig if settings.per_channel else default_dynamic_qconfig
    layers = {torch.nn.Linear: qconfig, torch.nn.LSTM: default_dynamic_qconfig, torch.nn.GRU: default_dynamic_qconfig}
    quantized = quantize_dynamic(copy.deepcopy(module).eval(), layers, dtype=torch.qint8)
    return quantized, Quantized.describe("dynamic", f"PyTorch dynamic quantization (Linear, LSTM, GRU; {engine})",
                                         quantized_engine=engine, per_channel=settings.per_channel)


def _static(request: LowerRequest, settings: QuantizationSettings, engine: str) -> tuple[torch.nn.Module, Quantized]:
    """FX static int8 of the operators ``settings.operators`` resolves to, with the layers
    ``keep_float`` names (a number, or "auto": as few as the variant's gates need) in float, chosen
    by the per-layer sensitivity of the model traced whole or by parts."""
    module, example = request.captured.model.module, request.captured.example_inputs
    method = settings.method or MOBILE_QUANTIZATION.default_method
    data = request.calibration().take(settings.samples, settings.seed or 0)
    flexible = takes_any_batch(module, example)  # FX graphs keep the module's batch freedom
    batch = (CALIBRATION_BATCH if flexible else int(example[0].shape[0]), flexible)
    scope = choose_scope(settings.operators, model_ops(request.captured), "PyTorch's FX default mapping")
    weighted = [(n, type(module.get_submodule(n))) for n in layers(module)] if scope.weighted else None
    key = {"kind": "fx-static", "engine": engine, "weights_sha256": request.captured.model.state_sha256,
           "method": method, "per_channel": settings.per_channel, "weighted_only": scope.weighted}
    made = _Conversions(lambda kept, copy_prepared=False: _calibrate_and_convert(
        module, example, qconfig_mapping(engine, method, settings.per_channel, kept, weighted), data, batch,
        request.cache, {**key, "kept_float": kept} if kept else key, copy_prepared),
        measured=settings.sensitivity or bool(settings.keep_float))
    quantized, _, found, prepared = made.first
    report, excluded = sensitivity_and_fallback(
        settings.sensitivity, settings.keep_float, data, batch, request.dest.parent,
        _measure(module, prepared, quantized, found.whole), lambda d, b: one_layer_runs(prepared, d, b),
        AutoKeep(request.budget, lambda kept: made.outputs(kept, data, batch)))
    quantized, facts, found, _ = made.get(excluded)
    result = Quantized.describe(
        "static", f"PyTorch FX graph mode, {engine} engine", quantized_engine=engine, method=method,
        samples=len(data), per_channel=settings.per_channel, **scope.details(), kept_float=excluded,
        sensitivity=report, calibration={**facts, "data": data.source}, **_parts_details(found))
    result.notes += [f"int8 operators: {scope.reason}", *([] if found.whole else [found.note()])]
    return quantized, result


class _Conversions:
    """The variant's quantized model with some layers kept in float, each prepared, calibrated and
    converted by ``convert(kept, copy_prepared)``: the first (none kept; with a copy of its
    calibrated prepared model when the sensitivity is ``measured``) and the last one asked for are
    remembered, so the model ``keep_float = "auto"`` settles on is not made twice."""

    def __init__(self, convert: Callable[..., Converted], measured: bool) -> None:
        self.convert = convert
        self.first = convert([], measured)
        self.last: tuple[tuple[str, ...], Any] = ((), self.first)

    def get(self, kept: list[str]) -> Converted:
        if not kept:
            return self.first
        if self.last[0] != tuple(kept):
            self.last = ((), None)  # the previous model is let go before the next is made
            self.last = (tuple(kept), self.convert(kept))
        return self.last[1]

    def outputs(self, kept: list[str], data: Dataset, batch: tuple[int, bool]) -> Outputs:
        """The real quantized model's outputs with ``kept`` in float on ``data`` (every calibration
        sample), flattened in the model's output order, as ``AutoKeep.real`` asks."""
        return run_batches(self.get(kept)[0], data, min(batch[0], len(data)) if batch[1] else batch[0])


def model_ops(captured: Captured) -> set[str]:
    """The model's operators as ``quantize/scope.py`` reads them: the node kinds of its TorchScript
    graph (aten::layer_norm, aten::softmax, aten::scaled_dot_product_attention), every branch of a
    scripted model included, which needs no torch.fx trace of the whole model; without a graph,
    its module classes (nn.LayerNorm, a Hugging Face BertSelfAttention)."""
    graph = getattr(getattr(captured, "program", None), "inlined_graph", None)
    if graph is None:
        return {type(m).__name__ for m in captured.model.module.modules()}
    ops, blocks = set(), [graph]
    while blocks:
        for node in blocks.pop().nodes():
            ops.add(node.kind())
            blocks.extend(node.blocks())
    return ops


def _measure(module: torch.nn.Module, prepared: torch.nn.Module, quantized: torch.nn.Module, whole: bool,
             ) -> Callable[[Dataset, int], list[LayerSensitivity]]:
    """The accumulated measure: FX's numeric suite for a model traced whole, forward hooks on the
    layers of both models for one quantized by parts (the suite needs one graph of the whole model)."""
    if whole:
        graph = cast("torch.fx.GraphModule", quantized)  # traced whole: one graph
        return lambda sample, size: layer_sensitivity(module, graph, sample, size)
    return lambda sample, size: layer_sensitivity_by_hooks(prepared, quantized, sample, size)


def _parts_details(found: FxParts) -> dict[str, Any]:
    """results.json facts of a model quantized by parts (none when FX traced it whole)."""
    if found.whole:
        return {}
    return {"fx_parts": {"parts": found.parts, "untraceable": found.untraceable,
                         "layers_quantized": found.layers[0], "layers": found.layers[1]}}


def _calibrate_and_convert(module: torch.nn.Module, example: tuple[torch.Tensor, ...], mapping: QConfigMapping,
                           data: Dataset, batch: tuple[int, bool], cache: Cache | None, key: dict[str, Any],
                           copy_prepared: bool = False) -> Converted:
    """prepare_fx (whole or by parts), calibrate (or restore from the cache), convert_fx: the
    quantized model, the cache facts, the parts, and with ``copy_prepared`` a copy of the calibrated
    prepared model (convert_fx changes the prepared graphs it is given)."""
    from torch.ao.quantization.fx.custom_config import PrepareCustomConfig
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    def prepare(part: torch.nn.Module, inputs: tuple[torch.Tensor, ...], non_traceable: list[str],
                scope: str) -> torch.fx.GraphModule:
        part_mapping = copy.deepcopy(mapping)
        for name, qconfig in mapping.module_name_qconfigs.items():  # as the part's graph names them
            for local in local_names([name], scope):
                part_mapping.set_module_name(local, qconfig)
        config = PrepareCustomConfig().set_non_traceable_module_names(non_traceable)
        return prepare_fx(part, part_mapping, inputs, prepare_custom_config=config)

    with fx_tracing("static int8 (PyTorch FX graph mode, prepare_fx)",
                    'Use quantization = { scheme = "dynamic" } (int8 nn.Linear, no tracing) for this model.'):
        found = prepare_parts(module, example, prepare)
    facts = calibrate_observers(found.module, data, batch[0], cache, key, flexible=batch[1])
    prepared = copy.deepcopy(found.module) if copy_prepared else None
    return convert_parts(found, convert_fx), facts, found, prepared


def qconfig_mapping(engine: str, method: str, per_channel: bool, excluded: list[str],
                    weighted: list[tuple[str, type]] | None = None) -> QConfigMapping:
    """The engine's default mapping (fixed-range ops kept) with the chosen observers; with
    ``weighted`` (the model's Conv and Linear layers: name, type), only those layers and functional
    linear and conv calls; ``excluded`` float."""
    import torch
    from torch.ao.quantization import QConfig, get_default_qconfig_mapping
    from torch.ao.quantization.observer import HistogramObserver, MinMaxObserver, PerChannelMinMaxObserver

    activation = (HistogramObserver if method == "histogram" else MinMaxObserver).with_args(
        reduce_range=REDUCE_RANGE[engine])
    weight = (PerChannelMinMaxObserver.with_args(dtype=torch.qint8, qscheme=torch.per_channel_symmetric)
              if per_channel else MinMaxObserver.with_args(dtype=torch.qint8, qscheme=torch.per_tensor_symmetric))
    mapping = get_default_qconfig_mapping(engine).set_global(QConfig(activation=activation, weight=weight))
    if weighted is not None:
        mapping = weighted_only(mapping, weighted)
    for name in excluded:
        mapping.set_module_name(name, None)
    return mapping


def weighted_only(full: QConfigMapping, weighted: list[tuple[str, type]]) -> QConfigMapping:
    """A mapping that quantizes the ``weighted`` layers (name, type) and the functional linear and
    conv calls, each as ``full`` would, and nothing else (no LayerNorm, add, mul, softmax). Layers
    are set by name, not by type: a type would have to be set for every module FX fuses with it
    (the ReLU of a conv-relu), which would quantize those elsewhere too."""
    import torch.nn.functional as F
    from torch.ao.quantization import QConfigMapping

    mapping = QConfigMapping()
    for function in (F.linear, F.conv1d, F.conv2d, F.conv3d, F.conv_transpose1d, F.conv_transpose2d,
                     F.conv_transpose3d):
        mapping.set_object_type(function, full.object_type_qconfigs.get(function, full.global_qconfig))
    for name, kind in weighted:
        mapping.set_module_name(name, full.object_type_qconfigs.get(kind, full.global_qconfig))
    return mapping


def layer_sensitivity(module: torch.nn.Module, quantized: torch.fx.GraphModule, data: Dataset,
                      batch: int) -> list[LayerSensitivity]:
    """Each quantized module's output against the matching float subgraph's (PyTorch's FX numeric
    suite matches fused layers such as conv-bn-relu); named by module path."""
    import torch.ao.ns._numeric_suite_fx as ns

    fp32, int8 = ns.add_loggers("fp32", copy.deepcopy(module), "int8", copy.deepcopy(quantized), ns.OutputLogger)
    run_samples(fp32, data, batch)
    run_samples(int8, data, batch)
    results = ns.extract_logger_info(fp32, int8, ns.OutputLogger, "int8")
    modules = {n.name: n.target for n in quantized.graph.nodes if n.op == "call_module"}
    layers = []
    for name, result in results.items():
        outputs = result["node_output"]
        kind = outputs.get("int8", [{}])[0].get("ref_node_target_type", "").rsplit(".", 1)[-1]
        if name in modules and "fp32" in outputs and any(k in kind for k in LAYER_TYPES):
            ref, out = outputs["fp32"][0], outputs["int8"][0]
            sqnr = sqnr_of([_numpy(v) for v in ref["values"]], [_numpy(v) for v in out["values"]])
            layers.append(LayerSensitivity(modules[name], kind, sqnr))
    return layers


def layer_sensitivity_by_hooks(prepared: torch.nn.Module, quantized: torch.nn.Module, data: Dataset,
                               batch: int) -> list[LayerSensitivity]:
    """Each quantized layer's output in the converted model against the same module's in the
    calibrated prepared model run in float (observers passed through, batch norm folded and
    activations fused as convert sees them, so a conv-relu is compared after its relu on both
    sides), recorded by forward hooks on both; named by the model's module path."""
    ref = {name: call.module for name, call in quantized_layers(prepared).items()}
    out = {name: m for name, m in called_modules(quantized).items() if "quantized" in type(m).__module__}
    names = [name for name in ref if name in out]
    seen: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {name: ([], []) for name in names}

    def record(name: str, side: int) -> Callable[..., None]:
        return lambda _module, _inputs, output: seen[name][side].append(_numpy(output))

    hooks = [models[name].register_forward_hook(record(name, side))
             for side, models in enumerate((ref, out)) for name in names]
    try:
        run_plans(prepared, {}, data, batch)
        run_batches(quantized, data, batch)
    finally:
        for hook in hooks:
            hook.remove()
    return [LayerSensitivity(name, type(out[name]).__name__, sqnr_of(*seen[name])) for name in names]


def one_layer_runs(prepared: torch.nn.Module, data: Dataset, batch: int) -> OneLayerRuns:
    """The float model's outputs and, for any layer (module path), those of the calibrated prepared
    model (whole, or each of its parts) with only that layer quantized: its input and output
    observers quantizing with their own ``calculate_qparams()`` (what convert_fx gives the quantize
    op before it and the quantized module's output scale), its weight by a fresh observer of its
    qconfig's weight kind (``with_quantized_weight``, as convert_fx quantizes weights); every other
    observer passes its input through. ``without(kept)``: every layer so quantized but ``kept``. The
    arithmetic is float on quantized values: the engine's int8 kernels add an int32 bias and round
    once more when they requantize, a step at most."""
    from edgeship.quantize.observers import QuantParams

    layers_found = quantized_layers(prepared)
    qparams = functools.cache(QuantParams.of)
    weights = functools.cache(lambda name: with_quantized_weight(layers_found[name].module))

    def run(names: list[str]) -> Outputs:
        plans: dict[str, OneLayer] = {}
        for scope in {layers_found[name].scope for name in names}:
            here = [name for name in names if layers_found[name].scope == scope]
            graph = layers_found[here[0]].graph
            plans[scope] = one_layer_plan(graph, [n for name in here for n in layers_found[name].nodes], qparams)
            plans[scope].modules.update({layers_found[name].nodes[0].target: weights(name) for name in here})
        return run_plans(prepared, plans, data, batch)

    def only(name: str) -> Outputs:
        if name not in layers_found:
            raise NotMeasurable(f"no call of module {name} in the prepared graph")
        return run([name])

    return OneLayerRuns(run([]), only, lambda kept: run([n for n in layers_found if n not in set(kept)]))


def with_quantized_weight(layer: Any) -> torch.nn.Module:  # a prepared layer: it has a qconfig
    """A copy of a prepared FX layer (a Conv or Linear, or a fused module holding one, batch norm
    already folded in) with its weight quantized and dequantized as convert_fx quantizes it: by a
    fresh observer of the layer's ``qconfig.weight`` kind that has seen that weight."""
    import torch
    from torch.ao.nn.intrinsic import _FusedModule

    from edgeship.quantize.observers import QuantParams

    copied = copy.deepcopy(layer)
    inner = copied[0] if isinstance(copied, _FusedModule) else copied
    observer = layer.qconfig.weight()
    observer(inner.weight.detach())
    params = QuantParams.of(observer)
    if params is not None:
        inner.weight = torch.nn.Parameter(params.apply(inner.weight.detach()), requires_grad=False)
    return copied


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return (tensor.dequantize() if tensor.is_quantized else tensor).detach().numpy()


def capture_like(captured: Captured, module: torch.nn.Module) -> torch.jit.ScriptModule:
    """Capture the quantized ``module`` as the float one was (script or trace). An FX-converted
    module (or one with FX-converted parts) is always traced: FX already removed Python control
    flow, and scripting its generated code trips over postponed type annotations."""
    import torch

    if captured.method == "script" and not any(isinstance(m, torch.fx.GraphModule) for m in module.modules()):
        return torch.jit.script(module)
    flat = flat_outputs(module, captured.example_inputs, [])  # dict outputs as a tuple, as the float trace
    with warnings.catch_warnings():  # quantized ops read their scales as Python floats: constants by design
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        return torch.jit.trace(flat, captured.example_inputs, check_trace=False, strict=False)
