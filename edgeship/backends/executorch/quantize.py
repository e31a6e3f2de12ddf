"""ExecuTorch's own int8 path: PT2E quantization with the XNNPACK quantizer, lowered to XNNPACK.

Static: per-channel (or per-tensor) symmetric int8 weights and int8 activations whose ranges come
from calibration (HistogramObserver by default, as XNNPACK's symmetric config uses; or min-max).
Dynamic: int8 weights, activations quantized at run time by XNNPACK from each input's range.
Layers kept in float are filtered out of the quantizer by module name, so XNNPACK runs them in
fp32 inside the same program.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, cast

from edgeship.backends.base import LowerRequest
from edgeship.backends.executorch.spec import EXECUTORCH_QUANTIZATION
from edgeship.lowering.capture import Captured, capture_export
from edgeship.quantize.observers import CALIBRATION_BATCH
from edgeship.quantize.pt2e import export_quantized, graph_ops, static_with_fallback
from edgeship.quantize.quantized import Quantized
from edgeship.quantize.scope import choose_scope
from edgeship.quantize.settings import QuantizationSettings

if TYPE_CHECKING:
    import torch
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import XNNPACKQuantizer

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
    program = export_quantized(convert_pt2e(prepared), captured)
    return program, Quantized.describe("dynamic", "XNNPACK dynamic int8 (PT2E)", per_channel=settings.per_channel)


def _static(request: LowerRequest,
            settings: QuantizationSettings) -> tuple[torch.export.ExportedProgram, Quantized]:
    captured = request.captured
    method = settings.method or EXECUTORCH_QUANTIZATION.default_method
    data = request.calibration().take(settings.samples, settings.seed or 0)
    program, batch = calibration_program(captured)
    ops = graph_ops(program)
    scope = choose_scope(settings.operators, ops, "XNNPACKQuantizer")
    key = {"kind": "pt2e-xnnpack", "weights_sha256": captured.model.state_sha256, "method": method,
           "per_channel": settings.per_channel, "weighted_only": scope.weighted}
    converted, facts, excluded, report = static_with_fallback(
        request, settings, program, batch, data, key,
        lambda kept: xnnpack_quantizer(settings.per_channel, method, kept,
                                       weighted=ops if scope.weighted else None))
    done = Quantized.describe(
        "static", "XNNPACK int8 (PT2E, XNNPACKQuantizer)", method=method, samples=len(data),
        per_channel=settings.per_channel, **scope.details(), kept_float=excluded, sensitivity=report,
        calibration={**facts, "data": data.source})
    done.notes.append(f"int8 operators: {scope.reason}")
    return export_quantized(converted, captured), done


def calibration_program(captured: Captured) -> tuple[torch.export.ExportedProgram, tuple[int, bool]]:
    """The program to quantize and its calibration batch: exported with a free batch dimension when
    the model allows it (observers cost per call, so 32 samples a call calibrate far faster), else
    the variant's own capture at the model's batch size. The result is exported again at that size."""
    try:
        return capture_export(captured.model, True, []), (CALIBRATION_BATCH, True)
    except Exception:  # batch-specific code: calibrate at the model's own batch size
        program = cast("torch.export.ExportedProgram", captured.program)  # an export capture
        return program, (int(captured.example_inputs[0].shape[0]), False)


def xnnpack_quantizer(per_channel: bool, method: str | None, excluded: list[str], dynamic: bool = False,
                      weighted: set[str] | None = None) -> XNNPACKQuantizer:
    """XNNPACKQuantizer with its symmetric config; min-max activations on request; layers filtered
    out; with ``weighted`` (the graph's aten operators, ``graph_ops``), only the convolutions and
    linear layers (no add, mul, cat, pooling).

    Weighted, the quantizer is given one operator type per kind of layer the graph calls (linear,
    convolution, transposed convolution), not every target of each kind: XNNPACKQuantizer runs every
    pattern of a kind once per operator type it is given, whichever target that is, and a kind's
    conv + batch-norm patterns are traced with torch.export each time (MiniLM: 10 operator types,
    54 pattern traces, about 8 s per prepare_pt2e, none of which can match a graph with no
    convolution). A kind's patterns run again for its second target find every node annotated by
    the first: one type per kind annotates the same nodes."""
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
    if weighted is not None:
        for kind in (LINEAR_TARGETS, CONV_TARGETS, CONV_TRANSPOSE_TARGETS):
            called = sorted((target for target in kind if str(target) in weighted), key=str)
            if called:
                quantizer.set_operator_type(called[0], config)
    else:
        quantizer.set_global(config)
    if excluded:
        filters = [get_module_name_filter(name) for name in excluded]
        quantizer.set_filter_function(lambda node: not any(f(node) for f in filters))
    return quantizer
