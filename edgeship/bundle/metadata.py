"""model.json: what an app needs to feed the model and read its answer, and what runs each artifact.

Inputs (name, shape, dtype, layout) and preprocessing come from the model spec; the output's
shape from results.json (the float model's first output); what the output means from the
profile's ``[bundle] output``, else from the labels when their count matches the output size.
Runtime requirements come from the toolchain that wrote each artifact and the facts lowering
recorded (bytecode version, operators, delegation, opset, deployment target).
"""
from __future__ import annotations

from typing import Any

from edgeship.backends.registry import BACKENDS
from edgeship.profile import BundleSettings, Variant
from edgeship.results import Results, VariantResult
from edgeship.spec import ModelSpec

METADATA_SCHEMA = 1


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
    """What runs an artifact: the runtime, the version that wrote it and what it needs, as its backend
    says (``bundle_metadata``); a backend that says nothing gets its options and lowering details."""
    backend = BACKENDS[variant.backend]
    options = backend.parse_options(variant.options)
    described = backend.bundle_metadata(row, options, toolchain)
    if described is not None:
        return described
    return {"runtime": variant.backend, "options": options.model_dump(), "details": row.lowering.details}
