"""Bundle zips: writing one with its manifest, checking one (or a bundle's unpacked folder, in
place: folder.py), signing one, and extracting one safely.

``manifest.json`` lists every other file of the zip with its sha256 and size. A check reads
every listed file back and compares; a file missing, changed, unlisted or unreadable (a damaged
or truncated zip) is a BundleError (exit 2) naming it. That is integrity only: whoever can change
a file can rehash the manifest too. Authenticity comes from a detached Ed25519 signature over the
manifest (``signing.py``), checked when a public key is given.

A zip is read only when its bytes hold exactly its entries, each local header agreeing with the
central directory (``zipcheck.py``): a local entry the directory does not list, data before, between
or after the entries, or a header two readers would read differently is refused, naming the offset,
so a streaming extractor (Java's ZipInputStream) reads the very files the check and the signature
covered.

Before anything is read, the zip's central directory is held to limits (entries, bytes per file
and in all, compression ratio, manifest size), and bytes are counted again while reading, so a
zip bomb or a header that under-states a size is refused, naming the file, its size or ratio and
the limit. Extraction refuses, before writing anything, any entry whose path would leave the
destination folder (absolute paths, ``..``, symbolic links) and any existing file it would change.
"""
from __future__ import annotations

import hashlib
import json
import stat
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from edgeship.bundle.folder import verify_folder
from edgeship.bundle.manifest import MANIFEST, BundleCheck, parse_manifest, unsafe_name
from edgeship.bundle.signing import (
    Signed,
    check_signature,
    default_signature_path,
    key_id,
    load_private_key,
    read_signature,
    signature_document,
)
from edgeship.bundle.zipcheck import BundleZip, Entry, open_zip
from edgeship.devices.hashing import sha256_file
from edgeship.errors import BundleError, OutputError
from edgeship.fsutil import atomic_output, atomic_write_text
from edgeship.fsutil import byte_count as _size

FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # zip entry times: the same inputs give the same bytes
CHUNK = 1 << 20
READ_ERRORS = (zipfile.BadZipFile, zlib.error, OSError, EOFError)

# What a bundle may hold; checked on the zip's directory before reading and on the bytes as read.
# Module constants, so a program (or a test) can change them. Real artifacts compress about
# 1.1:1 (mobile programs) to 2:1 (int8 weights), text files up to ~10:1; a run of zeros ~1000:1.
MAX_ENTRIES = 10_000
MAX_MEMBER_BYTES = 8 << 30        # one file: on-device LLM programs reach a few GiB (ZIP64 is written from 4 GiB)
MAX_TOTAL_BYTES = 32 << 30        # every file together
MAX_MANIFEST_BYTES = 16 << 20
MAX_RATIO = 200                   # uncompressed / compressed
RATIO_FLOOR_BYTES = 1 << 20       # the ratio is judged on files (and totals) larger than this


def write_zip(dest: Path, entries: dict[str, bytes | Path], manifest: dict[str, Any]) -> Path:
    """Write ``entries`` (zip path -> bytes or a file) and a manifest listing each, atomically.

    A bundle that its own check would refuse (above a limit) is not written (BundleError).
    """
    with atomic_output(dest) as tmp:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            listed = [_add(zf, name, entries[name]) for name in sorted(entries)]
            zf.writestr(_info(MANIFEST), json.dumps({**manifest, "files": listed}, indent=2) + "\n")
        try:
            with _open(tmp, dest) as zf:
                check_entry_names(dest, zf)
                check_limits(dest, zf)
        except BundleError as e:
            raise BundleError(f"{e}; the bundle would fail its own check, so it was not written") from None
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


def verify_bundle(path: Path, *, public_key: Path | None = None, signature: Path | None = None) -> BundleCheck:
    """Check every file of a bundle zip, or of a bundle's unpacked folder, against manifest.json;
    BundleError naming the first file that differs.

    With ``public_key``, the signature (``signature``, default ``<bundle>.sig``; for a folder, the
    zip's beside it: ``<folder>.zip.sig``) over the manifest is checked first: missing, bad or by
    another key is a BundleError naming the signature file.
    """
    return _verify_path(Path(path), public_key, signature)[0]


def _verify_path(path: Path, public_key: Path | None, signature: Path | None) -> tuple[BundleCheck, bytes]:
    if path.is_dir():
        return verify_folder(path, public_key, signature, MAX_MANIFEST_BYTES)
    with _open(path) as zf:
        return _verify(path, zf, public_key, signature)


