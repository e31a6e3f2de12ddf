"""Helpers for the bundle tests: a small bundle, and an attacker's copy of one (entries changed
and manifest.json rehashed to match, so only a signature or a limit can tell)."""
from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import zipfile
from pathlib import Path

from edgeship.bundle.archive import MANIFEST, write_zip

RUNNER = b"import sys\nprint('measuring')\n"


def small_bundle(dest: Path) -> Path:
    """A jetson-like bundle: a model, labels, model.json and the device runner."""
    entries: dict[str, bytes | Path] = {"models/m/model.onnx": os.urandom(40_000), "model.json": b'{"model": "m"}\n',
                                        "labels.txt": b"a\nb\n", "runner/runner.py": RUNNER}
    return write_zip(dest, entries, {"platform": "jetson"})


def forge(src: Path, dest: Path, change: dict[str, bytes | None]) -> Path:
    """A copy of ``src`` with entries replaced or added (bytes) or dropped (None), and a manifest
    whose file list is rehashed to match: the bundle's integrity check passes on it."""
    with zipfile.ZipFile(src) as zin:
        files = {n: zin.read(n) for n in zin.namelist() if n != MANIFEST}
        manifest = json.loads(zin.read(MANIFEST))
    for name, data in change.items():
        if data is None:
            files.pop(name, None)
        else:
            files[name] = data
    manifest["files"] = [{"path": n, "sha256": hashlib.sha256(d).hexdigest(), "size": len(d)}
                         for n, d in sorted(files.items())]
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zout:
        for name, data in sorted(files.items()):
            zout.writestr(name, data)
        zout.writestr(MANIFEST, json.dumps(manifest, indent=2) + "\n")
    return dest


def local_record(name: str, data: bytes) -> bytes:
    """One deflated local entry (header and data) as edgeship's writer makes it, to hide in another zip."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(name, data)
    return buf.getvalue()[:_directory_offset(buf.getvalue())]


def _directory_offset(data: bytes) -> int:
    return struct.unpack_from("<I", data, len(data) - 6)[0]


def splice(src: Path, dest: Path, *, prefix: bytes = b"", after: dict[str, bytes] | None = None,
           inside: dict[str, bytes] | None = None, trailing: bytes = b"", shift: bool = True) -> Path:
    """A copy of ``src`` (a zip without comment or zip64 records) with bytes put before its first
    entry, after the named entries' data (``after``: between entries; ``inside``: counted in the entry's
    compressed size, after its deflate stream), and after its end record; the central directory's and end
    record's offsets and sizes moved to match (``shift=False`` leaves them relative to the first entry, as a
    self-extracting archive's are). A reader of the central directory (Python's zipfile) sees the
    same entries and bytes as in ``src``."""
    data, after, inside = src.read_bytes(), after or {}, inside or {}
    with zipfile.ZipFile(src) as zf:
        infos = zf.infolist()
    starts = [i.header_offset for i in infos] + [_directory_offset(data)]
    out, central, pos = bytearray(prefix), bytearray(), starts[-1]
    base = 0 if shift else len(prefix)
    for info, start, end in zip(infos, starts, starts[1:]):
        record = bytearray(data[pos:pos + 46 + sum(struct.unpack_from("<HHH", data, pos + 28))])
        struct.pack_into("<I", record, 42, len(out) - base)
        local = bytearray(data[start:end] + inside.get(info.filename, b""))
        if info.filename in inside:
            struct.pack_into("<I", local, 18, info.compress_size + len(inside[info.filename]))
            struct.pack_into("<I", record, 20, info.compress_size + len(inside[info.filename]))
        out += local + after.get(info.filename, b"")
        central += record
        pos += len(record)
    end_record = bytearray(data[-22:])
    struct.pack_into("<II", end_record, 12, len(central), len(out) - base)
    dest.write_bytes(bytes(out + central + end_record) + trailing)
    return dest


LOCAL_FIELDS = {"flags": (6, "H"), "method": (8, "H"), "crc": (14, "I"), "compressed": (18, "I"), "size": (22, "I")}
CENTRAL_FIELDS = {"flags": (8, "H"), "method": (10, "H"), "crc": (16, "I"), "compressed": (20, "I"),
                  "size": (24, "I"), "end_offset": (16, "I")}


def set_field(src: Path, dest: Path, name: str, field: str, value: int, *, local: bool = True,
              central: bool = True) -> Path:
    """A copy of ``src`` with one header field of entry ``name`` set, in its local header, its
    central directory entry or both (``end_offset``: the end record's directory offset)."""
    data = bytearray(src.read_bytes())
    with zipfile.ZipFile(src) as zf:
        info = zf.getinfo(name) if name else None
    if info and local:
        at, kind = LOCAL_FIELDS[field]
        struct.pack_into("<" + kind, data, info.header_offset + at, value)
    if info and central:
        pos = data.find(b"PK\x01\x02")
        while data[pos + 46:pos + 46 + len(name.encode())] != name.encode():
            pos = data.find(b"PK\x01\x02", pos + 4)
        at, kind = CENTRAL_FIELDS[field]
        struct.pack_into("<" + kind, data, pos + at, value)
    if field == "end_offset":
        struct.pack_into("<I", data, len(data) - 22 + CENTRAL_FIELDS[field][0], value)
    dest.write_bytes(bytes(data))
    return dest


class _Unseekable:
    """A file zipfile cannot seek back in, so it writes a data descriptor after each entry."""

    def __init__(self, f: io.BufferedWriter) -> None:
        self.write, self.flush = f.write, f.flush


def rewrite_entries(src: Path, dest: Path, *, edit: dict[str, dict[str, object]] | None = None,
                    streamed: bool = False) -> Path:
    """A copy of ``src`` whose entries keep their bytes (manifest.json too: its signature still
    holds), written again by Python's zipfile with ZipInfo attributes set per entry (``edit``:
    name -> {attribute: value}) or as a stream (``streamed``: data descriptors)."""
    with zipfile.ZipFile(src) as zin, open(dest, "wb") as raw:
        out = _Unseekable(raw) if streamed else raw
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zout:  # type: ignore[arg-type]
            for old in zin.infolist():
                info = zipfile.ZipInfo(old.filename, old.date_time)
                info.compress_type, info.external_attr = zipfile.ZIP_DEFLATED, old.external_attr
                for key, value in (edit or {}).get(old.filename, {}).items():
                    setattr(info, key, value)
                zout.writestr(info, zin.read(old))
    return dest
