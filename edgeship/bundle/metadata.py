"""model.json: what an app needs to feed the model and read its answer, and what runs each artifact.

Inputs (name, shape, dtype, layout) and preprocessing come from the model spec; the output's
shape from results.json (the float model's first output); what the output means from the
profile's ``[bundle] output``, else from the labels when their count matches the output size.
Runtime requirements come from the toolchain that wrote each artifact and the facts lowering
recorded (bytecode version, operators, delegation, opset, deployment target).
"""
from __future__ import annotations

from typing import Any

from edgeship.backends.registry import SPECS
from edgeship.profile import BundleSettings, Variant
from edgeship.results import Results, VariantResult
from edgeship.spec import ModelSpec

METADATA_SCHEMA = 1
DELEGATES = {"xnnpack": "XNNPACK", "coreml": "Core ML", "mps": "MPS", "portable": None}


def model_json(spec: ModelSpec, results: Results, settings: BundleSettings, labels: list[str] | None,
               artifacts: list[dict[str, Any]]) -> dict[str, Any]:
    """The model.json document of a bundle."""
    layout = spec.preprocess.layout
    outputs = output_info(results, settings, labels)
    return {"schema": METADATA_SCHEMA, "model": results.model.name, "target": results.target,
            "inputs": [{**i.described(), "layout": layout if len(i.shape) == 4 else None} for i in spec.inputs],
            "preprocessing": preprocessing(spec), "outputs": outputs,
            "labels": "labels.txt" if labels else None, "artifacts": artifacts}


def preprocessing(spec: ModelSpec) -> dict[str, Any]:
    """The image preprocessing the model spec declares, in the order it is applied."""
    p = spec.preprocess
    if not any((p.resize, p.crop, p.mean, p.std)):
        return {"declared": False, "layout": p.layout,
                "note": "the model spec declares no [preprocess] (resize, crop, mean, std): edgeship evaluated the "
                        "model on model-ready inputs; prepare app inputs the way those were made"}
    return {"declared": True, "color": p.color, "resize": p.resize, "crop": p.crop,
            "scale": "pixel values divided by 255, to [0, 1]", "mean": p.mean, "std": p.std, "layout": p.layout,
            "order": "resize to [height, width], center crop, scale to [0, 1], subtract mean, divide by std"}


def takes_images(spec: ModelSpec) -> bool:
    """Whether an app may give the model an image, prepared as the spec's ``[preprocess]`` says: the spec
    declares preprocessing and has one float32 input of [batch, channels, height, width] (or NHWC) whose
    channels are the colour mode's (3 for RGB, 1 for L)."""
    p = spec.preprocess
    if len(spec.inputs) != 1 or not any((p.resize, p.crop, p.mean, p.std)):
        return False
    inp = spec.inputs[0]
    channels = inp.shape[1] if p.layout == "NCHW" else inp.shape[-1]
    return inp.dtype == "float32" and len(inp.shape) == 4 and channels == (3 if p.color == "RGB" else 1)


def output_info(results: Results, settings: BundleSettings, labels: list[str] | None) -> list[dict[str, Any]]:
    """Shape and dtype of the output as recorded in results.json, and what it means."""
    recorded = getattr(results.model, "outputs", None) or []
    if not recorded:
        return [{"shape": None, "dtype": None, "meaning": settings.output,
                 "note": "the output shape is not recorded in this results.json"}]
    first = dict(recorded[0])
    first["meaning"], note = (settings.output, None) if settings.output else _derived_meaning(first, labels)
    if note:
        first["note"] = note
    return [first] + [dict(o) for o in recorded[1:]]


def _derived_meaning(output: dict[str, Any], labels: list[str] | None) -> tuple[str | None, str | None]:
    classes = (output.get("shape") or [None])[-1]
    if labels and classes == len(labels):
        return (f"one score per class, in the order of labels.txt ({classes} classes); the predicted class is the "
                "index of the largest score, as edgeship measured top-1", "whether the scores are logits or "
                "probabilities is not recorded: set [bundle] output in the profile to say")
    why = "no labels" if not labels else f"{len(labels)} labels but {classes} output values"
    return None, f"not described ({why}): set [bundle] output in the profile to say what the output means"


def runtime_needs(row: VariantResult, variant: Variant, toolchain: dict[str, str]) -> dict[str, Any]:
    """What runs an artifact: the runtime, the version that wrote it and what it needs."""
    options = SPECS[variant.backend].parse_options(variant.options).model_dump()
    details = row.lowering.details
    describe = {"executorch": _executorch, "pytorch-mobile": _mobile, "coreml": _coreml, "onnx": _onnx,
                "onnx-web": _onnx_web, "openvino": _openvino}
    if variant.backend in describe:
        return describe[variant.backend](details, options, toolchain, row)
    return {"runtime": variant.backend, "options": options, "details": details}


