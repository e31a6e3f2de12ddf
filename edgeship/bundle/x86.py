"""The x86 bundle's programs, for the models of the backends measured on the build's x86 devices:
each backend's programs for this platform (its spec's ``bundle_programs``, files in its package),
which load a model, run it on ``.npy`` inputs, print its outputs and time it, with the shared C++
header beside any C++ program; RUNNING.md with the commands for this bundle's models; and, when the
build's evaluation data can be read, one sample per input as ``.npy`` (``samples/``) to run them on.
"""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from edgeship.backends.registry import SPECS, package_folder
from edgeship.bundle.linux import SHARED_HEADER, sample_files
from edgeship.bundle.sample import Sample

APP = Path(__file__).resolve().parent / "x86_app"
PLATFORM = "x86"
GUIDE = "RUNNING.md"
README_TEMPLATE = "README.md.j2"
SAMPLES = "samples"


def x86_app(meta: dict[str, Any], artifacts: list[dict[str, Any]], toolchain: dict[str, str],
            sample: Sample | None = None) -> dict[str, bytes | Path]:
    """The programs by bundle path for the backends among ``artifacts`` (their ``bundle_programs``),
    RUNNING.md (for the model.json document ``meta``) and, given ``sample``, the inputs
    to run them on."""
    files = programs(a["backend"] for a in artifacts)
    samples = sample_files(sample, SAMPLES) if sample is not None else {}
    files.update(samples)
    files[GUIDE] = running_guide(meta, artifacts, toolchain, list(samples),
                                 sample.source if sample else None).encode()
    return files


def programs(backends: Iterable[str]) -> dict[str, bytes | Path]:
    """The x86 programs of ``backends`` by bundle path, in registry order, with the shared C++ header
    when one of them is C++."""
    present = set(backends)
    files: dict[str, bytes | Path] = {}
    for name in (n for n in SPECS if n in present):
        folder = package_folder(name)
        files.update({path: folder / source for path, source in SPECS[name].bundle_programs.get(PLATFORM, {}).items()})
    if any(path.startswith("cpp/") for path in files):
        files[f"cpp/{SHARED_HEADER.name}"] = SHARED_HEADER
    return files


def running_guide(meta: dict[str, Any], artifacts: list[dict[str, Any]], toolchain: dict[str, str],
                  samples: list[str], source: str | None) -> str:
    """RUNNING.md: how to run each of this bundle's models in Python and C++, and what the inference
    precision hint is for."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(APP), trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True, undefined=jinja2.StrictUndefined, autoescape=False)
    return env.get_template(README_TEMPLATE).render(
        model=meta["model"], inputs=meta["inputs"], outputs=meta["outputs"], models=[_model(a) for a in artifacts],
        toolchain=toolchain, labels=meta.get("labels"),
        output_names=[o.get("name") or f"out{i}" for i, o in enumerate(meta["outputs"])], samples=samples,
        source=source, input_args=" ".join(samples) or " ".join(f"{i['name']}.npy" for i in meta["inputs"]))


def _model(artifact: dict[str, Any]) -> dict[str, Any]:
    runtime = artifact.get("runtime") or {}
    return {"variant": artifact["variant"], "backend": artifact["backend"], "precision": artifact["precision"],
            "path": artifact["path"], "inference_precision": runtime.get("inference_precision"),
            "runtime_version": str(runtime.get("written_by", "unknown")).split(" ", 1)[-1],
            "graph_optimization": runtime.get("graph_optimization")}
