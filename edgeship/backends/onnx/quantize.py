"""ONNX Runtime's own int8 path: static QDQ quantization and dynamic quantization.

The float model is first pre-processed as ONNX Runtime recommends (``quant_pre_process``: shape
inference and graph optimization), with the fallbacks its documentation gives where that crashes
(``preprocess``: without the symbolic shape inference, then none; each step down recorded in the
details' ``fallbacks`` and the notes). Static quantization writes QDQ (QuantizeLinear /
DequantizeLinear pairs around float operators) with per-channel or per-tensor int8 weights and
either uint8 activations (U8S8: the fast, accurate form on CPUs) or symmetric int8 activations
(S8S8: the form TensorRT builds engines from without its own calibrator). Calibration ranges are
cached, keyed by the pre-processed model's sha256, the samples' sha256, the method and its
settings. Dynamic quantization (no calibration) covers MatMul and Gemm, as PyTorch's does Linear.

``quantize_qdq`` is the reusable entry: the onnx backend calls it, and so can other targets.
"""
from __future__ import annotations

import shutil
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from edgeship.backends.fallback import Descent, Rung, descend, recorded, told, vendor_step
from edgeship.cache import Cache, CacheEntry, EntryDamaged
from edgeship.calibration import Dataset
from edgeship.devices.hashing import sha256_file
from edgeship.fsutil import atomic_output, working_folder
from edgeship.quantize.autokeep import AutoKeep
from edgeship.quantize.quantized import Quantized, calibrated
from edgeship.quantize.scope import choose_scope
from edgeship.quantize.sensitivity import (
    LayerSensitivity,
    OneLayerRuns,
    Outputs,
    sensitivity_and_fallback,
    sqnr_of,
)

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from edgeship.backends.base import AccuracyBudget

Activations = Literal["uint8", "int8-symmetric"]
ORT_METHODS = {"minmax": "MinMax", "percentile": "Percentile", "entropy": "Entropy"}
FORMS = {"uint8": "U8S8 (uint8 activations, int8 weights)",
         "int8-symmetric": "S8S8 (symmetric int8 activations and weights)"}
DYNAMIC_OPS = ["MatMul", "Gemm"]
RANGES = "ranges.json"
LAYER_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")  # the weighted nodes reported and kept in float
FREE_BATCH = 8  # calibration batch when the model's batch dimension is free
ORT = "ONNX Runtime"
SYMBOLIC = "symbolic shape inference"