def _verify(path: Path, zf: BundleZip, public_key: Path | None,
            signature: Path | None) -> tuple[BundleCheck, bytes]:
    """The check, on an open zip; also returns manifest.json's bytes as read (and as signed)."""
    check_entry_names(path, zf)
    check_limits(path, zf)
    raw = _manifest_bytes(path, zf)
    sig_path = Path(signature) if signature else default_signature_path(path)
    signed = check_signature(sig_path, Path(public_key), raw) if public_key is not None else None
    manifest = parse_manifest(path, raw)
    names = [i.filename for i in zf.infolist()]
    listed = {f["path"]: f for f in manifest["files"]}
    for name in listed:
        if name not in names:
            raise BundleError(f"{path}: {name}: listed in {MANIFEST} but missing from the bundle")
        _check_file(path, zf, listed[name])
    extra = [n for n in names if n not in listed and n != MANIFEST and not n.endswith("/")]
    if extra:
        raise BundleError(f"{path}: {extra[0]}: in the bundle but not listed in {MANIFEST}")
    return BundleCheck.of(path, manifest, sig_path, signed), raw


def sign_bundle(path: Path, key: Path, *, signature: Path | None = None) -> Signed:
    """Check a bundle (zip or unpacked folder), then write a detached Ed25519 signature over its
    manifest (default ``<bundle>.sig``, for a folder ``<folder>.zip.sig``: the zip and its unpacked
    folder hold the same manifest.json, so one signature covers both; a previous edgeship signature
    there is replaced, any other file is refused)."""
    path = Path(path)
    private = load_private_key(Path(key))
    sig_path = Path(signature) if signature else default_signature_path(path)
    _, raw = _verify_path(path, None, None)
    if sig_path.exists() or sig_path.is_symlink():
        try:
            read_signature(sig_path)
        except BundleError:
            raise BundleError(f"{sig_path}: exists and is not an edgeship bundle signature; refused to overwrite it "
                              "(give --signature another path)") from None
    try:
        atomic_write_text(sig_path, signature_document(private, raw))
    except OSError as e:
        raise OutputError(f"{sig_path}: cannot write the signature ({e.strerror or e})") from None
    return Signed(sig_path, key_id(private.public_key()))


def extract_bundle(path: Path, dest: Path, *, public_key: Path | None = None,
                   signature: Path | None = None) -> BundleCheck:
    """Check a bundle (and its signature with ``public_key``), then extract it into ``dest``.

    Everything is checked before anything is written: entries leaving ``dest``, the limits, every
    file against the manifest, and files already in ``dest`` that extraction would change. While
    writing, every file is hashed again, so a bundle changed under the check is refused too.
    """
    path, dest = Path(path), Path(dest)
    if dest.exists() and not dest.is_dir():
        raise OutputError(f"{dest}: is a file, not a folder to extract into")
    with _open(path) as zf:
        check_entry_names(path, zf, dest)
        check, raw = _verify(path, zf, public_key, signature)
        expected = {f["path"]: f["sha256"] for f in check.manifest["files"]}
        expected[MANIFEST] = hashlib.sha256(raw).hexdigest()
        _refuse_overwrites(dest, expected)
        try:
            dest.mkdir(parents=True, exist_ok=True)
            for info in zf.infolist():
                _extract_one(path, zf, info, dest, expected)
        except OSError as e:
            raise OutputError(f"{dest}: cannot extract into it ({e.strerror or e})") from None
    return check


def _extract_one(path: Path, zf: BundleZip, info: Entry, dest: Path, expected: dict[str, str]) -> None:
    target = dest / info.filename
    if info.is_dir():
        target.mkdir(parents=True, exist_ok=True)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with atomic_output(target) as tmp, open(tmp, "wb") as out:
        limit = MAX_MANIFEST_BYTES if info.filename == MANIFEST else MAX_MEMBER_BYTES
        for chunk in _stream(path, zf, info, limit):
            digest.update(chunk)
            out.write(chunk)
        if digest.hexdigest() != expected.get(info.filename):
            raise BundleError(f"{path}: {info.filename}: changed while it was being extracted; refused")


def _refuse_overwrites(dest: Path, expected: dict[str, str]) -> None:
    """Extraction may add files to ``dest`` and rewrite identical ones, never change another's."""
    for name, sha in expected.items():
        target = dest / name
        if target.is_symlink() or (target.exists() and (not target.is_file() or sha256_file(target) != sha)):
            raise BundleError(f"{target}: already exists and differs from the bundle's {name}; refused to "
                              "overwrite it (extract into an empty folder)")


def check_entry_names(path: Path, zf: BundleZip, dest: Path | None = None) -> None:
    """Refuse absolute paths, ``..``, backslashes, symbolic links, and names that extract to the same
    file: the same name twice, ``.`` or empty parts (``a/./b``, ``a//b``), or names that differ only
    in case (one file on macOS and Windows)."""
    root = (dest or Path("/bundle-root")).resolve()
    seen: dict[str, str] = {}
    for info in zf.infolist():
        name = info.filename
        if unsafe_name(name, root):
            raise BundleError(f"{path}: entry {name!r} would be written outside the destination folder; refused")
        if stat.S_ISLNK(info.external_attr >> 16):
            raise BundleError(f"{path}: entry {name!r} is a symbolic link; refused")
        if {"", "."} & set(name.removesuffix("/").split("/")):
            raise BundleError(f"{path}: entry {name!r} has an empty or '.' part; edgeship writes none; refused")
        _refuse_same_file(path, name, seen.get(name.casefold()))
        seen[name.casefold()] = name


