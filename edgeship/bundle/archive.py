"""Bundle zips: writing one with its manifest, checking one, and extracting one safely.

``manifest.json`` lists every other file of the zip with its sha256 and size. A check reads
every listed file back and compares; a file missing, changed, unlisted or unreadable (a damaged
or truncated zip) is a BundleError (exit 2) naming it. Extraction refuses, before writing
anything, any entry whose path would leave the destination folder (absolute paths, ``..``,
symbolic links).
"""
from __future__ import annotations

import hashlib
import json
import stat
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from edgeship.errors import BundleError
from edgeship.fsutil import atomic_output

MANIFEST = "manifest.json"
FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # zip entry times: the same inputs give the same bytes
CHUNK = 1 << 20
READ_ERRORS = (zipfile.BadZipFile, zlib.error, OSError, EOFError)


@dataclass
class BundleCheck:
    """A bundle that passed its check: what it holds."""

    path: Path
    platform: str
    files: int
    bytes: int
    manifest: dict[str, Any]


def write_zip(dest: Path, entries: dict[str, bytes | Path], manifest: dict[str, Any]) -> Path:
    """Write ``entries`` (zip path -> bytes or a file) and a manifest listing each, atomically."""
    with atomic_output(dest) as tmp, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        listed = [_add(zf, name, entries[name]) for name in sorted(entries)]
        zf.writestr(_info(MANIFEST), json.dumps({**manifest, "files": listed}, indent=2) + "\n")
    return dest


def _add(zf: zipfile.ZipFile, name: str, data: bytes | Path) -> dict[str, Any]:
    """Stream one entry into the zip; return its manifest line."""
    digest, size = hashlib.sha256(), 0
    length = len(data) if isinstance(data, bytes) else Path(data).stat().st_size
    with zf.open(_info(name), "w", force_zip64=length >= zipfile.ZIP64_LIMIT) as out:
        for chunk in _chunks(data):
            digest.update(chunk)
            size += len(chunk)
            out.write(chunk)
    return {"path": name, "sha256": digest.hexdigest(), "size": size}


def _chunks(data: bytes | Path) -> Any:
    if isinstance(data, bytes):
        yield data
        return
    with open(data, "rb") as f:
        while chunk := f.read(CHUNK):
            yield chunk


def _info(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, FIXED_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    return info


def verify_bundle(path: Path) -> BundleCheck:
    """Check every file against manifest.json; BundleError naming the first file that differs."""
    path = Path(path)
    with _open(path) as zf:
        names = [i.filename for i in zf.infolist()]
        check_entry_names(path, zf)
        manifest = _manifest(path, zf)
        listed = {f["path"]: f for f in manifest["files"]}
        for name in listed:
            if name not in names:
                raise BundleError(f"{path}: {name}: listed in {MANIFEST} but missing from the bundle")
            _check_file(path, zf, listed[name])
        extra = [n for n in names if n not in listed and n != MANIFEST and not n.endswith("/")]
        if extra:
            raise BundleError(f"{path}: {extra[0]}: in the bundle but not listed in {MANIFEST}")
    return BundleCheck(path, str(manifest.get("platform")), len(listed),
                       sum(int(f["size"]) for f in listed.values()), manifest)


def extract_bundle(path: Path, dest: Path) -> BundleCheck:
    """Check a bundle, then extract it into ``dest``; entries leaving ``dest`` are refused first."""
    path, dest = Path(path), Path(dest)
    with _open(path) as zf:
        check_entry_names(path, zf, dest)
    check = verify_bundle(path)
    dest.mkdir(parents=True, exist_ok=True)
    with _open(path) as zf:
        zf.extractall(dest)
    return check


def check_entry_names(path: Path, zf: zipfile.ZipFile, dest: Path | None = None) -> None:
    """Refuse absolute paths, ``..``, backslashes, symbolic links and duplicate names."""
    root = (dest or Path("/bundle-root")).resolve()
    seen: set[str] = set()
    for info in zf.infolist():
        name = info.filename
        parts = PurePosixPath(name).parts
        target = (root / name).resolve()
        unsafe = (name.startswith("/") or "\\" in name or ".." in parts or (parts and ":" in parts[0])
                  or not target.is_relative_to(root))
        if unsafe:
            raise BundleError(f"{path}: entry {name!r} would be written outside the destination folder; refused")
        if stat.S_ISLNK(info.external_attr >> 16):
            raise BundleError(f"{path}: entry {name!r} is a symbolic link; refused")
        if name in seen:
            raise BundleError(f"{path}: entry {name!r} appears twice; the bundle was altered")
        seen.add(name)


def _open(path: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except FileNotFoundError:
        raise BundleError(f"{path}: file not found") from None
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise BundleError(f"{path}: not a complete zip file ({e}): the bundle is truncated or damaged") from None


def _manifest(path: Path, zf: zipfile.ZipFile) -> dict[str, Any]:
    try:
        manifest = json.loads(_read(path, zf, MANIFEST))
    except KeyError:
        raise BundleError(f"{path}: no {MANIFEST}: not an edgeship bundle") from None
    except json.JSONDecodeError as e:
        raise BundleError(f"{path}: {MANIFEST}: not valid JSON ({e})") from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, list) or not all(isinstance(f, dict) and {"path", "sha256", "size"} <= f.keys()
                                              for f in files):
        raise BundleError(f"{path}: {MANIFEST}: needs a 'files' list of {{path, sha256, size}} entries")
    return manifest


def _check_file(path: Path, zf: zipfile.ZipFile, entry: dict[str, Any]) -> None:
    name = entry["path"]
    digest, size = hashlib.sha256(), 0
    try:
        with zf.open(name) as f:
            while chunk := f.read(CHUNK):
                digest.update(chunk)
                size += len(chunk)
    except READ_ERRORS as e:
        raise BundleError(f"{path}: {name}: cannot be read ({e}): the bundle is damaged") from None
    if digest.hexdigest() != entry.get("sha256") or size != entry.get("size"):
        raise BundleError(f"{path}: {name}: differs from {MANIFEST} (sha256 {digest.hexdigest()[:16]}…, "
                          f"{size} bytes; expected {str(entry.get('sha256'))[:16]}…, {entry.get('size')} bytes)")


def _read(path: Path, zf: zipfile.ZipFile, name: str) -> bytes:
    try:
        return zf.read(name)
    except READ_ERRORS as e:
        raise BundleError(f"{path}: {name}: cannot be read ({e}): the bundle is damaged") from None
