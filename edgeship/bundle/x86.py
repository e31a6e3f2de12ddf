"""The x86 bundle's programs, for its OpenVINO IRs and ONNX models (both measured on the build's x86
devices): ``python/run_openvino.py`` (numpy and openvino) and, for ONNX variants,
``python/run_onnxruntime.py`` (numpy and onnxruntime), which load a model, run it on ``.npy``
inputs, print its outputs and time it; ``cpp/``, ``edgeship_openvino`` (main.cpp, with
``ov::Core``) and its CMake project, built against the OpenVINO runtime's C++ package (an openvino
wheel holds one); RUNNING.md with the commands for this bundle's models; and, when the build's
evaluation data can be read, one sample per input as ``.npy`` (``samples/``) to run them on.

Both OpenVINO programs compile an IR in the precision its runtime info records
(``edgeship/inference_precision``, what the build validated) and refuse to run when the CPU plugin
compiles for another, which it does by default on CPUs with AVX512-BF16 or AMX.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeship.bundle.linux import SHARED_HEADER, sample_files
from edgeship.bundle.sample import Sample

APP = Path(__file__).resolve().parent / "x86_app"
OPENVINO_FILES = {"python/run_openvino.py": "run_openvino.py", "cpp/main.cpp": "main.cpp",
                  "cpp/CMakeLists.txt": "CMakeLists.txt"}
ONNX_FILES = {"python/run_onnxruntime.py": "run_onnxruntime.py"}
GUIDE = "RUNNING.md"
README_TEMPLATE = "README.md.j2"
SAMPLES = "samples"
PROGRAM = "edgeship_openvino"


def x86_app(meta: dict[str, Any], artifacts: list[dict[str, Any]], toolchain: dict[str, str],
            sample: Sample | None = None) -> dict[str, bytes | Path]:
    """The programs by bundle path for the backends among ``artifacts`` (OpenVINO: Python and C++;
    ONNX: Python), RUNNING.md (for the model.json document ``meta``) and, given ``sample``, the inputs
    to run them on."""
    backends = {a["backend"] for a in artifacts}
    files: dict[str, bytes | Path] = {}
    for backend, programs in (("openvino", OPENVINO_FILES), ("onnx", ONNX_FILES)):
        if backend in backends:
            files.update({path: APP / name for path, name in programs.items()})
    if "openvino" in backends:
        files[f"cpp/{SHARED_HEADER.name}"] = SHARED_HEADER
    samples = sample_files(sample, SAMPLES) if sample is not None else {}
    files.update(samples)
    files[GUIDE] = running_guide(meta, artifacts, toolchain, list(samples),
                                 sample.source if sample else None).encode()
    return files


def running_guide(meta: dict[str, Any], artifacts: list[dict[str, Any]], toolchain: dict[str, str],
                  samples: list[str], source: str | None) -> str:
    """RUNNING.md: how to run each of this bundle's models in Python and C++, and what the inference
    precision hint is for."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(APP), trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True, undefined=jinja2.StrictUndefined, autoescape=False)
    models = [_model(a) for a in artifacts]
    openvino = [m for m in models if m["backend"] == "openvino"]
    versions = sorted({m["openvino_version"] for m in openvino})
    return env.get_template(README_TEMPLATE).render(
        model=meta["model"], inputs=meta["inputs"], outputs=meta["outputs"], models=models,
        first=openvino[0] if openvino else None, openvino=bool(openvino),
        onnx=any(m["backend"] == "onnx" for m in models), openvino_version=", ".join(versions) or "unknown",
        onnxruntime_version=toolchain.get("onnxruntime", "unknown"), labels=meta.get("labels"),
        output_names=[o.get("name") or f"out{i}" for i, o in enumerate(meta["outputs"])], samples=samples,
        source=source, input_args=" ".join(samples) or " ".join(f"{i['name']}.npy" for i in meta["inputs"]),
        program=PROGRAM)


def _model(artifact: dict[str, Any]) -> dict[str, Any]:
    runtime = artifact.get("runtime") or {}
    return {"variant": artifact["variant"], "backend": artifact["backend"], "precision": artifact["precision"],
            "path": artifact["path"], "inference_precision": runtime.get("inference_precision"),
            "openvino_version": str(runtime.get("written_by", "openvino unknown")).removeprefix("openvino "),
            "graph_optimization": runtime.get("graph_optimization")}
