"""The web bundle: a static site that runs the model in the visitor's browser with onnxruntime-web.

What it holds besides the models, model.json and labels: ``index.html`` (a demo page: the bundled
sample or a file of one's own, the prediction and the latency), ``edgeship-model.js`` (an ES module:
``loadModel(url, {threads})`` and ``predict(inputs)``, with this model's inputs and preprocessing
written into it), ``sample.bin`` (one batch of the build's evaluation inputs) and onnxruntime-web's
wasm files under ``ort/``, copied from the installed package (webfiles.py), so a page never asks a
CDN for anything. Threads need a cross-origin isolated page (the COOP/COEP headers the README names).

The unpacked copy beside the zip (``<model>-web/``) is the zip extracted by ``extract_bundle`` into a
temporary folder, which then replaces the previous copy in one rename; a previous copy holding any
file its manifest does not list is someone else's, and is refused before anything is written.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from edgeship.bundle.archive import extract_bundle
from edgeship.bundle.folder import files_in
from edgeship.bundle.manifest import MANIFEST
from edgeship.bundle.metadata import takes_images
from edgeship.bundle.sample import SAMPLE_FILE, evaluation_sample
from edgeship.errors import BundleError, OutputError, listing
from edgeship.fsutil import atomic_output, pid_alive, remove_path, temp_owner
from edgeship.profile import Profile
from edgeship.results import Results
from edgeship.spec import ModelSpec
from edgeship.webfiles import ORT_FILES, ort_web_package, ort_web_problem, ort_web_version

SITE = Path(__file__).resolve().parent / "web"
PAGE = "index.html"
MODULE = "edgeship-model.js"
MODEL_MARKER = "/*@EDGESHIP_MODEL@*/null"  # edgeship-model.js: replaced by this bundle's model description
ORT_FOLDER = "ort"


def web_site(profile: Profile, spec: ModelSpec, results: Results, meta: dict[str, Any],
             warnings: list[str]) -> tuple[dict[str, bytes | Path], dict[str, Any]]:
    """The site's files by bundle path (the page, the module with ``meta``, model.json's document,
    written into it, the sample, onnxruntime-web's files) and manifest.json's ``onnxruntime_web``.
    Adds ``sample`` to ``meta`` and what a person should know to ``warnings``. BundleError when
    onnxruntime-web is not installed here."""
    problem = ort_web_problem()
    if problem:
        raise BundleError(f"no web bundle: {problem}")
    sample = evaluation_sample(profile, spec, results, warnings)
    warnings.extend(version_warning(results.toolchain))
    meta["sample"] = sample.described() if sample else None
    module = (SITE / MODULE).read_text()
    if MODEL_MARKER not in module:
        raise BundleError(f"{SITE / MODULE}: lacks its model marker {MODEL_MARKER}; the edgeship install is damaged")
    described = json.dumps({**meta, "task": results.model.task, "image_input": takes_images(spec)}, indent=1)
    package = ort_web_package()
    files: dict[str, bytes | Path] = {f"{ORT_FOLDER}/{name}": package / "dist" / name for name in ORT_FILES}
    files[f"{ORT_FOLDER}/package.json"] = package / "package.json"  # name, version and licence of what is served
    files.update({PAGE: SITE / PAGE, MODULE: module.replace(MODEL_MARKER, described).encode()})
    if sample:
        files[SAMPLE_FILE] = sample.data()
    return files, ort_manifest(results.toolchain)


def ort_manifest(toolchain: dict[str, str]) -> dict[str, Any]:
    """manifest.json's ``onnxruntime_web``: the version served from ``ort/``, and the one in the build's
    toolchain (what a browser device measured with)."""
    return {"version": ort_web_version(), "build_toolchain": toolchain.get("onnxruntime-web"),
            "files": [f"{ORT_FOLDER}/{name}" for name in ORT_FILES], "license": "MIT (see ort/package.json)"}


def version_warning(toolchain: dict[str, str]) -> list[str]:
    """A warning when the onnxruntime-web served differs from the one the build measured with."""
    measured, served = toolchain.get("onnxruntime-web"), ort_web_version()
    if measured and served and measured != served:
        return [f"onnxruntime-web {served} is installed here and goes into the bundle, but the build measured "
                f"with {measured}: build again to validate with the version that ships"]
    return []


def refuse_foreign(folder: Path) -> None:
    """OutputError (before anything is written) when ``folder`` exists and is not wholly an unpacked
    edgeship bundle: a file or link in its place, no manifest of ours, or files the manifest does not list."""
    if not (folder.exists() or folder.is_symlink()):
        return
    if folder.is_symlink() or not folder.is_dir():
        raise OutputError(f"{folder}: exists and is not a folder edgeship wrote; refused to replace it (move it "
                          "away, then bundle again)")
    try:
        present = files_in(folder)
    except BundleError as e:
        raise OutputError(f"{e}; refused to replace the folder: move it away, then bundle again") from None
    try:
        doc = json.loads((folder / MANIFEST).read_bytes())
        listed = {f["path"] for f in doc["files"]} if doc.get("format") == "edgeship-bundle" else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        listed = None
    if listed is None:
        raise OutputError(f"{folder}: exists and holds no edgeship bundle manifest; refused to replace it (move it "
                          "away, then bundle again)")
    strangers = sorted(set(present) - listed - {MANIFEST})
    if strangers:
        raise OutputError(f"{folder}: holds {listing(strangers)}, which edgeship did not write (not in its "
                          f"{MANIFEST}); refused to replace the folder: move them away, then bundle again. Nothing "
                          "was written")


def unpack(bundle: Path, folder: Path) -> Path:
    """The checked zip ``bundle`` extracted into ``folder``, replacing edgeship's previous copy whole."""
    refuse_foreign(folder)
    _sweep(folder)
    with atomic_output(folder) as tmp:
        extract_bundle(bundle, tmp)
    return folder


def _sweep(folder: Path) -> None:
    """Temporary folders that a killed unpacking of ``folder`` left beside it (their writer gone)."""
    for item in folder.parent.glob(f".{folder.stem}.tmp-*"):
        pid = temp_owner(item.name)
        if pid is not None and pid != os.getpid() and not pid_alive(pid) and item.is_dir():
            remove_path(item)
