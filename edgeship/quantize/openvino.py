"""NNCF's post-training quantization of an OpenVINO model: int8 weights (per-channel unless the
variant says per-tensor) and int8 activations calibrated on the build's calibration data, written
as FakeQuantize nodes the CPU plugin runs with int8 kernels (VNNI, AMX where the CPU has them).

The options (``preset``, ``model_type``, ``fast_bias_correction``, ``subset_size``,
``target_device``, ``overflow_fix``) are ``nncf.quantize``'s own, at NNCF's defaults unless the
profile sets them, except ``subset_size`` (every calibration sample the variant draws, not NNCF's
300) and ``overflow_fix``, chosen from the target CPUs when unset (quantize/cpu_choice.py: 7-bit
weights in every layer where a CPU without VNNI could saturate). Activation
ranges: ``mean-minmax`` (NNCF's default for per-tensor activations: the mean over samples of each
sample's min and max), ``minmax`` (the extremes over all samples) or ``histogram``.

Where NNCF refuses the bias correction asked for (the full one on a graph with an ``If`` node, as a
detector with its own NMS converts to), the next is used (full, fast, none), recorded as
``bias_correction`` and ``bias_correction_refused`` and said in the notes.

Per-layer sensitivity compares each convolution's and MatMul's output in the quantized model with
the float model's (both compiled with f32 inference, outputs added at those nodes); ``keep_float``
puts the worst in NNCF's ignored scope. The quantized model is cached, keyed by the float IR's
sha256, the samples' sha256, every setting and NNCF's version.
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from edgeship.calibration import Dataset
from edgeship.devices.hashing import sha256_file
from edgeship.errors import LoweringError, first_line
from edgeship.lowering.registry import OPENVINO_QUANTIZATION
from edgeship.quantize.cpu_choice import choose_overflow_fix, cpu_details, this_machine
from edgeship.quantize.quantized import Quantized, calibrated
from edgeship.quantize.sensitivity import LayerSensitivity, sensitivity_and_fallback, sqnr_of
from edgeship.quantize.settings import QuantizationSettings

QUANTIZED_XML = "quantized.xml"
BIAS_FILE = "bias_correction.json"  # beside the cached quantized IR: the bias correction NNCF used
BIAS_CORRECTIONS = ("full", "fast", "none")  # NNCF's, tried in this order from the one the options ask
TORCH_CUDA_LOGGER = "torch.utils.cpp_extension"
WEIGHTED_OPS = ("Convolution", "GroupConvolution", "ConvolutionBackpropData", "MatMul")


def quantize_nncf(model: Any, request: Any) -> tuple[Any, Quantized]:
    """``model`` (an ov.Model in float) quantized by nncf.quantize on ``request``'s calibration data,
    and the facts. ``request`` is the lowering request (variant, options, calibration, cache, dest)."""
    import openvino as ov

    nncf = import_nncf()
    settings = request.variant.quantization or QuantizationSettings()
    method = settings.method or OPENVINO_QUANTIZATION.default_method
    data = request.calibration().take(settings.samples, settings.seed or 0)
    opts, spec = request.options, request.captured.model.spec
    batch = int(spec.inputs[0].shape[0])
    subset = min(opts.subset_size or len(data), len(data))
    cpus = this_machine() if request.cpus is None else request.cpus
    overflow_fix, overflow_why = choose_overflow_fix(opts.overflow_fix, cpus)
    nncf_args = {"preset": opts.preset, "model_type": opts.model_type, "target_device": opts.target_device,
                 "fast_bias_correction": opts.fast_bias_correction, "subset_size": subset,
                 "per_channel": settings.per_channel, "method": method, "overflow_fix": overflow_fix}
    core = ov.Core()
    with tempfile.TemporaryDirectory(prefix="edgeship-nncf-") as folder:
        float_xml = Path(folder) / "float.xml"
        ov.save_model(model, str(float_xml), compress_to_fp16=False)
        key_base = {"kind": "nncf-quantized", "model_sha256": sha256_file(float_xml),
                    "bin_sha256": sha256_file(float_xml.with_suffix(".bin")),
                    "data_sha256": data.fingerprint(), "batch": batch, **nncf_args,
                    "nncf": nncf.__version__, "openvino": ov.__version__}
        facts: dict[str, Any] = {}
        bias: dict[str, Any] = {}

        def quantized(ignored: list[str]) -> Any:
            def compute(folder: Path) -> None:
                out, used = run_nncf(lambda: core.read_model(str(float_xml)), data, batch, nncf_args, ignored)
                ov.save_model(out, str(folder / QUANTIZED_XML), compress_to_fp16=False)
                (folder / BIAS_FILE).write_text(json.dumps(used))
            with calibrated(request.cache, "openvino", {**key_base, "ignored": sorted(ignored)}, compute) as (e, f):
                if not facts:  # the first quantization's: later ones reuse it or only add an ignored scope
                    facts.update(f)
                    bias.update(bias_used(e.path, nncf_args))
                return core.read_model(str(e.path / QUANTIZED_XML))

        def measure(sample: Dataset, size: int) -> list[LayerSensitivity]:
            return layer_sensitivity(core, core.read_model(str(float_xml)), quantized([]), sample, size)

        report, excluded = sensitivity_and_fallback(settings.sensitivity, settings.keep_float, data, (batch, False),
                                                    Path(request.dest).parent, measure)
        result = quantized(excluded)
    fq = sum(1 for op in result.get_ordered_ops() if op.get_type_name() == "FakeQuantize")
    if fq == 0:
        raise LoweringError("NNCF left no FakeQuantize node in the model: nothing would run in int8 (no convolution "
                            "or MatMul NNCF quantizes); build openvino fp32 or bf16 for it")
    done = Quantized.describe("static", OPENVINO_QUANTIZATION.engines, format="FakeQuantize (OpenVINO IR)",
                              method=method, samples=len(data), per_channel=settings.per_channel,
                              preset=opts.preset, model_type=opts.model_type, target_device=opts.target_device,
                              fast_bias_correction=opts.fast_bias_correction, subset_size=subset, **bias,
                              overflow_fix=overflow_fix, overflow_fix_reason=overflow_why, cpus=cpu_details(cpus),
                              fake_quantize_nodes=fq, kept_float=excluded, sensitivity=report,
                              calibration={**facts, "data": data.source}, nncf=nncf.__version__)
    done.notes.append(overflow_why)
    if bias["bias_correction_refused"]:
        done.notes.append(f"bias correction {bias['bias_correction']}: NNCF refused "
                          + "; ".join(bias["bias_correction_refused"]))
    return result, done


def bias_used(entry: Path, args: dict[str, Any]) -> dict[str, Any]:
    """The bias correction a cached quantization used and the ones NNCF refused before it (an entry of
    before the fallback used the one asked: a refusal then failed the variant and cached nothing)."""
    path = entry / BIAS_FILE
    if path.exists():
        return json.loads(path.read_text())
    return {"bias_correction": "fast" if args["fast_bias_correction"] else "full", "bias_correction_refused": []}


def import_nncf() -> Any:
    """nncf, imported without torch's warning when NNCF's torch part looks for CUDA."""
    with quiet_loggers(TORCH_CUDA_LOGGER):
        import nncf
    return nncf


@contextlib.contextmanager
def quiet_loggers(*names: str, level: int = logging.ERROR) -> Iterator[None]:
    """Only records of ``level`` and above from the loggers ``names`` while the block runs."""
    loggers = [logging.getLogger(name) for name in names]
    before = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(level)
    try:
        yield
    finally:
        for logger, old in zip(loggers, before):
            logger.setLevel(old)


def run_nncf(read_model: Callable[[], Any], data: Dataset, batch: int, args: dict[str, Any], ignored: list[str]
             ) -> tuple[Any, dict[str, Any]]:
    """nncf.quantize with ``args`` (edgeship's names) on ``data`` in batches of ``batch``, and the bias
    correction it used. NNCF refuses its bias corrections on some graphs (the full one on a model with
    an ``If``, as a detector with its own NMS has): the next one is tried then (full, fast, none),
    each on a fresh read of the float model, and the refusals are returned to say so."""
    asked = "fast" if args["fast_bias_correction"] else "full"
    refused: list[str] = []
    for bias in BIAS_CORRECTIONS[BIAS_CORRECTIONS.index(asked):]:
        try:
            model = quantize_once(read_model(), data, batch, args, ignored, bias)
        except NotImplementedError as e:
            if "bias" not in str(e).lower() or bias == "none":
                raise
            refused.append(f"{bias} ({first_line(e)})")
            continue
        return model, {"bias_correction": bias, "bias_correction_refused": refused}
    raise AssertionError("unreachable: bias correction none raises or returns")


def quantize_once(model: Any, data: Dataset, batch: int, args: dict[str, Any], ignored: list[str], bias: str) -> Any:
    """One nncf.quantize call with bias correction ``bias`` (full, fast or none)."""
    import nncf
    from nncf.quantization.advanced_parameters import (
        AdvancedQuantizationParameters,
        OverflowFix,
        QuantizationParameters,
    )
    from nncf.quantization.range_estimator import RangeEstimatorParametersSet

    advanced = AdvancedQuantizationParameters(overflow_fix=OverflowFix(args["overflow_fix"]),
                                              disable_bias_correction=bias == "none")
    if not args["per_channel"]:
        advanced.weights_quantization_params = QuantizationParameters(per_channel=False)
    if args["method"] != "mean-minmax":  # NNCF's default for per-tensor activations
        advanced.activations_range_estimator_params = {
            "minmax": RangeEstimatorParametersSet.MINMAX, "histogram": RangeEstimatorParametersSet.HISTOGRAM,
        }[args["method"]]
    items = data.batches(batch)
    extra = {"model_type": nncf.ModelType.TRANSFORMER} if args["model_type"] == "transformer" else {}
    with quiet_nncf():
        return nncf.quantize(model, nncf.Dataset(items), preset=nncf.QuantizationPreset(args["preset"]),
                             target_device=nncf.TargetDevice[args["target_device"]],
                             subset_size=max(1, -(-args["subset_size"] // batch)),  # NNCF counts batches
                             fast_bias_correction=bias != "full",
                             ignored_scope=nncf.IgnoredScope(names=list(ignored)) if ignored else None,
                             advanced_parameters=advanced, **extra)


def layer_sensitivity(core: Any, float_model: Any, quantized: Any, data: Dataset, batch: int
                      ) -> list[LayerSensitivity]:
    """Each convolution's and MatMul's output in ``quantized`` against the same node in
    ``float_model`` (matched by friendly name), both computed in f32 on ``data``. Each layer's
    values are read by the tensor name of the model output ``add_outputs`` gives for its port: a
    port that is already a model output (a layer whose result the model returns) gets no new one,
    so outputs cannot be counted by position."""
    float_ops = {op.get_friendly_name(): op for op in weighted_ops(float_model)}
    quant_ops = {op.get_friendly_name(): op for op in weighted_ops(quantized)}
    names = [n for n in float_ops if n in quant_ops]
    runs = {}
    for label, model, ops in (("float", float_model, float_ops), ("int8", quantized, quant_ops)):
        ports = model.add_outputs([ops[n].output(0) for n in names])
        compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        request = compiled.create_infer_request()
        per_layer: list[list[np.ndarray]] = [[] for _ in names]
        for item in data.batches(batch):
            out = request.infer(item)
            for i, port in enumerate(ports):
                per_layer[i].append(np.array(out[port.get_any_name()]))
        runs[label] = per_layer
    return [LayerSensitivity(name, float_ops[name].get_type_name(), sqnr_of(runs["float"][i], runs["int8"][i]))
            for i, name in enumerate(names)]


def weighted_ops(model: Any) -> list[Any]:
    """The convolution and MatMul nodes of an ov.Model: the layers sensitivity reports and NNCF's
    ignored scope keeps in float."""
    return [op for op in model.get_ordered_ops() if op.get_type_name() in WEIGHTED_OPS]


@contextlib.contextmanager
def quiet_nncf() -> Iterator[None]:
    """NNCF's progress bars and info lines kept off edgeship's progress display (its warnings stay),
    and torch's warning that it found no CUDA (NNCF imports its torch part while it quantizes an
    OpenVINO model; no CUDA is needed)."""
    with quiet_loggers("nncf", level=logging.WARNING), quiet_loggers(TORCH_CUDA_LOGGER), \
            contextlib.redirect_stdout(io.StringIO()):
        yield
