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
import warnings
from collections.abc import Iterator
from typing import Any

from edgeship.cache import Cache
from edgeship.calibration.dataset import Dataset
from edgeship.errors import LoweringError
from edgeship.lowering.base import LowerRequest
from edgeship.lowering.capture import Captured, flat_outputs, fx_tracing
from edgeship.lowering.registry import MOBILE_QUANTIZATION
from edgeship.quantize.fx_parts import FxParts, convert_parts, local_names, prepare_parts
from edgeship.quantize.observers import (
    CALIBRATION_BATCH,
    calibrate_observers,
    run_samples,
    takes_any_batch,
)
from edgeship.quantize.quantized import Quantized
from edgeship.quantize.sensitivity import (
    LayerSensitivity,
    NotMeasurable,
    OneLayerRuns,
    Outputs,
    sensitivity_and_fallback,
    sqnr_of,
)
from edgeship.quantize.settings import QuantizationSettings

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


def quantize_module(request: LowerRequest, engine: str) -> tuple[Any, Quantized]:
    """The float module quantized for ``engine`` (call inside ``quantized_engine(engine)``)."""
    settings = request.variant.quantization or QuantizationSettings()
    if settings.scheme == "dynamic":
        return _dynamic(request.captured.model.module, settings, engine)
    return _static(request, settings, engine)


def _dynamic(module: Any, settings: QuantizationSettings, engine: str) -> tuple[Any, Quantized]:
    import torch
    from torch.ao.quantization import default_dynamic_qconfig, per_channel_dynamic_qconfig, quantize_dynamic

    qconfig = per_channel_dynamic_qconfig if settings.per_channel else default_dynamic_qconfig
    layers = {torch.nn.Linear: qconfig, torch.nn.LSTM: default_dynamic_qconfig, torch.nn.GRU: default_dynamic_qconfig}
    quantized = quantize_dynamic(copy.deepcopy(module).eval(), layers, dtype=torch.qint8)
    return quantized, Quantized.describe("dynamic", f"PyTorch dynamic quantization (Linear, LSTM, GRU; {engine})",
                                         quantized_engine=engine, per_channel=settings.per_channel)


def _static(request: LowerRequest, settings: QuantizationSettings, engine: str) -> tuple[Any, Quantized]:
    module, example = request.captured.model.module, request.captured.example_inputs
    method = settings.method or MOBILE_QUANTIZATION.default_method
    data = request.calibration().take(settings.samples, settings.seed or 0)
    flexible = takes_any_batch(module, example)  # FX graphs keep the module's batch freedom
    batch = (CALIBRATION_BATCH if flexible else int(example[0].shape[0]), flexible)
    key = {"kind": "fx-static", "engine": engine, "weights_sha256": request.captured.model.state_sha256,
           "method": method, "per_channel": settings.per_channel}
    quantized, facts, found, prepared = _calibrate_and_convert(
        module, example, qconfig_mapping(engine, method, settings.per_channel, []), data, batch, request.cache, key)
    report, excluded = None, []
    if found.whole:
        measure = lambda sample, size: layer_sensitivity(module, quantized, sample, size)  # noqa: E731
        one_layer = lambda sample, size: one_layer_runs(prepared, sample, size)  # noqa: E731
        report, excluded = sensitivity_and_fallback(settings.sensitivity, settings.keep_float, data, batch,
                                                    request.dest.parent, measure, one_layer)
    elif settings.keep_float:
        raise LoweringError("keep_float needs the per-layer sensitivity report, which torch.fx's numeric suite "
                            "makes only for a model it traces whole; this one was quantized by parts "
                            f"({found.note()}). Leave keep_float out for this model.")
    if excluded:
        mapping = qconfig_mapping(engine, method, settings.per_channel, excluded)
        quantized, facts, found, _ = _calibrate_and_convert(module, example, mapping, data, batch, request.cache,
                                                            {**key, "kept_float": excluded})
    result = Quantized.describe(
        "static", f"PyTorch FX graph mode, {engine} engine", quantized_engine=engine, method=method,
        samples=len(data), per_channel=settings.per_channel, kept_float=excluded, sensitivity=report,
        calibration={**facts, "data": data.source}, **_parts_details(found))
    if not found.whole:
        result.notes.append(found.note() + (" (per-layer sensitivity not measured: torch.fx's numeric suite needs "
                                            "the model traced whole)" if settings.sensitivity else ""))
    return quantized, result


