"""What make bench times for one model: eager PyTorch, every artifact edgeship built that runs
here, and the peers, each with its precision, size and accuracy on the evaluation data.

A candidate is a dict: ``job`` (how a timing worker loads it), ``kind`` (eager, edgeship, peer),
``precision`` (fp32, bf16 or int8: the class its headline compares within, by what it computes in:
an fp16 artifact computed in f32 is fp32, an fp32 model an OpenVINO plugin computes in bf16 is bf16),
``runtime`` (what runs it: the device runner's runtime id, or the peer's), ``size_bytes``,
``sqnr_db`` / ``top1_drop`` (against the float model on the evaluation samples: edgeship's from its
results.json, the peers' measured here the same way), ``identity`` (runtime and file sha256) and
``same_as``: a byte-identical candidate run by the same runtime is timed once, as the first of them.
A peer also has ``made_and_judged_seconds``: what making it and its accuracy run took here.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# (name, make, load, identity): the last names the runtime in a peer's identity (``mark_identical``).
# The OpenVINO peers' is their own: the plugin compiles them at its defaults, not as edgeship's
# runner compiles its IR (precision and hint pinned), so the same bytes would not time the same.
PLUGIN_DEFAULTS = "openvino (plugin defaults)"
PEERS_FP32 = (("peer: onnxruntime default", "make_ort_default", "load_ort_default", "onnx"),
              ("peer: executorch xnnpack default", "make_executorch_default", "load_executorch_default",
               "executorch"),
              ("peer: openvino default", "make_openvino_default", "load_openvino_default", PLUGIN_DEFAULTS))
PEERS_INT8 = (("peer: onnxruntime quantize_static defaults", "make_ort_int8_default", "load_ort_default", "onnx"),
              ("peer: executorch xnnpack int8 default flow", "make_executorch_int8_default",
               "load_executorch_default", "executorch"),
              ("peer: nncf default ptq", "make_nncf_int8_default", "load_openvino_default", PLUGIN_DEFAULTS))
RUNTIME_OF = {"onnx": "onnxruntime", PLUGIN_DEFAULTS: "openvino"}  # a peer's identity -> the runtime's id
CALIBRATED = ("make_executorch_int8_default", "make_nncf_int8_default")  # make(module, example, calibration, folder)


@dataclass
class Found:
    candidates: dict[str, dict[str, Any]]
    inputs: list[np.ndarray]   # what every candidate is timed on
    flops: int | None


def candidates_of(spec_path: Path, folder: Path, profiles: list[str]) -> Found:
    """Every candidate for the model of ``spec_path``, whose builds are in ``folder``/<profile>."""
    from edgeship.model import count_flops, example_inputs, load_model
    from edgeship.results import Results
    from edgeship.spec import load_spec

    spec = load_spec(spec_path)
    model = load_model(spec)
    eager = {"spec": spec.model_dump(mode="json"), "base_dir": str(spec.base_dir), "trust_weights": False}
    found = {"eager": {"job": ("harness:runner_loader", ("eager", None, eager, None)), "kind": "eager",
                       "precision": "fp32", "runtime": "eager", "size_bytes": None, "sqnr_db": None,
                       "top1_drop": 0.0}}
    for profile in profiles:
        out = folder / profile
        found.update(artifacts(Results.read(out / "results.json"), out, profile))
    found.update(peers(spec, model, folder))
    mark_identical(found)
    return Found(found, [t.numpy() for t in example_inputs(spec)], count_flops(model.module, model.example_inputs))


def artifacts(results: Any, out: Path, label: str) -> dict[str, dict[str, Any]]:
    """The build's artifacts that run here, loaded as the device runner loads them (by its
    runtime id, with the runtime's own default thread count, as every candidate here)."""
    from edgeship.backends.registry import BACKENDS
    from edgeship.profile import load_profile

    variants = {v.name: v for v in load_profile(results.target).variants}
    rows = {}
    for row in results.variants[1:]:
        backend = BACKENDS.get(row.backend)
        if not row.file or backend.available(backend.parse_options({})) is not None:
            continue
        options = backend.job_options(backend.parse_options(variants[row.name].options), row.precision)
        acc = row.accuracy
        rows[f"{label}/{row.name}"] = {
            "job": ("harness:runner_loader", (backend.runtime, str(out / row.file), options, None)),
            "kind": "edgeship", "backend": row.backend, "runtime": backend.runtime,
            "precision": precision_class(row.precision, options), "built_precision": row.precision,
            "quantization": row.quantization, "size_bytes": row.size_bytes,
            "top1_drop": acc.top1_drop if acc else None, "sqnr_db": acc.sqnr_db if acc else None,
            "identical": bool(acc and acc.max_abs_err == 0.0), "identity": (backend.runtime, row.sha256)}
    return rows


def precision_class(precision: str, options: dict[str, Any]) -> str:
    """The class a variant's headline compares within: int8; bf16 where it computes in bf16 (an
    OpenVINO bf16 variant); else fp32 (fp32, and fp16 weights computed in f32, as before)."""
    if precision == "int8":
        return "int8"
    return "bf16" if precision == "bf16" or options.get("inference_precision") == "bf16" else "fp32"


