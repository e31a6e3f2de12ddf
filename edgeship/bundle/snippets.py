"""The loading snippets (Kotlin for android, Swift for ios) and the README of a bundle.

Snippets call the runtimes' own APIs: each artifact's functions come from its backend's fragment
(``bundle_templates``, fragments.py) in the shared template under ``templates/``. Input names,
shapes and element types come from the model spec; what else a runtime's snippet needs (a package's
own feature names, recorded by lowering) from its backend's ``snippet_facts``.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from edgeship import __version__
from edgeship.backends.registry import BACKENDS
from edgeship.bundle.fragments import environment
from edgeship.bundle.metadata import takes_images
from edgeship.bundle.platforms import Platform
from edgeship.bundle.selection import Selection
from edgeship.results import Results, VariantResult
from edgeship.spec import DecodeSpec, DetectionSpec, ModelSpec

# What every value rendered into a snippet goes through (numbers and lists pass as they are).
Escape = Callable[[object], object]

# dtype -> (Kotlin array type, Tensor factory); both Android runtimes have these fromBlob overloads.
KOTLIN = {"float32": ("FloatArray", "fromBlob"), "int64": ("LongArray", "fromBlob"),
          "int32": ("IntArray", "fromBlob"), "uint8": ("ByteArray", "fromBlobUnsigned")}
SWIFT = {"float32": "Float", "int64": "Int64", "int32": "Int32", "uint8": "UInt8"}


def snippet(platform: Platform, meta: dict[str, Any], spec: ModelSpec, sel: Selection) -> tuple[str, str | None]:
    """The snippet's file name and text; None (with a warning in ``sel``) when an input type has no
    counterpart in the platform's tensor API."""
    name = str(platform.snippet).removesuffix(".j2")
    unsupported = [i.dtype for i in spec.inputs if i.dtype not in KOTLIN]
    if unsupported:
        sel.warnings.append(f"no {name}: the runtimes' {platform.name} tensor APIs take no {unsupported[0]} arrays")
        return name, None
    inputs = [{"name": i.name, "dtype": i.dtype, "shape": i.shape, "kotlin_array": KOTLIN[i.dtype][0],
               "kotlin_from_blob": KOTLIN[i.dtype][1], "swift_type": SWIFT[i.dtype]}
              for i in spec.inputs]
    artifacts = [_artifact(platform, a, spec) for a in meta["artifacts"]]
    backends = [a["backend"] for a in artifacts]
    text = environment(source_escape(name)).get_template(str(platform.snippet)).render(
        model=meta["model"], inputs=inputs, artifacts=artifacts, backends=backends,
        platform_backends=platform.backends, decoder=_host_decoder(spec))
    return name, text


def _host_decoder(spec: ModelSpec) -> DecodeSpec | None:
    """The ``[detection.decode]`` settings of a detector the app decodes (its bundle carries the
    decoder: postprocess_files), else None."""
    settings = spec.task_settings()
    return settings.decode if isinstance(settings, DetectionSpec) and settings.postprocess == "host" else None


def _artifact(platform: Platform, a: dict[str, Any], spec: ModelSpec) -> dict[str, Any]:
    return {**a, "ident": identifier(a["variant"]), "stem": a["variant"],
            "asset": a["path"].removeprefix(f"{platform.folder}/"), **BACKENDS[a["backend"]].snippet_facts(a, spec)}


def identifier(name: str) -> str:
    """``int8-per-channel.v2`` -> ``Int8PerChannelV2`` (a variant name as a function name)."""
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]+", name) if part)


def readme(platform: Platform, results: Results, sel: Selection, artifacts: list[dict[str, Any]],
           zip_name: str, spec: ModelSpec) -> str:
    """The bundle's README.md: what is inside, how it measured, how to use it."""
    paths = {a["variant"]: a["path"] for a in artifacts}
    variants = [_summary(row, paths[row.name]) for row, _ in sel.chosen]
    return environment().get_template("README.md.j2").render(
        model=results.model.name, platform=platform.name, platform_backends=platform.backends,
        target=results.target, created=results.created, edgeship_version=__version__, zip_name=zip_name,
        selection=sel.rule, variants=variants, left_out=sel.left_out, warnings=sel.warnings, inputs=spec.inputs,
        image=takes_images(spec))


def _summary(row: VariantResult, path: str) -> dict[str, str]:
    acc = row.accuracy
    top1 = f"{100 * acc.top1:.2f}%" if acc and acc.top1 is not None else "not measured"
    sqnr = f"{acc.sqnr_db:.1f}" if acc and acc.sqnr_db is not None else (
        "exact" if acc and acc.max_abs_err == 0.0 else "not measured")
    p50 = ", ".join(f"{lat.device} {lat.p50_ms:.3f}" for lat in row.latency if lat.timed)
    gates = "pass" if row.gates.passed else "FAIL: " + "; ".join(row.gates.failures)
    return {"name": row.name, "backend": row.backend, "precision": row.precision, "path": path,
            "top1": top1, "sqnr": sqnr, "p50": p50 or "not measured", "gates": gates}


def source_escape(file_name: str) -> Escape:
    """What every value rendered into a snippet goes through, for the snippet's language: safe in a
    string literal and in a comment alike (values come from results.json and from the model: a
    package's own feature names, toolchain strings, asset paths)."""
    return kotlin_text if file_name.endswith(".kt") else swift_text


def _source_text(value: object, dollar: bool, unicode: Callable[[str], str]) -> object:
    if not isinstance(value, str):
        return value  # numbers, shapes, lists of them: their text has nothing to escape
    text = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    # A comment delimiter as a unicode escape: the same character in a string literal, inert text in a
    # comment (both languages nest block comments, so "/*" would open one as "*/" closes one).
    text = text.replace("*/", unicode("*") + "/").replace("/*", "/" + unicode("*"))
    text = "".join(c if c.isprintable() else unicode(c) for c in text)
    return text.replace("$", "\\$") if dollar else text


def kotlin_text(value: object) -> object:
    """Kotlin: backslash, quote, newline, ``$`` (string templates), comment delimiters escaped."""
    return _source_text(value, True, lambda c: "".join(f"\\u{u:04x}" for u in _utf16(c)))


def swift_text(value: object) -> object:
    """Swift: backslash (so no ``\\(`` interpolation), quote, newline, comment delimiters escaped."""
    return _source_text(value, False, lambda c: f"\\u{{{ord(c):x}}}")


def _utf16(c: str) -> list[int]:
    """The UTF-16 code units of one character (Kotlin's \\u escapes name code units)."""
    data = c.encode("utf-16-be")
    return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]