def _executorch(details: dict[str, Any], options: dict[str, Any], toolchain: dict[str, str],
                row: VariantResult) -> dict[str, Any]:
    version = toolchain.get("executorch", "unknown")
    minor = ".".join(version.split(".")[:2])
    delegate = DELEGATES.get(options.get("partitioner"), options.get("partitioner"))
    return {"runtime": "ExecuTorch", "written_by": f"executorch {version}",
            "needs": f"an ExecuTorch runtime {minor}.x or the next minor release (the .pte compatibility "
                     "policy guarantees no more; an older runtime may not load it)",
            "delegate": delegate if details.get("delegated_subgraphs") else None,
            "delegated_subgraphs": details.get("delegated_subgraphs"),
            "non_delegated_ops": details.get("non_delegated_ops"),
            "android_package": "org.pytorch:executorch-android", "ios_package": "ExecuTorch (Swift package)"}


def _mobile(details: dict[str, Any], options: dict[str, Any], toolchain: dict[str, str],
            row: VariantResult) -> dict[str, Any]:
    bytecode = details.get("bytecode_version")
    return {"runtime": "PyTorch Mobile lite interpreter", "written_by": f"torch {toolchain.get('torch', 'unknown')}",
            "bytecode_version": bytecode,
            "needs": f"a lite-interpreter runtime that reads bytecode version {bytecode} and has these operators",
            "operators": details.get("operators"), "android_package": "org.pytorch:pytorch_android_lite"}


def _coreml(details: dict[str, Any], options: dict[str, Any], toolchain: dict[str, str],
            row: VariantResult) -> dict[str, Any]:
    target = options.get("minimum_deployment_target")
    return {"runtime": "Core ML", "written_by": f"coremltools {toolchain.get('coremltools', 'unknown')}",
            "needs": f"{target} or later (ML program, specification version {details.get('spec_version')})",
            "minimum_deployment_target": target, "compute_units": options.get("compute_units"),
            "inputs": details.get("inputs"), "outputs": details.get("outputs")}


def _onnx(details: dict[str, Any], options: dict[str, Any], toolchain: dict[str, str],
          row: VariantResult) -> dict[str, Any]:
    opset = details.get("opset")
    qdq = row.precision == "int8"
    return {"runtime": "ONNX Runtime (on a Jetson also TensorRT, from an engine built on the device)",
            "written_by": f"torch {toolchain.get('torch', 'unknown')}", "opset": opset,
            "format": "QDQ (int8 QuantizeLinear/DequantizeLinear pairs)" if qdq else "float",
            "needs": f"a runtime that reads ONNX opset {opset}",
            "graph_optimization": options.get("graph_optimization"), "inputs": details.get("inputs"),
            "outputs": details.get("outputs")}


def _onnx_web(details: dict[str, Any], options: dict[str, Any], toolchain: dict[str, str],
              row: VariantResult) -> dict[str, Any]:
    opset = details.get("opset")
    measured = toolchain.get("onnxruntime-web")
    return {"runtime": "onnxruntime-web (WebAssembly backend: SIMD, threads when the page is cross-origin isolated)",
            "written_by": f"torch {toolchain.get('torch', 'unknown')}", "opset": opset,
            "format": "QDQ (int8 QuantizeLinear/DequantizeLinear pairs)" if row.precision == "int8" else "float",
            "build_toolchain": f"onnxruntime-web {measured}" if measured else None,
            "needs": f"onnxruntime-web with the wasm backend, reading ONNX opset {opset} (the bundle serves its own "
                     "copy from ort/)", "graph_optimization": options.get("graph_optimization"),
            "inputs": details.get("inputs"), "outputs": details.get("outputs")}


def _openvino(details: dict[str, Any], options: dict[str, Any], toolchain: dict[str, str],
              row: VariantResult) -> dict[str, Any]:
    version = str(details.get("openvino") or toolchain.get("openvino") or "unknown").split("-")[0]
    compute = details.get("inference_precision")
    weights = ", ".join(sorted(details.get("weight_constants") or {})) or "not recorded"
    needs = (f"the OpenVINO runtime {version} or later with its CPU plugin (an older one may lack operators of this "
             f"IR), compiling with INFERENCE_PRECISION_HINT {compute}, as recorded in the IR's runtime info "
             "edgeship/inference_precision")
    if compute == "bf16":
        needs += "; a CPU with AVX512-BF16 or AMX"
    return {"runtime": "OpenVINO runtime, CPU plugin", "written_by": f"openvino {version}",
            "format": f"OpenVINO IR (model.xml + model.bin; weights {weights})"
                      + (", int8 FakeQuantize by NNCF" if row.precision == "int8" else ""),
            "inference_precision": compute, "performance_hint": options.get("performance_hint"),
            "converted_from": details.get("converted_from"), "needs": needs,
            "inputs": details.get("inputs"), "outputs": details.get("outputs")}
