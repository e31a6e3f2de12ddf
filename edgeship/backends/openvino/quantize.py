"""NNCF's post-training quantization of an OpenVINO model: int8 weights (per-channel unless the
variant says per-tensor) and int8 activations calibrated on the build's calibration data, written
as FakeQuantize nodes the CPU plugin runs with int8 kernels (VNNI, AMX where the CPU has them).

The options (``preset``, ``model_type``, ``fast_bias_correction``, ``subset_size``,
``target_device``, ``overflow_fix``) are ``nncf.quantize``'s own, at NNCF's defaults unless the
profile sets them, except ``subset_size`` (every calibration sample the variant draws, not NNCF's
300) and ``overflow_fix``, chosen from the target CPUs when unset (backends/openvino/cpu.py: 7-bit
weights in every layer where a CPU without VNNI could saturate). Activation
ranges: ``mean-minmax`` (NNCF's default for per-tensor activations: the mean over samples of each
sample's min and max), ``minmax`` (the extremes over all samples) or ``histogram``.

Where NNCF refuses the bias correction asked for (the full one on a graph with an ``If`` node, as a
detector with its own NMS converts to), the next is used (full, fast, none), recorded as
``bias_correction`` and ``bias_correction_refused`` and said in the notes.

Per-layer sensitivity compares each convolution's and MatMul's output in the quantized model with
the float model's (both compiled with f32 inference, outputs added at those nodes), and measures
each layer's own contribution: the float IR with that layer alone made as the quantized IR has it
(``one_layer_runs``); ``keep_float`` puts the worst by the latter in NNCF's ignored scope. The
quantized model is cached, keyed by the float IR's sha256, the samples' sha256, every setting and
NNCF's version.
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from edgeship.backends.fallback import Rung, descend
from edgeship.backends.openvino.cpu import choose_overflow_fix
from edgeship.backends.openvino.spec import OPENVINO_QUANTIZATION, OpenvinoSpec
from edgeship.cache import CacheEntry, EntryDamaged
from edgeship.calibration import Dataset
from edgeship.devices.hashing import sha256_file
from edgeship.errors import LoweringError
from edgeship.quantize.autokeep import AutoKeep
from edgeship.quantize.cpu_choice import cpu_details, this_machine
from edgeship.quantize.quantized import Quantized, calibrated
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
    import openvino

    from edgeship.backends.base import LowerRequest

# A layer's constant input: (layer name, input port), or (layer name, "bias") for the bias added after it.
ConstantKey = tuple[str, int | str]

QUANTIZED_XML = "quantized.xml"
QUANTIZED_BIN = "quantized.bin"  # beside it: ov.save_model's weights
BIAS_FILE = "bias_correction.json"  # beside the cached quantized IR: the bias correction NNCF used
BIAS_CORRECTIONS = ("full", "fast", "none")  # NNCF's, tried in this order from the one the options ask
TORCH_CUDA_LOGGER = "torch.utils.cpp_extension"
WEIGHTED_OPS = ("Convolution", "GroupConvolution", "ConvolutionBackpropData", "MatMul")
WALK = 4  # ops between a layer and the FakeQuantize NNCF put on its input, at most


def quantize_nncf(model: openvino.Model, request: LowerRequest) -> tuple[openvino.Model, Quantized]:
    """``model`` (an ov.Model in float) quantized by nncf.quantize on ``request``'s calibration data,
    and the facts. ``request`` is the lowering request (variant, options, calibration, cache, dest)."""
    import openvino as ov

    nncf = import_nncf()
    settings = request.variant.quantization or QuantizationSettings()
    method = settings.method or OPENVINO_QUANTIZATION.default_method
    data = request.calibration().take(settings.samples, settings.seed or 0)  # type: ignore[misc]  # int8: set
    opts, spec = cast(OpenvinoSpec.Options, request.options), request.captured.model.spec
    batch = int(spec.inputs[0].shape[0])
    subset = min(opts.subset_size or len(data), len(data))
    cpus = this_machine() if request.cpus is None else request.cpus
    overflow_fix, overflow_why = choose_overflow_fix(opts.overflow_fix, cpus)
    model_type, scope_why = choose_model_type(opts.model_type, settings.operators, model)
    nncf_args = {"preset": opts.preset, "model_type": model_type, "target_device": opts.target_device,
                 "fast_bias_correction": opts.fast_bias_correction, "subset_size": subset,
                 "per_channel": settings.per_channel, "method": method, "overflow_fix": overflow_fix,
                 "smooth_quant": bool(opts.smooth_quant and model_type == "transformer")}
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

        def quantized(ignored: list[str]) -> openvino.Model:
            def compute(folder: Path) -> None:
                out, used = run_nncf(lambda: core.read_model(str(float_xml)), data, batch, nncf_args, ignored)
                ov.save_model(out, str(folder / QUANTIZED_XML), compress_to_fp16=False)
                (folder / BIAS_FILE).write_text(json.dumps(used))
            with calibrated(request.cache, "openvino", {**key_base, "ignored": sorted(ignored)}, compute) as (e, f):
                try:
                    used, xml = bias_used(e, nncf_args), checked_copy(e, Path(folder))
                except EntryDamaged as damage:  # changed after the entry was checked: quantized here again
                    if request.cache is not None:
                        request.cache.discard_damaged(e, str(damage), "quantizing again")
                    redo = Path(tempfile.mkdtemp(prefix="quantized-", dir=folder))
                    compute(redo)
                    used, xml = json.loads((redo / BIAS_FILE).read_text()), redo / QUANTIZED_XML
                if not facts:  # the first quantization's: later ones reuse it or only add an ignored scope
                    facts.update(f)
                    bias.update(used)
                return core.read_model(str(xml))

        def measure(sample: Dataset, size: int) -> list[LayerSensitivity]:
            return layer_sensitivity(core, core.read_model(str(float_xml)), quantized([]), sample, size)

        def one_layer(sample: Dataset, size: int) -> OneLayerRuns:
            runs = one_layer_runs(core, core.read_model(str(float_xml)), quantized([]), sample, size)
            return runs if not nncf_args["smooth_quant"] else replace(runs, without=None)  # weights rescaled

        def real(kept: list[str]) -> Outputs:
            return run_outputs(core, quantized(kept), data, batch)

        report, excluded = sensitivity_and_fallback(settings.sensitivity, settings.keep_float, data, (batch, False),
                                                    Path(request.dest).parent, measure, one_layer,
                                                    AutoKeep(request.budget, real))
        result = quantized(excluded)
    fq = sum(1 for op in result.get_ordered_ops() if op.get_type_name() == "FakeQuantize")
    if fq == 0:
        raise LoweringError("NNCF left no FakeQuantize node in the model: nothing would run in int8 (no convolution "
                            "or MatMul NNCF quantizes); build openvino fp32 or bf16 for it")
    done = Quantized.describe("static", OPENVINO_QUANTIZATION.engines, format="FakeQuantize (OpenVINO IR)",
                              method=method, samples=len(data), per_channel=settings.per_channel,
                              preset=opts.preset, model_type=model_type, model_type_reason=scope_why,
                              smooth_quant=nncf_args["smooth_quant"], target_device=opts.target_device,
                              fast_bias_correction=opts.fast_bias_correction, subset_size=subset, **bias,
                              overflow_fix=overflow_fix, overflow_fix_reason=overflow_why, cpus=cpu_details(cpus),
                              fake_quantize_nodes=fq, kept_float=excluded, sensitivity=report,
                              calibration={**facts, "data": data.source}, nncf=nncf.__version__)
    done.notes += [overflow_why, f"NNCF model_type {model_type or 'default'}: {scope_why}"]
    if bias["bias_correction_refused"]:
        done.notes.append(f"bias correction {bias['bias_correction']}: NNCF refused "
                          + "; ".join(bias["bias_correction_refused"]))
    return result, done


def bias_used(entry: CacheEntry, args: dict[str, Any]) -> dict[str, Any]:
    """The bias correction a cached quantization used and the ones NNCF refused before it (an entry of
    before the fallback used the one asked: a refusal then failed the variant and cached nothing)."""
    if BIAS_FILE in entry.files:
        return json.loads(entry.read_bytes(BIAS_FILE))
    return {"bias_correction": "fast" if args["fast_bias_correction"] else "full", "bias_correction_refused": []}


def checked_copy(entry: CacheEntry, work: Path) -> Path:
    """The entry's quantized IR copied into a new folder under ``work``, each file checked against the
    entry's signed list as it is copied (OpenVINO reads the .bin beside the .xml, maybe later, by path);
    the copy's .xml."""
    dest = Path(tempfile.mkdtemp(prefix="quantized-", dir=work))
    for name in (QUANTIZED_XML, QUANTIZED_BIN):
        entry.copy_file(name, dest / name)
    return dest / QUANTIZED_XML


