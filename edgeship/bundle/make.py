"""One platform's bundle zip from a build: the chosen artifacts exactly as they were validated,
the labels, model.json, a loading snippet (Kotlin, Swift), the device runner (jetson), the demo
site (web: web.py), the C++ application (linux: linux.py), the programs the x86 bundle's
backends declare (x86: x86.py), a README and manifest.json with every file's sha256
and size, the toolchain and the validation results. A web bundle is also written unpacked beside
its zip, when asked.
"""
from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from edgeship import __version__
from edgeship.backends.registry import SPECS
from edgeship.bundle.archive import write_zip
from edgeship.bundle.linux import linux_app
from edgeship.bundle.metadata import model_json, runtime_needs
from edgeship.bundle.platforms import PLATFORMS, Platform
from edgeship.bundle.sample import evaluation_sample
from edgeship.bundle.selection import Selection, select_variants
from edgeship.bundle.snippets import readme, snippet
from edgeship.bundle.web import refuse_foreign, unpack, web_site
from edgeship.bundle.x86 import x86_app
from edgeship.devices.base import HERE as DEVICE_DIR
from edgeship.devices.base import RUNNER_FILES
from edgeship.devices.hashing import sha256_path
from edgeship.errors import BundleError
from edgeship.fsutil import confined
from edgeship.profile import BundleSettings, Profile
from edgeship.results import Results, VariantResult
from edgeship.spec import ModelSpec
from edgeship.tasks.evaluate import task_anchors

BUNDLE_FORMAT = 1
# The device runner and the companions it imports from its own folder (protocol, hashing, backends' device-side tools).
DEVICE_FILES = {f"runner/{name}": path for name, path in RUNNER_FILES.items()}
POSTPROCESS = DEVICE_DIR / "postprocess.py"  # detection decoding for models deployed as raw head outputs

SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # what profiles and specs allow for names


@dataclass
class BundleInputs:
    """A finished build: its profile, model spec, results and folder, and the bundle settings."""

    profile: Profile
    spec: ModelSpec
    results: Results
    build_dir: Path
    settings: BundleSettings


@dataclass
class Bundle:
    """A written bundle, how its variants were chosen, and its unpacked folder (web) when written."""

    path: Path
    selection: Selection
    folder: Path | None = None


def make_bundles(inputs: BundleInputs) -> list[Bundle]:
    """One zip per platform of the settings, in the build folder; a web bundle also unpacked beside it."""
    return [make_bundle(PLATFORMS[name], inputs, unpacked=True) for name in inputs.settings.platforms]


def make_bundle(platform: Platform, inputs: BundleInputs, *, unpacked: bool = False) -> Bundle:
    """Write ``<model>-<platform>.zip`` into the build folder (BundleError when nothing qualifies) and,
    with ``unpacked`` for a platform that has one (web), the same files in ``<model>-<platform>/``.

    A build stages only the zip: publishing a build moves top-level files and variant folders.
    """
    refuse_unsafe_names(inputs.results, inputs.build_dir)
    sel = select_variants(platform, inputs.settings, inputs.profile, inputs.results)
    dest = inputs.build_dir / f"{inputs.results.model.name}-{platform.name}.zip"
    folder = dest.with_suffix("") if unpacked and platform.unpacked else None
    if folder is not None:
        refuse_foreign(folder)
    entries, artifacts = collect_artifacts(platform, inputs, sel)
    labels = read_labels(inputs)
    if labels:
        entries["labels.txt"] = ("\n".join(labels) + "\n").encode()
    meta = model_json(inputs.spec, inputs.results, inputs.settings, labels, artifacts)
    entries.update(postprocess_files(inputs.spec, meta, platform.name))
    doc = manifest(platform, inputs.results, sel, artifacts)
    if platform.name == "web":
        site, doc["onnxruntime_web"] = web_site(inputs.profile, inputs.spec, inputs.results, meta, sel.warnings)
        entries.update(site)
    entries["model.json"] = (json.dumps(meta, indent=2) + "\n").encode()
    if platform.snippet:
        name, text = snippet(platform, meta, inputs.spec, sel)
        if text is not None:
            entries[name] = text.encode()
    if platform.name == "jetson" or any(SPECS[a["backend"]].bundle_ships_runner(platform.name, a) for a in artifacts):
        entries.update(DEVICE_FILES)
    if platform.name == "linux":
        entries.update(linux_app(meta, artifacts, evaluation_sample(inputs.profile, inputs.spec, inputs.results,
                                                                    sel.warnings)))
    if platform.name == "x86":
        entries.update(x86_app(meta, artifacts, inputs.results.toolchain,
                               evaluation_sample(inputs.profile, inputs.spec, inputs.results, sel.warnings)))
    entries["README.md"] = readme(platform, inputs.results, sel, artifacts, dest.name, inputs.spec).encode()
    write_zip(dest, entries, {**doc, "warnings": sel.warnings})
    return Bundle(dest, sel, unpack(dest, folder) if folder is not None else None)