def peers(spec: Any, model: Any, folder: Path) -> dict[str, dict[str, Any]]:
    """The peers made here (a peer that fails on this model is reported and left out), with their
    accuracy on the evaluation samples against the float model."""
    import peers as peer_module

    calibration, evaluation = peer_data(spec)
    reference = float_outputs(model, evaluation)
    labels = evaluation.labels if spec.task == "classification" else None  # an embedding's are its pairs
    compile_args = (spec.model_dump(mode="json"), str(spec.base_dir))
    started = time.perf_counter()
    compiled = peer_module.load_torch_compile(*compile_args)
    rows = {"peer: torch.compile": {"job": ("peers:load_torch_compile", compile_args), "kind": "peer",
                                    "precision": "fp32", "runtime": "torch.compile", "size_bytes": None,
                                    **peer_accuracy(lambda arrays: [compiled(arrays).numpy()], evaluation, reference,
                                                  labels),
                                    "made_and_judged_seconds": round(time.perf_counter() - started, 1)}}
    fp32_onnx = None
    for precision, table in (("fp32", PEERS_FP32), ("int8", PEERS_INT8)):
        for name, make, load, identity in table:
            started = time.perf_counter()
            try:
                if make == "make_ort_int8_default":
                    if fp32_onnx is None:
                        raise RuntimeError("the plain export it quantizes failed")
                    path = peer_module.make_ort_int8_default(fp32_onnx, calibration, folder)
                elif make in CALIBRATED:
                    path = getattr(peer_module, make)(model.module, model.example_inputs, calibration, folder)
                else:
                    path = getattr(peer_module, make)(model.module, model.example_inputs, folder)
                if make == "make_ort_default":
                    fp32_onnx = path
                predict = getattr(peer_module, load)(str(path))
                accuracy = peer_accuracy(predict, evaluation, reference, labels)
            except Exception as e:  # a peer that cannot handle this model is reported, not fatal
                first = (str(e).splitlines() or [""])[0][:160]
                print(f"  {name} failed here: {type(e).__name__}: {first}", flush=True)
                continue
            row = {"job": (f"peers:{load}", (str(path),)), "kind": "peer", "precision": precision,
                   "runtime": RUNTIME_OF.get(identity, identity), "size_bytes": peer_module.size_of(path),
                   "identity": (identity, _sha256(path)), **accuracy,
                   "made_and_judged_seconds": round(time.perf_counter() - started, 1)}
            if isinstance(predict, peer_module.OpenVinoDefault):
                row.update(plugin_compiled(predict, precision))
            rows[name] = row
    return rows


def plugin_compiled(predict: Any, precision: str) -> dict[str, Any]:
    """What OpenVINO's CPU plugin compiled a peer for, at its defaults, as the row records it: an
    fp32 model it computes in bf16 (a CPU with AVX512-BF16 or AMX) is compared as bf16, not fp32;
    an int8 model stays int8 (its float layers are what the hint covers)."""
    compiled = {"inference_precision": predict.precision, "threads": predict.threads,
                "performance_hint": predict.hint}
    note = (f"the CPU plugin at its defaults compiled it for {predict.precision} inference "
            f"(INFERENCE_PRECISION_HINT), {predict.hint} hint, {predict.threads} threads")
    if precision == "fp32" and predict.precision != "fp32":
        return {"precision": predict.precision, "plugin": compiled,
                "note": note + f": compared as {predict.precision}, not fp32"}
    return {"plugin": compiled, "note": note + ("; the layers NNCF leaves in float compute in it"
                                                if precision == "int8" else "")}


def peer_data(spec: Any) -> tuple[list[list[np.ndarray]], Any]:
    """The calibration samples edgeship's int8 variants take (the host profile's count and seed),
    one list of arrays per sample, and the evaluation data."""
    from edgeship.calibration import load_dataset
    from edgeship.profile import load_profile

    settings = load_profile("host").calibration
    calibration = load_dataset(spec.data.calibration, spec, "calibration", settings.samples, settings.seed)
    evaluation = load_dataset(spec.data.evaluation, spec, "evaluation")
    names = list(calibration.inputs)
    samples = [[calibration.inputs[n][i:i + 1] for n in names] for i in range(len(calibration))]
    return samples, evaluation


def float_outputs(model: Any, data: Any) -> np.ndarray:
    import torch

    names = list(data.inputs)
    with torch.inference_mode():
        return np.concatenate([model.module(*[torch.from_numpy(data.inputs[n][i:i + 1]) for n in names]).numpy()
                               for i in range(len(data))])


def peer_accuracy(predict: Any, data: Any, reference: np.ndarray, labels: np.ndarray | None) -> dict[str, Any]:
    """SQNR, top-1 drop (with class ``labels``) and whether it is identical, as edgeship computes them."""
    from edgeship import metrics

    names = list(data.inputs)
    out = np.concatenate([np.asarray(predict([data.inputs[n][i:i + 1] for n in names])[0]) for i in range(len(data))])
    acc = metrics.accuracy(reference, out.astype(reference.dtype), labels)
    return {"sqnr_db": acc["sqnr_db"], "top1_drop": acc["top1_drop"], "identical": acc["max_abs_err"] == 0.0}


def mark_identical(found: dict[str, dict[str, Any]]) -> None:
    """A candidate whose file and runtime equal an earlier one's is timed as that one (``same_as``):
    the same bytes run by the same runtime must time the same, so a second measurement would only
    add noise to a ratio that is 1. (edgeship's runner and the peers' loaders open a file alike:
    default session options, the runtime's own thread count.)"""
    first: dict[tuple, str] = {}
    for name, c in found.items():
        identity = c.get("identity")
        if identity is None:
            continue
        key = identity[:2]
        if key in first:
            c["same_as"] = first[key]
        else:
            first[key] = name


def _sha256(path: Path) -> str:
    import peers as peer_module

    digest = hashlib.sha256()
    for part in peer_module.parts_of(path):  # the file, then its external data or IR weights
        digest.update(part.read_bytes())
    return digest.hexdigest()