def _refuse_same_file(path: Path, name: str, earlier: str | None) -> None:
    """``name`` and an earlier entry's would be one file: the same name, or one differing in case only."""
    if earlier is not None:
        same = "appears twice" if earlier == name else f"and {earlier!r} differ only in case (one file on macOS " \
                                                       "and Windows)"
        raise BundleError(f"{path}: entry {name!r} {same}; the bundle was altered")


def check_limits(path: Path, zf: BundleZip) -> None:
    """Refuse, from the zip's central directory and before reading any file, too many entries, a
    file or a total above its size limit, or a compression ratio above MAX_RATIO."""
    infos = zf.infolist()
    if len(infos) > MAX_ENTRIES:
        raise BundleError(f"{path}: {len(infos):,} entries, above the limit of {MAX_ENTRIES:,}; refused")
    total = packed = 0
    for info in infos:
        limit, what = ((MAX_MANIFEST_BYTES, f"for {MANIFEST}") if info.filename == MANIFEST
                       else (MAX_MEMBER_BYTES, "per file"))
        if info.file_size > limit:
            raise BundleError(f"{path}: {info.filename}: {_size(info.file_size)} uncompressed, above the limit of "
                              f"{_size(limit)} {what}; refused")
        _check_ratio(path, info.filename, info.file_size, info.compress_size)
        total += info.file_size
        packed += info.compress_size
    if total > MAX_TOTAL_BYTES:
        raise BundleError(f"{path}: {_size(total)} uncompressed in all, above the limit of {_size(MAX_TOTAL_BYTES)} "
                          "for a bundle; refused")
    _check_ratio(path, "its files together", total, packed)


def _check_ratio(path: Path, name: str, size: int, compressed: int) -> None:
    if size > RATIO_FLOOR_BYTES and size > MAX_RATIO * compressed:
        ratio = f"{size / compressed:,.0f}:1" if compressed else "without bound"
        raise BundleError(f"{path}: {name}: compresses {ratio} ({_size(size)} from {compressed:,} bytes), above the "
                          f"limit of {MAX_RATIO}:1; refused (model files compress about 1-3:1: this is a "
                          "decompression bomb or not a bundle)")


def _stream(path: Path, zf: BundleZip, info: Entry, limit: int) -> Iterator[bytes]:
    """A member's bytes, counted: more than its header declares, or than ``limit``, is refused."""
    declared, n = info.file_size, 0
    try:
        with zf.open(info) as f:
            while chunk := f.read(CHUNK):
                n += len(chunk)
                if n > declared or n > limit:
                    raise BundleError(f"{path}: {info.filename}: reads as more than the {_size(min(declared, limit))} "
                                      "its header declares or the limit allows; refused (a damaged or crafted zip)")
                _check_ratio(path, info.filename, n, info.compress_size)
                yield chunk
    except READ_ERRORS as e:
        raise BundleError(f"{path}: {info.filename}: cannot be read ({e}): the bundle is damaged") from None


def _open(path: Path, shown: Path | None = None) -> BundleZip:
    """The bundle zip at ``path``, its layout checked (``zipcheck``); messages name ``shown``."""
    shown = shown or path
    try:
        return open_zip(path, shown)
    except FileNotFoundError:
        raise BundleError(f"{shown}: file not found") from None
    except IsADirectoryError:
        raise BundleError(f"{shown}: is a folder, not a bundle zip (an unpacked bundle is checked in place: "
                          f"edgeship bundle verify {shown})") from None
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise BundleError(f"{shown}: not a complete zip file ({e}): the bundle is truncated or damaged") from None


def _manifest_bytes(path: Path, zf: BundleZip) -> bytes:
    try:
        info = zf.getinfo(MANIFEST)
    except KeyError:
        raise BundleError(f"{path}: no {MANIFEST}: not an edgeship bundle") from None
    return b"".join(_stream(path, zf, info, MAX_MANIFEST_BYTES))


def _check_file(path: Path, zf: BundleZip, entry: dict[str, Any]) -> None:
    name = entry["path"]
    digest, size = hashlib.sha256(), 0
    for chunk in _stream(path, zf, zf.getinfo(name), MAX_MEMBER_BYTES):
        digest.update(chunk)
        size += len(chunk)
    if digest.hexdigest() != entry["sha256"] or size != entry["size"]:
        raise BundleError(f"{path}: {name}: differs from {MANIFEST} (sha256 {digest.hexdigest()[:16]}…, "
                          f"{size} bytes; expected {entry['sha256'][:16]}…, {entry['size']} bytes)")
