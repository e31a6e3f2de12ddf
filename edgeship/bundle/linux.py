"""The linux bundle's C++ application, under ``cpp/``: ``edgeship_run`` (main.cpp), which loads a
model of the backends the linux platform takes with LibTorch (a ``.pt2`` package after checking the
CPU flags it records, or a ``.pt``), runs it on ``.npy`` inputs, times it and writes its outputs and
``timings.json``; CMakeLists.txt, which builds it against a LibTorch; a README with the commands
for this bundle's models; and, when the build's evaluation data can be read, one sample per input
as ``.npy`` (``cpp/samples/``) to run it on.
"""
from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import numpy as np

from edgeship.bundle.sample import Sample

APP = Path(__file__).resolve().parent / "cpp"
APP_FILES = ("main.cpp", "CMakeLists.txt")
# The .npy reading and exit codes both bundles' C++ programs share (linux's and x86's), shipped beside main.cpp.
SHARED_HEADER = Path(__file__).resolve().parent / "cpp_shared" / "edgeship_common.hpp"
README_TEMPLATE = "README.md.j2"
SAMPLES = "cpp/samples"
PROGRAM = "edgeship_run"


def linux_app(meta: dict[str, Any], artifacts: list[dict[str, Any]],
              sample: Sample | None = None) -> dict[str, bytes | Path]:
    """The application's files by bundle path: its source, its CMake project, its README (for the
    model.json document ``meta`` and its ``artifacts``) and, given ``sample``, the inputs to try it on."""
    files: dict[str, bytes | Path] = {f"cpp/{name}": APP / name for name in APP_FILES}
    files[f"cpp/{SHARED_HEADER.name}"] = SHARED_HEADER
    samples = sample_files(sample) if sample is not None else {}
    files.update(samples)
    files["cpp/README.md"] = app_readme(meta, artifacts, list(samples), sample.source if sample else None).encode()
    return files


def sample_files(sample: Sample, folder: str = SAMPLES) -> dict[str, bytes]:
    """``<folder>/<input>.npy`` (``cpp/samples/`` by default) for each input of ``sample``, in input
    order: little-endian and C order, as edgeship_run reads them."""
    names = [re.sub(r"[^A-Za-z0-9_.-]", "_", name) for name in sample.arrays]
    if len(set(names)) < len(names):  # two inputs alike once made file names: number them instead
        names = [f"input{i}" for i in range(len(names))]
    files = {}
    for name, array in zip(names, sample.arrays.values()):
        buffer = io.BytesIO()
        np.save(buffer, np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")), allow_pickle=False)
        files[f"{folder}/{name}.npy"] = buffer.getvalue()
    return files


def app_readme(meta: dict[str, Any], artifacts: list[dict[str, Any]], samples: list[str],
               source: str | None) -> str:
    """cpp/README.md: how to build edgeship_run, run it on this bundle's models and read what it writes."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(APP), trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True, undefined=jinja2.StrictUndefined, autoescape=False)
    inputs = " ".join(samples) or " ".join(f"{i['name']}.npy" for i in meta["inputs"])
    models = [{"variant": a["variant"], "backend": a["backend"], "path": a["path"],
               "cpu_flags": ((a.get("runtime") or {}).get("details") or {}).get("cpu_flags_required"),
               "on_device": ((a.get("runtime") or {}).get("details") or {}).get("compile_on") == "device"}
              for a in artifacts]
    return env.get_template(README_TEMPLATE).render(model=meta["model"], inputs=meta["inputs"], models=models,
                                                    outputs=meta["outputs"], samples=samples, source=source,
                                                    input_args=inputs, program=PROGRAM)
