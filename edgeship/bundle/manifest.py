"""What a bundle's ``manifest.json`` is, for both forms a bundle takes: a zip, and the unpacked
folder of a web bundle (the same files, the same manifest.json byte for byte).

The manifest lists every other file with its sha256 and size; a check reads every listed file
back and compares, refuses any file not listed, and refuses paths that would leave the bundle.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from edgeship.errors import BundleError

MANIFEST = "manifest.json"


@dataclass
class BundleCheck:
    """A bundle that passed its check: what it holds, and whether its signature was checked."""

    path: Path
    platform: str
    files: int
    bytes: int
    manifest: dict[str, Any]
    signature: Path | None = None  # the signature checked, or one lying beside the bundle unchecked
    signed_by: str | None = None  # the key id of a checked signature

    @classmethod
    def of(cls, path: Path, manifest: dict[str, Any], sig_path: Path, signed: Any) -> BundleCheck:
        """The check of a bundle whose every listed file matched (``signed``: the checked signature or None)."""
        listed = manifest["files"]
        return cls(path, str(manifest.get("platform")), len(listed), sum(f["size"] for f in listed), manifest,
                   signature=sig_path if signed or sig_path.is_file() else None,
                   signed_by=signed.key_id if signed else None)

    @property
    def authenticity(self) -> str:
        """One line for people: signed by whom, or integrity only and why."""
        if self.signed_by:
            return f"signature {self.signature} good, signed by {self.signed_by}"
        if self.signature:
            return f"integrity only: signature {self.signature} not checked (give --public-key)"
        return "integrity only: not signed"


def unsafe_name(name: str, root: Path) -> bool:
    """Whether a bundle path would be written outside ``root``: absolute, ``..``, a backslash or a
    drive letter."""
    parts = PurePosixPath(name).parts
    target = (root / name).resolve()
    return (name.startswith("/") or "\\" in name or ".." in parts or bool(parts and ":" in parts[0])
            or not target.is_relative_to(root.resolve()))


def parse_manifest(path: Path, raw: bytes) -> dict[str, Any]:
    """manifest.json's document; BundleError naming ``path`` when it is not JSON or its file list
    is not a list of {path, sha256, size}."""
    try:
        manifest = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise BundleError(f"{path}: {MANIFEST}: not valid JSON ({str(e)[:200]})") from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, list) or not all(
            isinstance(f, dict) and isinstance(f.get("path"), str) and isinstance(f.get("sha256"), str)
            and type(f.get("size")) is int and f["size"] >= 0 for f in files):
        raise BundleError(f"{path}: {MANIFEST}: needs a 'files' list of {{path, sha256, size}} entries "
                          "(path and sha256 strings, size a whole number of bytes)")
    return manifest