def quantize_qdq(fp32_path: Path, dest: Path, calibration: Dataset, *, activations: Activations = "uint8",
                 per_channel: bool = True, method: str = "minmax", percentile: float = 99.999,
                 keep_float: int | str = 0, sensitivity: bool = True, cache: Cache | None = None,
                 quantize_bias: bool = True, reduce_range: bool | None = None,
                 graph_optimization: str | None = None, operators: str = "auto",
                 budget: AccuracyBudget | None = None) -> Quantized:
    """Write ``dest``: the float ONNX model at ``fp32_path`` statically quantized to QDQ.

    ``calibration`` holds the samples (one array per ONNX input name). ``activations`` is
    ``"uint8"`` (U8S8) or ``"int8-symmetric"`` (S8S8, for TensorRT; run such a proxy under ONNX
    Runtime with graph optimization disabled). ``method`` is minmax, percentile or entropy.
    ``keep_float`` leaves that many of the most sensitive nodes unquantized (``"auto"``: as many as
    the variant's accuracy ``budget`` needs on calibration samples). ``operators``: every operator
    quantize_static takes, or only the weighted layers (``quantize/scope.py``; auto: weighted for a
    transformer's graph). ``quantize_bias=False``
    keeps biases float (TensorRT dequantizes only int8 with zero points of zero, not int32 biases).
    ``reduce_range`` quantizes weights to 7 bits; unset, it is on for U8S8, whose fused x86 kernels
    without VNNI add u8 x s8 products in pairs into int16 and saturate with full 8-bit weights (the
    demo reads 15 dB instead of 30 without it), and off for S8S8. The onnx backend sets it from the
    target CPUs instead (``backends/onnx/cpu.py``: 8 bits where they all have VNNI or are ARM).
    ``graph_optimization`` is the level ONNX Runtime runs the QDQ model at, for the sensitivity pass;
    unset: ``all`` for U8S8 (the onnx backend's default), ``disabled`` for S8S8 (TensorRT's proxy).
    Returns the facts (details and a note); the sensitivity report, when measured, is written
    beside ``dest``.
    """
    import onnxruntime

    weights = {"per_channel": per_channel, "quantize_bias": quantize_bias,
               "reduce_range": activations == "uint8" if reduce_range is None else reduce_range}

    with tempfile.TemporaryDirectory(prefix="edgeship-qdq-") as work:
        prepared = preprocess(Path(fp32_path), Path(work) / "pre.onnx")
        with told(prepared.steps):
            pre = prepared.value
            batch = calibration_batch(pre)
            key = {"kind": "onnxruntime-ranges", "model_sha256": sha256_file(pre),
                   "data_sha256": calibration.fingerprint(), "method": method, "batch": batch,
                   "percentile": percentile if method == "percentile" else None,
                   "onnxruntime": onnxruntime.__version__}
            compute = lambda folder: calibrate_ranges(pre, calibration, batch, method, percentile, folder / RANGES)  # noqa: E731
            scope = choose_scope(operators, op_types(pre), "ONNX Runtime's quantize_static")
            with calibrated(cache, "onnx", key, compute) as (entry, cache_facts):
                if not kept_ranges(entry, cache, Path(work)):
                    compute(Path(work))
                    cache_facts["cache"] = "miss"

                def write(out: Path, exclude: list[str], only: str | None = None) -> None:
                    _quantize_static(pre, out, Path(work) / RANGES, method, activations, exclude, only=only,
                                     op_types=list(LAYER_OPS) if scope.weighted else None, **weights)

                def measure(sample: Dataset, size: int) -> list[LayerSensitivity]:
                    write(Path(work) / "all.onnx", [])
                    return layer_sensitivity(pre, Path(work) / "all.onnx", sample, size, Path(work))

                level = graph_optimization or ("all" if activations == "uint8" else "disabled")

                def one_layer(sample: Dataset, size: int) -> OneLayerRuns:
                    return one_layer_runs(pre, lambda out, node: write(out, [], node), sample, size, Path(work), level)

                def real(kept: list[str]) -> Outputs:  # every layer quantized but ``kept``, as the artifact is
                    write(Path(work) / "kept.onnx", kept)
                    return run_outputs(Path(work) / "kept.onnx", calibration, batch, level)

                report, excluded = sensitivity_and_fallback(sensitivity, keep_float, calibration, (batch, False),
                                                            Path(dest).parent, measure, one_layer,
                                                            AutoKeep(budget, real))
                with atomic_output(Path(dest)) as out:
                    write(out, excluded)
    done = Quantized.describe("static", f"ONNX Runtime QDQ {FORMS[activations]}", format="QDQ",
                              activations=activations, method=method, samples=len(calibration),
                              **weights, **scope.details(), kept_float=excluded, sensitivity=report,
                              calibration={**cache_facts, "data": calibration.source})
    done.notes += [*(s.note() for s in prepared.steps), f"int8 operators: {scope.reason}"]
    recorded(done.details, prepared.steps)
    return done


def kept_ranges(entry: CacheEntry, cache: Cache | None, work: Path) -> bool:
    """Copy the calibration ranges kept in ``entry`` into ``work`` (this process's own folder, which
    quantize_static reads them from each time it runs), checked against the entry's signed sha256 list
    as copied. False when they are not the file signed (changed after the entry was checked): the entry
    is discarded, with a notice, and the caller calibrates into ``work``."""
    try:
        entry.copy_file(RANGES, work / RANGES)
    except EntryDamaged as e:
        if cache is not None:
            cache.discard_damaged(entry, str(e), "calibrating again")
        return False
    return True


def op_types(model: Path) -> set[str]:
    """The operator types in an ONNX model's graph."""
    import onnx

    return {node.op_type for node in onnx.load(str(model), load_external_data=False).graph.node}


