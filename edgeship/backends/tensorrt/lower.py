"""TensorRT (Jetson): the ONNX a TensorRT engine is built from, plus what builds it on the device.

Engines are specific to the GPU and TensorRT version, so the artifact here is the ONNX model
(static shapes, an opset the target's TensorRT parses, optionally simplified with onnxslim: without its
shape inference where that crashes, unsimplified where onnxslim crashes anyway, each step down in
``lowering.details["fallbacks"]``) and,
for int8, its symmetric S8S8 QDQ form with per-channel weights: explicit quantization, which
TensorRT 10 builds without a calibrator. Beside it go ``engine.json`` (the builder settings),
``tensorrt_engine.py`` (the device-side builder, TensorRT Python API) and ``build_engine.sh``
(the same with trtexec). On a machine without TensorRT the runner measures the ONNX with ONNX
Runtime as a labelled host proxy; the Q/DQ proxy runs with graph optimizations off, so the
quantization executes as written (simulated int8, what TensorRT's int8 approximates).

The batch stays as the spec writes it; the spec's dynamic dimensions stay free in the ONNX and
become one optimization profile (min, opt, max shapes) in engine.json and trtexec's
--minShapes/--optShapes/--maxShapes. The ONNX is run at those sizes with ONNX Runtime here.
"""
from __future__ import annotations

import json
import shutil
import tempfile
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from edgeship import shapes
from edgeship.backends.base import Artifact, Backend, LowerRequest, require
from edgeship.backends.fallback import Rung, StepDown, descend, lifted, recorded
from edgeship.backends.onnx.lower import export_onnx, graph_details
from edgeship.backends.tensorrt import engine as tensorrt_engine
from edgeship.backends.tensorrt.spec import TENSORRT_QUANTIZATION, TensorrtSpec
from edgeship.errors import LoweringError
from edgeship.fsutil import atomic_write_text
from edgeship.lowering.capture import check_sizes

if TYPE_CHECKING:
    from edgeship.quantize.quantized import Quantized
    from edgeship.spec import ModelSpec

ENGINE_FILES = ("engine.json", "tensorrt_engine.py", "build_engine.sh")
NMS_NOTE = ("the graph holds ONNX NonMaxSuppression, which TensorRT 10's ONNX parser builds as an INMSLayer "
            "(fp32/fp16, output size known only at run time); TensorRT's EfficientNMS_TRT plugin (fixed-size "
            "padded outputs, faster on Jetson) needs the NMS subgraph replaced before the engine build "
            "(onnx-graphsurgeon); or deploy the raw head outputs ([detection] postprocess = \"host\"). "
            "Neither is built or timed here: no NVIDIA GPU")
TensorrtOptions = TensorrtSpec.Options


class TensorrtBackend(TensorrtSpec, Backend):
    """Writes the static-shape ONNX (S8S8 QDQ for int8) and the settings the device builds the engine with."""

    def job_options(self, options: TensorrtOptions,  # type: ignore[override]
                    precision: str = "fp32", spec: ModelSpec | None = None) -> dict[str, Any]:
        """The runner builds the engine where TensorRT imports, else runs the ONNX Runtime proxy;
        an int8 (Q/DQ) proxy runs unoptimized so the quantization executes as written. With the
        model ``spec``, an engine for dynamic dimensions gets its min/opt/max profile."""
        settings = engine_settings("model.onnx", precision, options, spec)
        level = "disabled" if precision == "int8" else "all"
        return {"engine": settings, "proxy": {"runtime": "onnxruntime", "label": "onnxruntime (host proxy)",
                                              "options": {"graph_optimization": level}}}

    def lower(self, request: LowerRequest) -> Artifact:
        require("onnx", self.name)
        opts, precision = cast(TensorrtOptions, request.options), request.variant.precision
        notes: list[str] = []
        with tempfile.TemporaryDirectory(prefix="edgeship-trt-") as work:
            fp32 = Path(work) / "model.fp32.onnx"
            export_onnx(request.captured, opts.chosen_opset(), False, fp32)
            slimmed = simplify(fp32, notes) if opts.simplify else []
            details = self._write_model(request, fp32, notes)
        recorded(details, slimmed)
        settings = engine_settings(request.dest.name, precision, opts, request.captured.model.spec)
        write_engine_files(request.dest.parent, settings)
        details["engine_settings"] = settings
        details["trtexec"] = " ".join(tensorrt_engine.trtexec_command(settings))
        notes.append("engine built on the device (tensorrt_engine.py or build_engine.sh); engines do not "
                     "carry across GPUs or TensorRT versions")
        if details["operators"].get("NonMaxSuppression"):
            notes.append(NMS_NOTE)
        if request.captured.dynamic:
            notes.append(self._check_sizes(request))
        return Artifact(request.dest, notes, details)

    def _check_sizes(self, request: LowerRequest) -> str:
        """The ONNX the engine is built from, run by ONNX Runtime at min, opt and max (the engine
        itself is built and run on the device)."""
        try:
            require("onnxruntime", self.name)
        except LoweringError as e:
            return f"the ONNX was not run at the spec's sizes here: {e}"
        predict = self.load(request.dest, request.options, threads=1)
        computes = "int8" if request.variant.precision == "int8" else "fp32"   # the float ONNX of an fp16 engine
        return "ONNX Runtime (host proxy) " + check_sizes(request.captured, predict, computes)

    def _write_model(self, request: LowerRequest, fp32: Path, notes: list[str]) -> dict[str, Any]:
        import onnx

        if request.variant.precision != "int8":
            request.dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(fp32, request.dest)
            notes.append(f"{request.variant.precision} is applied by the TensorRT builder (the ONNX stays float)")
        else:
            quantized = self._quantize(request, fp32)
            notes.extend(quantized.notes)
        details = graph_details(onnx.load(str(request.dest), load_external_data=False))
        if request.variant.precision == "int8":
            details.update(lifted(quantized.details))
            details["quantization"] = quantized.details
        return details

    @staticmethod
    def _quantize(request: LowerRequest, fp32: Path) -> Quantized:
        """Symmetric int8 activations and weights (zero points 0), float biases: the Q/DQ forms
        TensorRT's parser takes (its DequantizeLinear reads int8 with a zero point of 0)."""
        from edgeship.backends.onnx.quantize import quantize_qdq
        from edgeship.quantize.settings import QuantizationSettings

        if request.calibration is None:
            raise LoweringError("int8 needs calibration data: add [data] calibration to the model spec")
        settings = request.variant.quantization or QuantizationSettings()
        data = request.calibration().take(settings.samples, settings.seed or 0)
        return quantize_qdq(fp32, request.dest, data, activations="int8-symmetric",
                            per_channel=settings.per_channel,
                            method=settings.method or TENSORRT_QUANTIZATION.default_method,
                            percentile=settings.percentile, keep_float=settings.keep_float,
                            sensitivity=settings.sensitivity, cache=request.cache, quantize_bias=False,
                            operators=settings.operators, budget=request.budget)