def import_nncf() -> ModuleType:
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


def choose_model_type(asked: str | None, operators: str, model: openvino.Model) -> tuple[str | None, str]:
    """NNCF's model_type: the profile's, else "transformer" where ``operators`` resolves to weighted
    layers only (``quantize/scope.py``: by default, a graph with attention and layer normalization),
    and why."""
    if asked is not None:
        return asked, f"model_type {asked} set by the profile"
    scope = choose_scope(operators, {op.get_type_name() for op in model.get_ordered_ops()}, "NNCF's default scheme")
    if not scope.weighted:
        return None, scope.reason
    return "transformer", scope.reason + "; NNCF's transformer scheme quantizes the MatMul inputs only"


def run_nncf(read_model: Callable[[], openvino.Model], data: Dataset, batch: int, args: dict[str, Any],
             ignored: list[str]) -> tuple[openvino.Model, dict[str, Any]]:
    """nncf.quantize with ``args`` (edgeship's names) on ``data`` in batches of ``batch``, and the bias
    correction it used. NNCF refuses its bias corrections on some graphs (the full one on a model with
    an ``If``, as a detector with its own NMS has): the next one is tried then (full, fast, none),
    each on a fresh read of the float model (``backends/fallback.py``), and the refusals are returned
    to say so; a refusal of none too is a LoweringError naming NNCF and the bias correction."""
    asked = "fast" if args["fast_bias_correction"] else "full"

    def attempt(bias: str) -> Callable[[], openvino.Model]:
        return lambda: quantize_once(read_model(), data, batch, args, ignored, bias)

    rungs = [Rung(bias, attempt(bias), failing=f"bias correction {bias}")
             for bias in BIAS_CORRECTIONS[BIAS_CORRECTIONS.index(asked):]]
    done = descend("NNCF", "nncf.quantize", rungs, steps_down=refuses_bias_correction)
    return done.value, {"bias_correction": done.rung,
                        "bias_correction_refused": [f"{s.rung} ({s.crash.message})" for s in done.steps]}