def quantize_dynamic_onnx(fp32_path: Path, dest: Path, *, per_channel: bool = True) -> Quantized:
    """Write ``dest``: MatMul and Gemm with int8 weights and activations quantized at run time."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(prefix="edgeship-dyn-") as work:
        prepared = preprocess(Path(fp32_path), Path(work) / "pre.onnx")
        with told(prepared.steps), atomic_output(Path(dest)) as out:
            vendor_step(ORT, "quantize_dynamic", lambda: quantize_dynamic(
                str(prepared.value), str(out), op_types_to_quantize=DYNAMIC_OPS, per_channel=per_channel,
                weight_type=QuantType.QInt8))
    done = Quantized.describe("dynamic", "ONNX Runtime dynamic quantization (" + ", ".join(DYNAMIC_OPS) + ")",
                              per_channel=per_channel)
    done.notes += [s.note() for s in prepared.steps]
    recorded(done.details, prepared.steps)
    return done


def preprocess(src: Path, dest: Path) -> Descent[Path]:
    """``dest``: ``src`` as ONNX Runtime recommends preparing it (``quant_pre_process``: symbolic and
    ONNX shape inference, graph optimization), falling back as its documentation allows. Without the
    symbolic shape inference (``skip_symbolic_shape``) where that pass fails: it cannot follow
    data-dependent shapes (NonMaxSuppression, TopK over a count), and ONNX Runtime 1.32 crashes on some
    valid graphs (an Expand of a ReduceMax at opset 18 and later: TypeError in ``_infer_Expand``). With
    no pre-processing where that fails too: the exported model is quantized as it is. The steps down
    are in the Descent. It runs inside ``dest``'s folder: on a symbolic failure ONNX Runtime writes
    sym_shape_infer_temp.onnx and its data into the current folder."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    src, dest = Path(src).resolve(), Path(dest).resolve()

    def run(**skip: bool) -> Path:
        with working_folder(dest.parent):
            quant_pre_process(str(src), str(dest), **skip)
        return dest

    def as_exported() -> Path:
        shutil.copyfile(src, dest)
        return dest

    return descend(ORT, "quant_pre_process", [
        Rung("full", run, failing=preprocess_part),
        Rung(f"without {SYMBOLIC}", lambda: run(skip_symbolic_shape=True),
             failing="ONNX shape inference or graph optimization"),
        Rung("without pre-processing", as_exported)])


def preprocess_part(error: BaseException) -> str:
    """The part of quant_pre_process that raised ``error``: the symbolic shape inference when the
    traceback runs through its module, else the pre-processing as a whole."""
    frames = traceback.extract_tb(error.__traceback__)
    return SYMBOLIC if any(Path(f.filename).name == "symbolic_shape_infer.py" for f in frames) else "pre-processing"




def calibration_batch(model_path: Path) -> int:
    """The model's batch size when fixed, else FREE_BATCH samples a run."""
    import onnx

    dim = onnx.load(str(model_path), load_external_data=False).graph.input[0].type.tensor_type.shape.dim[0]
    return int(dim.dim_value) if dim.dim_value > 0 else FREE_BATCH


class _Reader:
    """An ONNX Runtime CalibrationDataReader over a Dataset, in batches."""

    def __init__(self, data: Dataset, batch: int) -> None:
        self._batches = iter(data.batches(batch))

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._batches, None)

    def __iter__(self):  # collect_activations iterates the reader
        return iter(self.get_next, None)


def calibrate_ranges(model: Path, data: Dataset, batch: int, method: str, percentile: float, out: Path) -> None:
    """Run ONNX Runtime's calibrator over ``data`` and save the tensor ranges it found to ``out``."""
    from onnxruntime.quantization.calibrate import CalibrationMethod, create_calibrator, save_tensors_data
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    ops = sorted(set(QLinearOpsRegistry) | set(QDQRegistry))  # what quantize_static calibrates
    extra = {"percentile": percentile} if method == "percentile" else {}

    def ranges() -> Any:  # ONNX Runtime's TensorsData
        calibrator = create_calibrator(model, ops, augmented_model_path=str(out.parent / "augmented.onnx"),
                                       calibrate_method=CalibrationMethod[ORT_METHODS[method]], extra_options=extra)
        calibrator.collect_data(_Reader(data, batch))
        return calibrator.compute_data()

    save_tensors_data(vendor_step(ORT, "calibration", ranges), out)
    (out.parent / "augmented.onnx").unlink(missing_ok=True)