def postprocess_files(spec: ModelSpec, meta: dict[str, Any], platform: str) -> dict[str, bytes | Path]:
    """For a detector deployed as raw head outputs (``postprocess = "host"``): the reference decoder
    the build validated with, its anchors and settings, which the app runs after the model; for
    android also its Java port (an app cannot run the Python one), tested against it."""
    anchors = task_anchors(spec)
    if anchors is None:
        return {}
    decode = spec.task_settings().decode
    arguments = decode.model_dump(mode="json", exclude={"kind", "boxes", "scores", "anchors"})
    settings = {"decoder": decode.kind, "outputs": {"box_regression": decode.boxes, "class_logits": decode.scores},
                "anchors": "anchors.npy",
                "arguments": {**arguments, "image_size": [spec.inputs[0].shape[-2], spec.inputs[0].shape[-1]]},
                "usage": "boxes, scores, labels = postprocess.decode_ssd(box_regression[0], class_logits[0], "
                         "numpy.load('anchors.npy'), **arguments)"}
    files: dict[str, bytes | Path] = {"postprocess/postprocess.py": POSTPROCESS}
    if platform == "android":
        settings["usage_java"] = ("SsdDecoder.Detection[] detections = new SsdDecoder(SsdDecoder.readAnchorsNpy("
                                  "anchorsNpyStream), weights, score_threshold, iou_threshold, candidates_per_class, "
                                  "max_detections, background != null ? background : SsdDecoder.NO_BACKGROUND, "
                                  "image_size).decode(boxRegression, classLogits); // SsdDecoder.java, package "
                                  "ai.edgeship")
        files["postprocess/SsdDecoder.java"] = Path(__file__).parent / "templates" / "SsdDecoder.java"
    buffer = io.BytesIO()
    np.save(buffer, anchors)
    meta["postprocess"] = "postprocess/decode.json"
    return {**files, "postprocess/anchors.npy": buffer.getvalue(),
            "postprocess/decode.json": (json.dumps(settings, indent=2) + "\n").encode()}


def collect_artifacts(platform: Platform, inputs: BundleInputs,
                      sel: Selection) -> tuple[dict[str, bytes | Path], list[dict[str, Any]]]:
    """The chosen variants' files by zip path, and each artifact's model.json entry."""
    entries: dict[str, bytes | Path] = {}
    artifacts = []
    for row, variant in sel.chosen:
        main, files = artifact_files(platform, inputs.build_dir, row)
        entries.update(files)
        artifacts.append({"variant": row.name, "backend": row.backend, "precision": row.precision,
                          "quantization": row.quantization, "path": main, "sha256": row.sha256,
                          "size_bytes": row.size_bytes,
                          "runtime": runtime_needs(row, variant, inputs.results.toolchain)})
    return entries, artifacts