def simplify(path: Path, notes: list[str]) -> list[StepDown]:
    """onnxslim in place: constant folding and graph clean-up; the node counts go into the notes. Where
    it crashes, its documented ``no_shape_infer``, then no simplification (the profile's
    ``simplify = false``: TensorRT parses the exported ONNX as it is); the steps down are returned."""
    import onnx
    import onnxslim

    before = len(onnx.load(str(path)).graph.node)
    done = descend("onnxslim", "slim", [
        Rung("full", lambda: onnxslim.slim(str(path)), failing=slim_part),
        Rung("without shape inference", lambda: onnxslim.slim(str(path), no_shape_infer=True),
             failing="simplification"),
        Rung("without simplification", lambda: None)])
    if done.value is not None:
        onnx.save(done.value, str(path))
        notes.append(f"onnxslim {onnxslim.__version__}: {before} -> {len(done.value.graph.node)} nodes"
                     + ("" if done.rung == "full" else f" ({done.rung})"))
    notes.extend(s.note() for s in done.steps)
    return done.steps


def slim_part(error: BaseException) -> str:
    """The part of onnxslim.slim that raised ``error``: its shape inference, else the simplification."""
    frames = traceback.extract_tb(error.__traceback__)
    return "shape inference" if any(f.name == "shape_infer" for f in frames) else "simplification"


def engine_settings(onnx_name: str, precision: str, opts: TensorrtOptions,
                    spec: ModelSpec | None = None) -> dict[str, Any]:
    """The builder settings engine.json carries to the device; with a ``spec`` that has dynamic
    dimensions, the min/opt/max input shapes of its optimization profile."""
    settings = {"onnx": onnx_name, "engine": Path(onnx_name).with_suffix(".engine").name,
                "precision": precision, "tensorrt_version": opts.tensorrt_version,
                "workspace_mb": opts.workspace_mb,
                "timing_cache": "timing.cache" if opts.timing_cache else None,
                "builder_optimization_level": opts.builder_optimization_level,
                "dla_core": opts.dla_core, "gpu_fallback": opts.gpu_fallback}
    if spec is not None and shapes.is_dynamic(spec):
        settings["shapes"] = shapes.sizes(spec)
    return settings


def write_engine_files(folder: Path, settings: dict[str, Any]) -> None:
    """engine.json, the device-side builder and build_engine.sh, beside the ONNX model."""
    atomic_write_text(folder / "engine.json", json.dumps(settings, indent=2) + "\n")
    atomic_write_text(folder / "tensorrt_engine.py", Path(tensorrt_engine.__file__).read_text())
    atomic_write_text(folder / "build_engine.sh", tensorrt_engine.build_script(settings))
    (folder / "build_engine.sh").chmod(0o755)