def _quantize_static(pre: Path, out: Path, ranges: Path, method: str, activations: Activations,
                     exclude: list[str], per_channel: bool, quantize_bias: bool, reduce_range: bool,
                     op_types: list[str] | None = None,
                     only: str | None = None) -> None:
    """quantize_static from the cached ``ranges``: every node but ``exclude``, or ``only`` that one."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    symmetric = activations == "int8-symmetric"
    vendor_step(ORT, "quantize_static", lambda: quantize_static(
        str(pre), str(out), None, quant_format=QuantFormat.QDQ, per_channel=per_channel, reduce_range=reduce_range,
        activation_type=QuantType.QInt8 if symmetric else QuantType.QUInt8,
        weight_type=QuantType.QInt8, nodes_to_exclude=exclude,
        nodes_to_quantize=[only] if only else None, op_types_to_quantize=op_types,
        calibrate_method=CalibrationMethod[ORT_METHODS[method]],
        extra_options={"ActivationSymmetric": symmetric, "WeightSymmetric": True, "QuantizeBias": quantize_bias},
        calibration_cache_path=str(ranges)))


def layer_sensitivity(float_model: Path, qdq_model: Path, data: Dataset, batch: int,
                      work: Path) -> list[LayerSensitivity]:
    """Each weighted node's output (after its Q/DQ) in the QDQ model against the float model's,
    from ONNX Runtime's qdq_loss_debug; named as ``nodes_to_exclude`` takes them."""
    import onnx
    from onnxruntime.quantization import qdq_loss_debug as debug

    runs = {}
    for label, path in (("float", float_model), ("qdq", qdq_model)):
        augmented = work / f"{label}.augmented.onnx"
        debug.modify_model_output_intermediate_tensors(str(path), str(augmented))
        runs[label] = debug.collect_activations(str(augmented), _Reader(data, batch))
    matched = debug.create_activation_matching(runs["qdq"], runs["float"])
    producers = {out: n for n in onnx.load(str(qdq_model)).graph.node for out in n.output}
    layers = []
    for name, m in matched.items():
        node = _computing_node(producers, name)
        if m.get("float") and node is not None and node.op_type in LAYER_OPS:
            layers.append(LayerSensitivity(node.name, node.op_type, sqnr_of(m["float"], m["post_qdq"])))
    return layers


def one_layer_runs(float_model: Path, write_only: Callable[[Path, str], None], data: Dataset, batch: int,
                   work: Path, level: str) -> OneLayerRuns:
    """The float model's outputs and, for any node, those of a QDQ model with only that node quantized:
    ``write_only`` is quantize_static with ``nodes_to_quantize`` (the same cached ranges and settings as
    the variant, so the node's input, weight, bias and output Q/DQ are the variant's own). Each model
    is run by ONNX Runtime as a job loads it, at graph optimization ``level``."""
    def only(node: str) -> Outputs:
        write_only(work / "one-layer.onnx", node)
        return run_outputs(work / "one-layer.onnx", data, batch, level)

    return OneLayerRuns(run_outputs(float_model, data, batch, level), only)


def run_outputs(path: Path, data: Dataset, batch: int, level: str) -> Outputs:
    """Every output of the model at ``path`` on ``data``, ``batch`` samples a run."""
    from edgeship.devices.runner import open_runner

    runner = open_runner("onnxruntime", str(path), {"graph_optimization": level})
    try:
        return [runner.infer(list(part.values())) for part in data.batches(batch)]
    finally:
        runner.close()


def _computing_node(producers: dict[str, onnx.NodeProto], tensor: str) -> onnx.NodeProto | None:
    """The node computing ``tensor`` in a QDQ model (looking through its QuantizeLinear input)."""
    from onnxruntime.quantization.quant_utils import QUANT_INPUT_SUFFIX

    for name in (tensor + QUANT_INPUT_SUFFIX, tensor):
        if name in producers and producers[name].op_type not in ("QuantizeLinear", "DequantizeLinear"):
            return producers[name]
    return None