def refuse_unsafe_names(results: Results, build_dir: Path) -> None:
    """BundleError for a model, variant or file name in results.json that edgeship would not have
    written (they become file names, zip paths, and text in the bundle's code and shell lines)."""
    names = [("the model name", results.model.name)] + [("a variant name", r.name) for r in results.variants]
    names += [(f"{r.name}'s file", part) for r in results.variants if r.file for part in PurePosixPath(r.file).parts]
    bad = [(what, value) for what, value in names if not SAFE_NAME.match(value)]
    if bad:
        what, value = bad[0]
        raise BundleError(f"{build_dir / 'results.json'}: {what} is {value!r}, not a name edgeship writes (a letter "
                          "or digit, then letters, digits, '.', '_', '-'); refused: it would go into file names, the "
                          "bundle's code and its shell lines (results.json was changed)")


def artifact_files(platform: Platform, build_dir: Path, row: VariantResult) -> tuple[str, dict[str, Path]]:
    """The zip paths of a variant's files (the artifact, alone or under a folder named after the variant,
    or the variant's whole folder) and its main path; BundleError when the artifact is missing or
    changed since the build validated it."""
    src = confined(build_dir, str(row.file))
    if src is None:
        raise BundleError(f"{build_dir / 'results.json'}: the artifact of {row.name} is {row.file!r}, outside "
                          f"{build_dir}; refused (edgeship never writes there: results.json was changed)")
    if not src.exists():
        raise BundleError(f"{src}: the artifact of {row.name} is missing; build again")
    if not row.sha256:
        raise BundleError(f"{build_dir / 'results.json'}: no sha256 for {row.name}'s artifact, so {src} cannot be "
                          "checked against what the build validated; build again")
    if sha256_path(src) != row.sha256:  # a folder's (an IR, an .mlpackage): of every file
        raise BundleError(f"{src}: changed since the build validated it (its sha256 differs from "
                          f"results.json); build again")
    if platform.by_variant:
        main = f"{platform.folder}/{row.name}/{src.name}"
        if src.is_file():
            return main, {main: src}
        root, base = src, main
    elif platform.whole_folder:
        root, base = src.parent, f"{platform.folder}/{row.name}"
        main = f"{base}/{src.relative_to(root).as_posix()}"
    elif src.is_dir():
        root, base = src, f"{platform.folder}/{row.name}{src.suffix}"
        main = base
    else:
        main = f"{platform.folder}/{row.name}{src.suffix}"
        return main, {main: src}
    files = [p for p in sorted(root.rglob("*")) if p.is_file() and not _skipped(p, root)]
    return main, {f"{base}/{p.relative_to(root).as_posix()}": p for p in files}


def _skipped(path: Path, root: Path) -> bool:
    """Build logs and temporary files (dot names) stay out of bundles."""
    parts = path.relative_to(root).parts
    return path.name == "lowering.log" or any(p.startswith(".") for p in parts)


def read_labels(inputs: BundleInputs) -> list[str] | None:
    """Class names from ``[bundle] labels``, else the model spec's labels file."""
    path = inputs.settings.labels or inputs.spec.labels
    if path is None:
        return None
    return [line.strip() for line in Path(path).read_text().splitlines() if line.strip()]


def manifest(platform: Platform, results: Results, sel: Selection, artifacts: list[dict[str, Any]]) -> dict[str, Any]:
    """manifest.json without its file list (write_zip adds it)."""
    paths = {a["variant"]: a["path"] for a in artifacts}
    variants = [{"name": row.name, "backend": row.backend, "precision": row.precision,
                 "quantization": row.quantization, "path": paths[row.name], "sha256": row.sha256,
                 "size_bytes": row.size_bytes,
                 "accuracy": row.accuracy.model_dump(mode="json") if row.accuracy else None,
                 "latency": [lat.model_dump(mode="json") for lat in row.latency],
                 "gates": row.gates.model_dump(mode="json"), "notes": row.notes} for row, _ in sel.chosen]
    return {"format": "edgeship-bundle", "format_version": BUNDLE_FORMAT, "platform": platform.name,
            "model": results.model.model_dump(mode="json"), "target": results.target,
            "results_created": results.created, "edgeship": __version__, "toolchain": results.toolchain,
            "selection": sel.rule, "variants": variants, "left_out": sel.left_out, "warnings": sel.warnings}
