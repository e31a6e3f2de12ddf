"""A bundle unpacked into a folder (a web bundle is written so, beside its zip, ready to serve),
checked in place against its manifest.json exactly as a zip is: every listed file read back and
compared, a file missing, changed or not listed refused, the signature (with a public key) checked
over manifest.json's bytes before any file. Symbolic links are refused: a static server would follow
them out of the folder.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from edgeship.bundle.manifest import MANIFEST, BundleCheck, parse_manifest, unsafe_name
from edgeship.bundle.signing import check_signature, default_signature_path
from edgeship.errors import BundleError

CHUNK = 1 << 20


def verify_folder(path: Path, public_key: Path | None, signature: Path | None,
                  max_manifest_bytes: int) -> tuple[BundleCheck, bytes]:
    """Check the folder ``path`` against its manifest.json; also returns manifest.json's bytes (what a
    signature covers). BundleError naming the first file that differs."""
    raw = manifest_bytes(path, max_manifest_bytes)
    sig_path = Path(signature) if signature else default_signature_path(path)
    signed = check_signature(sig_path, Path(public_key), raw) if public_key is not None else None
    manifest = parse_manifest(path, raw)
    listed = {f["path"]: f for f in manifest["files"]}
    present = files_in(path)
    for name, entry in listed.items():
        if unsafe_name(name, path):
            raise BundleError(f"{path}: {MANIFEST} lists {name!r}, which lies outside the folder; refused")
        if name not in present:
            raise BundleError(f"{path}: {name}: listed in {MANIFEST} but missing from the folder")
        _check_file(path, name, present[name], entry)
    extra = sorted(set(present) - set(listed) - {MANIFEST})
    if extra:
        raise BundleError(f"{path}: {extra[0]}: in the folder but not listed in {MANIFEST}")
    return BundleCheck.of(path, manifest, sig_path, signed), raw


def manifest_bytes(path: Path, limit: int) -> bytes:
    """manifest.json of the folder, at most ``limit`` bytes (BundleError otherwise)."""
    file = path / MANIFEST
    if file.is_symlink() or not file.is_file():
        raise BundleError(f"{path}: no {MANIFEST}: not an edgeship bundle folder")
    size = file.stat().st_size
    if size > limit:
        raise BundleError(f"{path}: {MANIFEST}: {size:,} bytes, above the limit of {limit:,}; refused")
    return file.read_bytes()


def files_in(path: Path) -> dict[str, Path]:
    """Every file under ``path`` by its bundle path (``ort/x.wasm``); BundleError on a symbolic link
    or anything that is not a regular file."""
    out = {}
    for folder, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            item = Path(folder) / name
            rel = item.relative_to(path).as_posix()
            if item.is_symlink():
                raise BundleError(f"{path}: {rel}: a symbolic link; refused (a bundle folder holds plain files)")
            if name in files:
                if not item.is_file():
                    raise BundleError(f"{path}: {rel}: not a regular file; refused")
                out[rel] = item
    return out


def _check_file(path: Path, name: str, file: Path, entry: dict) -> None:
    digest, size = hashlib.sha256(), 0
    try:
        with open(file, "rb") as f:
            while chunk := f.read(CHUNK):
                digest.update(chunk)
                size += len(chunk)
    except OSError as e:
        raise BundleError(f"{path}: {name}: cannot be read ({e.strerror or e})") from None
    if digest.hexdigest() != entry["sha256"] or size != entry["size"]:
        raise BundleError(f"{path}: {name}: differs from {MANIFEST} (sha256 {digest.hexdigest()[:16]}…, "
                          f"{size} bytes; expected {entry['sha256'][:16]}…, {entry['size']} bytes)")