def _parts_details(found: FxParts) -> dict[str, Any]:
    """results.json facts of a model quantized by parts (none when FX traced it whole)."""
    if found.whole:
        return {}
    return {"fx_parts": {"parts": found.parts, "untraceable": found.untraceable,
                         "layers_quantized": found.layers[0], "layers": found.layers[1]}}


def _calibrate_and_convert(module: Any, example: tuple[Any, ...], mapping: Any, data: Dataset,
                           batch: tuple[int, bool], cache: Cache | None, key: dict[str, Any],
                           ) -> tuple[Any, dict[str, Any], FxParts, Any]:
    """prepare_fx (whole or by parts), calibrate (or restore from the cache), convert_fx: the
    quantized model, the cache facts, the parts, and a copy of the calibrated prepared model when
    traced whole (convert_fx changes the prepared graph it is given)."""
    from torch.ao.quantization.fx.custom_config import PrepareCustomConfig
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    def prepare(part: Any, inputs: tuple[Any, ...], non_traceable: list[str], scope: str) -> Any:
        part_mapping = copy.deepcopy(mapping)
        kept_float = [n for n, q in mapping.module_name_qconfigs.items() if q is None]
        for name in kept_float:  # as the part's graph names them
            for local in local_names([name], scope):
                part_mapping.set_module_name(local, None)
        config = PrepareCustomConfig().set_non_traceable_module_names(non_traceable)
        return prepare_fx(part, part_mapping, inputs, prepare_custom_config=config)

    with fx_tracing("static int8 (PyTorch FX graph mode, prepare_fx)",
                    'Use quantization = { scheme = "dynamic" } (int8 nn.Linear, no tracing) for this model.'):
        found = prepare_parts(module, example, prepare)
    facts = calibrate_observers(found.module, data, batch[0], cache, key, flexible=batch[1])
    prepared = copy.deepcopy(found.module) if found.whole else None
    return convert_parts(found, convert_fx), facts, found, prepared


def qconfig_mapping(engine: str, method: str, per_channel: bool, excluded: list[str]) -> Any:
    """The engine's default mapping (fixed-range ops kept) with the chosen observers; ``excluded`` float."""
    import torch
    from torch.ao.quantization import QConfig, get_default_qconfig_mapping
    from torch.ao.quantization.observer import HistogramObserver, MinMaxObserver, PerChannelMinMaxObserver

    activation = (HistogramObserver if method == "histogram" else MinMaxObserver).with_args(
        reduce_range=REDUCE_RANGE[engine])
    weight = (PerChannelMinMaxObserver.with_args(dtype=torch.qint8, qscheme=torch.per_channel_symmetric)
              if per_channel else MinMaxObserver.with_args(dtype=torch.qint8, qscheme=torch.per_tensor_symmetric))
    mapping = get_default_qconfig_mapping(engine).set_global(QConfig(activation=activation, weight=weight))
    for name in excluded:
        mapping.set_module_name(name, None)
    return mapping


def layer_sensitivity(module: Any, quantized: Any, data: Dataset, batch: int) -> list[LayerSensitivity]:
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


def one_layer_runs(prepared: Any, data: Dataset, batch: int) -> OneLayerRuns:
    """The float model's outputs and, for any layer (module), those of the calibrated prepared graph
    with only that layer quantized: its input and output observers quantizing with their own
    ``calculate_qparams()`` (what convert_fx gives the quantize op before it and the quantized
    module's output scale), its weight by a fresh observer of its qconfig's weight kind
    (``with_quantized_weight``, as convert_fx quantizes weights); every other observer passes its
    input through. The arithmetic is float on quantized values: the engine's int8 kernels add an
    int32 bias and round once more when they requantize, a step at most."""
    import functools

    from edgeship.quantize.observers import OneLayer, QuantParams, one_layer_plan, run_one_layer

    qparams = functools.cache(QuantParams.of)

    def only(name: str) -> Outputs:
        nodes = [n for n in prepared.graph.nodes if n.op == "call_module" and n.target == name]
        if not nodes:
            raise NotMeasurable(f"no call of module {name} in the prepared graph")
        plan = one_layer_plan(prepared, nodes, qparams)
        plan.modules[name] = with_quantized_weight(prepared.get_submodule(name))
        return run_one_layer(prepared, plan, data, batch)

    return OneLayerRuns(run_one_layer(prepared, OneLayer(), data, batch), only)


def with_quantized_weight(layer: Any) -> Any:
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


def _numpy(tensor: Any) -> Any:
    return (tensor.dequantize() if tensor.is_quantized else tensor).detach().numpy()


def capture_like(captured: Captured, module: Any) -> Any:
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
