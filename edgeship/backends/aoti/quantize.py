"""The aoti backend's int8 path: PT2E with torchao's X86InductorQuantizer, compiled frozen into
oneDNN int8 kernels (qconv / qlinear) by AOTInductor.

Static only: per-channel symmetric int8 weights and uint8 activations whose ranges come from
calibration (HistogramObserver, the quantizer's default, or min-max). 7-bit weights
(``reduce_range``) where a target CPU's u8 x s8 kernels may saturate (x86 without VNNI:
``quantize/cpu_choice.saturation``). The quantizer finds its fusion patterns (conv + add + ReLU)
by each node's ``source_fn_stack``, which only strict ``torch.export`` records: a non-strict
capture falls back to module names, and a module called twice (torchvision's ResNet blocks call
one ReLU twice) stops it ("Input partition has more than one output node"). So the program
quantized here is exported strict. Layers kept in float are given no config by module name.
The per-layer sensitivity and keep_float work on the prepared and converted graphs exactly as
ExecuTorch's PT2E path does (its functions are reused: they read conv / linear nodes of any PT2E graph).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from edgeship.backends.base import LowerRequest
from edgeship.errors import LoweringError
from edgeship.lowering.capture import Captured
from edgeship.quantize.cpu_choice import saturation, this_machine
from edgeship.quantize.observers import CALIBRATION_BATCH
from edgeship.quantize.pt2e import export_quantized, graph_ops, static_with_fallback
from edgeship.quantize.quantized import Quantized
from edgeship.quantize.scope import choose_scope
from edgeship.quantize.settings import QuantizationSettings

if TYPE_CHECKING:
    import torch
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import X86InductorQuantizer

QUANTIZER = "torchao.quantization.pt2e.quantizer.x86_inductor_quantizer.X86InductorQuantizer"
DEFAULT_METHOD = "histogram"


def quantize_x86(request: LowerRequest) -> tuple[torch.export.ExportedProgram, Quantized]:
    """The variant's capture quantized for Inductor's x86 int8 lowering: an ExportedProgram to
    compile (frozen) and the facts."""
    settings = request.variant.quantization or QuantizationSettings()
    if not settings.per_channel:
        raise LoweringError("aoti int8 quantizes weights per channel only (X86InductorQuantizer's config): "
                            "set quantization.per_channel = true")
    captured = request.captured
    method = settings.method or DEFAULT_METHOD
    reduce_range, range_why = saturation(request.cpus if request.cpus is not None else this_machine())
    data = request.calibration().take(settings.samples, settings.seed or 0) if request.calibration else None
    if data is None:
        raise LoweringError("aoti int8 calibrates activation ranges and no calibration samples were given")
    program, batch = strict_program(captured)
    scope = choose_scope(settings.operators, graph_ops(program), "X86InductorQuantizer")
    key = {"kind": "pt2e-x86-inductor", "weights_sha256": captured.model.state_sha256, "method": method,
           "reduce_range": reduce_range, "weighted_only": scope.weighted}

    converted, facts, excluded, report = static_with_fallback(
        request, settings, program, batch, data, key,
        lambda kept: x86_quantizer(method, reduce_range, kept, scope.weighted))
    done = Quantized.describe(
        "static", "oneDNN int8 through AOTInductor (PT2E, X86InductorQuantizer)", method=method,
        samples=len(data), per_channel=True, reduce_range=reduce_range, reduce_range_why=range_why,
        **scope.details(), kept_float=excluded, sensitivity=report, calibration={**facts, "data": data.source})
    done.notes.append(f"int8 operators: {scope.reason}")
    done.notes.append(("7-bit weights: " if reduce_range else "8-bit weights: ") + range_why)
    return export_quantized(converted, captured), done


def strict_program(captured: Captured) -> tuple[torch.export.ExportedProgram, tuple[int, bool]]:
    """The model exported strict (X86InductorQuantizer's patterns need ``source_fn_stack``), with a
    free batch dimension when the model allows it (observers cost per call), else at its own batch."""
    import torch

    from edgeship.lowering.capture import free_examples
    from edgeship.shapes import export_dynamic_shapes

    model = captured.model
    try:
        dynamic = export_dynamic_shapes(model.spec, True)
        args = free_examples(model.example_inputs, dynamic) if dynamic else model.example_inputs
        program = torch.export.export(model.module, args, dynamic_shapes=dynamic, strict=True)
        return program, (CALIBRATION_BATCH, True)
    except Exception:  # batch-specific code: calibrate at the model's own batch size
        pass
    try:
        return torch.export.export(model.module, captured.example_inputs, strict=True), (
            int(captured.example_inputs[0].shape[0]), False)
    except Exception as e:
        raise LoweringError("aoti int8 quantizes a strict torch.export of the model (X86InductorQuantizer finds its "
                            f"patterns by the source of each node, which only strict export records), and strict "
                            f"export failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}") from None


def x86_quantizer(method: str, reduce_range: bool, excluded: list[str], weighted: bool) -> X86InductorQuantizer:
    """X86InductorQuantizer with its default (static, per-channel) config; min-max activations on
    request; 7-bit weights with ``reduce_range``; ``excluded`` modules left in float; with
    ``weighted``, only convolutions and linear layers."""
    import dataclasses

    import torch
    from torchao.quantization.pt2e import MinMaxObserver
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as x86

    config = x86.get_default_x86_inductor_quantization_config(reduce_range=reduce_range)
    if method == "minmax":
        spec = dataclasses.replace(config.input_activation,
                                   observer_or_fake_quant_ctr=MinMaxObserver.with_args(eps=2**-12))
        config = dataclasses.replace(config, input_activation=spec, output_activation=spec)
    quantizer = x86.X86InductorQuantizer()
    if weighted:
        for module_type in (torch.nn.Conv2d, torch.nn.Linear):
            quantizer.set_module_type_qconfig(module_type, config)
    else:
        quantizer.set_global(config)
    for name in excluded:
        quantizer.set_module_name_qconfig(name, cast(Any, None))
    return quantizer


def int8_kernels(calls: dict[str, int]) -> dict[str, int]:
    """The oneDNN int8 kernels among a package's calls (``package_calls``): qconv and qlinear."""
    return {name: n for name, n in calls.items() if name.lstrip("_").startswith(("qconv", "qlinear"))}


def checked_int8(calls: dict[str, int]) -> dict[str, int]:
    """The package's int8 kernels; a LoweringError when it holds none (Inductor computed the model in
    float from dequantized weights: not an int8 artifact)."""
    found = int8_kernels(calls)
    if not found:
        heavy = {n: c for n, c in calls.items() if "conv" in n or "linear" in n or "mm" in n}
        raise LoweringError("the aoti int8 package holds no oneDNN int8 kernel (qconv / qlinear): Inductor "
                            f"lowered the quantized program to float calls ({heavy or 'none named'}); refused "
                            "rather than shipped as int8")
    return found