def refuses_bias_correction(error: Exception) -> bool:
    """NNCF's refusal of a bias correction on a graph it does not support it for (NotImplementedError)."""
    return isinstance(error, NotImplementedError) and "bias" in str(error).lower()


def quantize_once(model: openvino.Model, data: Dataset, batch: int, args: dict[str, Any], ignored: list[str],
                  bias: str) -> openvino.Model:
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
    if extra and not args["smooth_quant"]:
        from nncf.quantization.advanced_parameters import AdvancedSmoothQuantParameters

        advanced.smooth_quant_alphas = AdvancedSmoothQuantParameters(matmul=-1)  # -1: SmoothQuant off
    with quiet_nncf():
        return nncf.quantize(model, nncf.Dataset(items), preset=nncf.QuantizationPreset(args["preset"]),
                             target_device=nncf.TargetDevice[args["target_device"]],
                             subset_size=max(1, -(-args["subset_size"] // batch)),  # NNCF counts batches
                             fast_bias_correction=bias != "full",
                             ignored_scope=nncf.IgnoredScope(names=list(ignored)) if ignored else None,
                             advanced_parameters=advanced, **extra)


def layer_sensitivity(core: openvino.Core, float_model: openvino.Model, quantized: openvino.Model, data: Dataset,
                      batch: int                      ) -> list[LayerSensitivity]:
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


def one_layer_runs(core: openvino.Core, float_model: openvino.Model, quantized: openvino.Model, data: Dataset,
                   batch: int) -> OneLayerRuns:
    """The float model's outputs and, for any layer, those of the float model with that layer alone
    as the quantized model computes it (``with_layer_quantized``), both compiled with f32 inference
    as the accumulated measure compiles them. NNCF is not run again: the quantized model's
    FakeQuantize ranges, int8 weights and corrected biases are copied, one layer at a time.

    Bias correction: the layer's bias is the one NNCF corrected. NNCF's fast bias correction
    computes that shift from the layer's own weight quantization on float inputs, so it belongs to
    this measure; the full one computes it on the quantized model's inputs to the layer, so it also
    cancels the mean error of the quantized layers upstream, which are float here: the layer's
    figure then includes that over-correction. Every other layer keeps its float bias."""
    float_names = {op.get_friendly_name() for op in weighted_ops(float_model)}
    quant_ops = {op.get_friendly_name(): op for op in weighted_ops(quantized) if op.get_friendly_name() in float_names}
    values = layer_constants(list(quant_ops.values()))

    def only(name: str) -> Outputs:
        if name not in quant_ops:
            raise NotMeasurable(f"layer {name} is not in both the float and the quantized IR")
        return run_outputs(core, with_layer_quantized(float_model, quant_ops[name], values), data, batch)

    def without(kept: list[str]) -> Outputs:
        chosen = [op for name, op in quant_ops.items() if name not in set(kept)]
        return run_outputs(core, with_layers_quantized(float_model, chosen, values), data, batch)

    return OneLayerRuns(run_outputs(core, float_model, data, batch), only, without)


def with_layer_quantized(float_model: openvino.Model, quant_op: openvino.Node,
                         values: dict[ConstantKey, np.ndarray]) -> openvino.Model:
    """A copy of ``float_model`` whose layer named as ``quant_op`` (the same layer in the quantized
    model) reads its inputs as ``quant_op`` does: the FakeQuantize nodes on its activation inputs
    copied in, on this layer's edges only, and its weights and the bias added after it replaced by
    the quantized model's ``values`` (``layer_constants``). Every other layer stays float."""
    return with_layers_quantized(float_model, [quant_op], values)


def with_layers_quantized(float_model: openvino.Model, quant_ops: list[openvino.Node],
                          values: dict[ConstantKey, np.ndarray]) -> openvino.Model:
    """``with_layer_quantized`` for several layers at once, in one copy of ``float_model``."""
    model = float_model.clone()
    ops = {o.get_friendly_name(): o for o in weighted_ops(model)}
    for quant_op in quant_ops:
        name = quant_op.get_friendly_name()
        op = ops[name]
        for port in range(op.get_input_size()):
            if (name, port) in values:
                _set_constant(op.input(port), values[(name, port)], name)
            else:
                _copy_fake_quantize(op, port, quant_op)
        bias = _bias_input(op)
        if bias is not None and (name, "bias") in values:
            _set_constant(bias, values[(name, "bias")], name)
    return model


def layer_constants(ops: list[openvino.Node]) -> dict[ConstantKey, np.ndarray]:
    """What the quantized model computes from constants alone for each layer in ``ops``, keyed by
    (layer, input port) and (layer, "bias"): its weights (the int8 values times their scales, as its
    kernels use them) and the bias added right after it. All are computed in one f32 compilation."""
    import openvino as ov
    import openvino.opset13 as opset

    wanted: dict[ConstantKey, openvino.Output] = {}
    for op in ops:
        name = op.get_friendly_name()
        for port in range(op.get_input_size()):
            if _from_constants(op.input_value(port).get_node()):
                wanted[(name, port)] = op.input_value(port)
        bias = _bias_input(op)
        if bias is not None:
            wanted[(name, "bias")] = bias.get_source_output()
    if not wanted:
        return {}
    results = [opset.result(output) for output in wanted.values()]  # new readers: look nothing up after this
    compiled = ov.Core().compile_model(ov.Model(results, [], "layer-constants"), "CPU",
                                       {"INFERENCE_PRECISION_HINT": "f32"})
    computed = compiled.create_infer_request().infer({})
    return {key: np.array(computed[i]) for i, key in enumerate(wanted)}


def _from_constants(node: openvino.Node, depth: int = 8) -> bool:
    """Whether ``node`` is computed from constants alone (weights, their scales, a bias)."""
    if node.get_type_name() == "Constant":
        return True
    if depth == 0 or node.get_type_name() in ("Parameter", "ReadValue") or node.get_input_size() == 0:
        return False
    return all(_from_constants(node.input_value(i).get_node(), depth - 1) for i in range(node.get_input_size()))


def _bias_input(op: openvino.Node) -> openvino.Input | None:
    """The constant input of the Add that alone reads ``op``'s output (the layer's bias), or None."""
    readers = list(op.output(0).get_target_inputs())
    if len(readers) != 1 or readers[0].get_node().get_type_name() != "Add":
        return None
    other = readers[0].get_node().input(1 - readers[0].get_index())
    return other if _from_constants(other.get_source_output().get_node()) else None


def _set_constant(port: openvino.Input, value: np.ndarray, layer: str) -> None:
    """Feed the input ``port`` from a new constant holding ``value`` (of the shape it had)."""
    import openvino.opset13 as opset

    shape = port.get_partial_shape()
    if shape.is_static and list(shape.to_shape()) != list(value.shape):
        raise NotMeasurable(f"layer {layer}: the quantized IR's constant {list(value.shape)} does not fit "
                            f"the float IR's {shape}")
    port.replace_source_output(opset.constant(value.astype(np.float32)).output(0))


def _copy_fake_quantize(op: openvino.Node, port: int, quant_op: openvino.Node) -> None:
    """Give ``op``'s input ``port`` the FakeQuantize the quantized model puts there: right in front of
    the layer, or up to WALK ops further up where NNCF placed it in front of ops that only move
    data (MaxPool, Reshape, Transpose: one input that is not a constant); no FakeQuantize there,
    nothing (NNCF left that input float)."""
    consumer, quant_consumer = op, quant_op
    for _ in range(WALK):
        quant_source = quant_consumer.input_value(port).get_node()
        if quant_source.get_type_name() == "FakeQuantize":
            _insert_fake_quantize(consumer.input(port), quant_source)
            return
        source = consumer.input_value(port).get_node()
        data_inputs = [i for i in range(quant_source.get_input_size())
                       if not _from_constants(quant_source.input_value(i).get_node())]
        if len(data_inputs) != 1 or source.get_type_name() != quant_source.get_type_name():
            return
        consumer, quant_consumer, port = source, quant_source, data_inputs[0]


def _insert_fake_quantize(port: openvino.Input, like: openvino.Node) -> None:
    """A FakeQuantize with the ranges and levels of ``like`` in front of the input ``port``."""
    import openvino.opset13 as opset

    ranges = []
    for i in range(1, 5):
        node = like.input_value(i).get_node()
        if node.get_type_name() != "Constant":
            raise NotMeasurable(f"{like.get_friendly_name()}: a FakeQuantize range that is not a constant")
        ranges.append(opset.constant(node.get_data().copy()))
    attributes = like.get_attributes()
    copy = opset.fake_quantize(port.get_source_output(), *ranges, attributes["levels"],
                               attributes.get("auto_broadcast", "numpy"))
    port.replace_source_output(copy.output(0))


def run_outputs(core: openvino.Core, model: openvino.Model, data: Dataset, batch: int) -> Outputs:
    """Every output of ``model`` (compiled with f32 inference) on ``data``, ``batch`` samples a run."""
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    request = compiled.create_infer_request()
    return [[np.array(value) for value in request.infer(item).values()] for item in data.batches(batch)]


def weighted_ops(model: openvino.Model) -> list[openvino.Node]:
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
