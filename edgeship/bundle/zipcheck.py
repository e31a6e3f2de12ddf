"""A bundle zip's bytes, read strictly, so that every zip reader sees the same files in it.

Zip readers do not agree on what a zip holds. Python's zipfile (and any reader of the central
directory at the end) sees the entries the directory lists; a streaming reader (Java's
ZipInputStream, as an Android app uses) walks the local headers from the first byte and never reads
the directory. A zip with a local entry the directory does not list passes a directory reader's
check, signature included, and hands a streaming reader a file nothing checked. So a bundle is read
only when its bytes leave no room for a second view:

- the local entries tile the file from offset 0, in the directory's order, with no gap or overlap;
  then the central directory; then (zip64 only) its end record and locator; then the end of central
  directory record as the last 22 bytes: no prefix, no trailing data, no zip comment (edgeship
  writes none);
- each local header repeats its directory entry: name bytes, flags, method, CRC-32, sizes and time;
- only what edgeship's writer (Python's zipfile) writes: stored or deflated entries, no encryption,
  no data descriptors, no extra fields but zip64's in its standard form, zip64 end records that
  agree with the classic one, names in ASCII or flagged UTF-8 without control characters;
- each entry's data is exactly one deflate stream (or its stored bytes) of the size its headers
  give, with their CRC-32, checked as it is read (``EntryReader``).

A refusal is a BundleError naming the file, the offset and what is wrong.
"""
from __future__ import annotations

import struct
import zipfile
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO

from edgeship.errors import BundleError

LOCAL = struct.Struct("<4sHHHHHIIIHH")           # local file header
CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")   # central directory file header
END = struct.Struct("<4sHHHHIIH")                # end of central directory record
END64 = struct.Struct("<4sQHHIIQQQQ")            # zip64 end of central directory record
LOCATOR = struct.Struct("<4sIQI")                # zip64 end of central directory locator
LOCAL_SIG, CENTRAL_SIG, END_SIG = b"PK\x03\x04", b"PK\x01\x02", b"PK\x05\x06"
END64_SIG, LOCATOR_SIG = b"PK\x06\x06", b"PK\x06\x07"
MAX16, MAX32 = 0xFFFF, 0xFFFFFFFF
ZIP64_EXTRA = 0x0001
UTF8_FLAG = 0x800
ALLOWED_FLAGS = UTF8_FLAG | 0x6  # bits 1-2: the deflate level used, which readers ignore
FLAG_NAMES = {0x1: "encrypted", 0x8: "a data descriptor after its data", 0x40: "strong encryption",
              0x2000: "a masked local header"}
METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflated"}
END_SEARCH_BYTES = 1 << 20       # how far from the end the end record is looked for (to name what follows it)
MAX_DIRECTORY_BYTES = 64 << 20   # a bundle's central directory: 10,000 entries take ~2 MiB
STREAMING = "a streaming reader (Java's ZipInputStream, as Android apps use) would read it"
CHUNK = 1 << 20
EMPTY_DEFLATE = 2                # bytes of an empty deflate stream (b"\x03\x00")
RAW_CHUNK = 64 << 10             # compressed bytes fed to zlib at a time (what it cannot take yet is copied)


@dataclass(frozen=True)
class Entry:
    """One file of a checked zip: its zipfile.ZipInfo-like fields and where its data starts."""

    filename: str
    header_offset: int
    compress_type: int
    compress_size: int
    file_size: int
    CRC: int
    flag_bits: int
    external_attr: int
    data_offset: int = 0
    raw_name: bytes = field(default=b"", repr=False)
    date_time: tuple[int, int] = field(default=(0, 0), repr=False)  # MS-DOS (date, time), as stored

    def is_dir(self) -> bool:
        return self.filename.endswith("/")


class BundleZip:
    """A zip whose layout passed ``read_layout``, open for reading: the part of zipfile.ZipFile's
    reading interface the bundle check uses, over entries every reader sees alike."""

    def __init__(self, f: BinaryIO, entries: list[Entry]) -> None:
        self._f, self._entries = f, entries
        self._by_name = {e.filename: e for e in entries}

    def infolist(self) -> list[Entry]:
        return list(self._entries)

    def getinfo(self, name: str) -> Entry:
        return self._by_name[name]

    def open(self, entry: Entry) -> EntryReader:
        return EntryReader(self._f, entry)

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> BundleZip:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_zip(path: Path, shown: Path | None = None) -> BundleZip:
    """``path`` opened and its layout checked (BundleError naming ``shown``, default ``path``)."""
    f = open(path, "rb")
    try:
        return BundleZip(f, read_layout(f, shown or path))
    except BaseException:
        f.close()
        raise


def read_layout(f: BinaryIO, path: Path) -> list[Entry]:
    """The entries of the zip open in ``f``, after checking that its records cover it exactly and
    agree with each other (the module's rules); BundleError naming ``path`` and the offset."""
    end_at = _end_record_offset(f, f.seek(0, 2), path)
    count, dir_size, dir_offset = _directory_bounds(f, end_at, path)
    entries = _central_entries(f, path, dir_offset, dir_size, count)
    return _check_local_headers(f, path, entries, dir_offset)


def _read(f: BinaryIO, at: int, n: int, path: Path, what: str) -> bytes:
    f.seek(at)
    data = f.read(n)
    if len(data) < n:
        raise BundleError(f"{path}: not a complete zip file ({what} at offset {at:,} is cut short): the bundle is "
                          "truncated or damaged")
    return data


def _end_record_offset(f: BinaryIO, size: int, path: Path) -> int:
    start = max(0, size - END_SEARCH_BYTES - END.size)
    f.seek(start)
    tail = f.read()
    at = tail.rfind(END_SIG, 0, max(0, len(tail) - END.size + len(END_SIG)))
    if at < 0:
        raise BundleError(f"{path}: not a complete zip file (no end of central directory record): the bundle is "
                          "truncated or damaged")
    end_at, after = start + at, len(tail) - at - END.size
    comment = struct.unpack_from("<H", tail, at + 20)[0]
    if after or comment:
        what = (f"a zip comment of {after:,} bytes" if comment == after else
                f"{after:,} bytes of trailing data (its zip comment length says {comment:,})")
        raise BundleError(f"{path}: {what} after the end of central directory record (at offset "
                          f"{end_at + END.size:,}); edgeship writes none: the bundle was altered; refused")
    return end_at


def _directory_bounds(f: BinaryIO, end_at: int, path: Path) -> tuple[int, int, int]:
    """(entries, size, offset) of the central directory, checked to end where the end records begin."""
    record = _read(f, end_at, END.size, path, "the end of central directory record")
    _, disk, dir_disk, here, count, dir_size, dir_offset, _ = END.unpack(record)
    if disk or dir_disk or here != count:
        raise BundleError(f"{path}: the end of central directory record (offset {end_at:,}) describes a zip split "
                          "over several disks; refused")
    dir_end = end_at
    if end_at >= LOCATOR.size + END64.size and _read(f, end_at - LOCATOR.size, 4, path, "") == LOCATOR_SIG:
        dir_end = end_at - LOCATOR.size - END64.size
        count, dir_size, dir_offset = _zip64_bounds(f, path, dir_end, (count, dir_size, dir_offset))
    if dir_size > MAX_DIRECTORY_BYTES:
        raise BundleError(f"{path}: a central directory of {dir_size:,} bytes, above the {MAX_DIRECTORY_BYTES:,} a "
                          "bundle's takes; refused")
    gap = dir_end - dir_size - dir_offset
    if gap:
        what = (f"{gap:,} bytes of prefix data before the entries, or of other data before the directory" if gap > 0
                else "the directory would run past them")
        raise BundleError(f"{path}: the end record puts the central directory at offset {dir_offset:,} "
                          f"({dir_size:,} bytes), but the end records start at offset {dir_end:,}: {what}; refused")
    return count, dir_size, dir_offset


def _zip64_bounds(f: BinaryIO, path: Path, at: int, classic: tuple[int, int, int]) -> tuple[int, int, int]:
    """The zip64 end record's (entries, size, offset), which must sit right before its locator and
    agree with the classic end record (each of its fields the zip64 one, or that capped at its maximum)."""
    _, disk, record_at, disks = LOCATOR.unpack(_read(f, at + END64.size, LOCATOR.size, path, "the zip64 locator"))
    if disk or disks != 1 or record_at != at:
        raise BundleError(f"{path}: the zip64 end of central directory locator points to offset {record_at:,} (disk "
                          f"{disk} of {disks}), not to a zip64 end record right before it; refused")
    sig, size, _, _, disk, dir_disk, here, count, dir_size, dir_offset = END64.unpack(
        _read(f, at, END64.size, path, "the zip64 end of central directory record"))
    if sig != END64_SIG or size != END64.size - 12 or disk or dir_disk or here != count:
        raise BundleError(f"{path}: the zip64 end of central directory record at offset {at:,} is not in the form "
                          "edgeship writes (44 bytes, one disk); refused")
    for what, short, full, cap in zip(("entry count", "directory size", "directory offset"), classic,
                                      (count, dir_size, dir_offset), (MAX16, MAX32, MAX32)):
        if short != min(full, cap):
            raise BundleError(f"{path}: the end of central directory record gives {what} {short:,}, its zip64 record "
                              f"{full:,}: readers would disagree on what the zip holds; refused")
    return count, dir_size, dir_offset


def _central_entries(f: BinaryIO, path: Path, dir_offset: int, dir_size: int, count: int) -> list[Entry]:
    data = _read(f, dir_offset, dir_size, path, "the central directory")
    entries, pos = [], 0
    for i in range(count):
        where = f"{path}: central directory entry {i + 1} (offset {dir_offset + pos:,})"
        if data[pos:pos + 4] != CENTRAL_SIG or pos + CENTRAL.size > len(data):
            raise BundleError(f"{where}: not a central directory header; the directory lists {count:,} entries in "
                              f"{dir_size:,} bytes; refused")
        entry, pos = _central_entry(data, pos, where)
        entries.append(entry)
    if pos != len(data):
        raise BundleError(f"{path}: {len(data) - pos:,} bytes in the central directory after its {count:,} entries "
                          f"(offset {dir_offset + pos:,}); refused")
    return entries


def _central_entry(data: bytes, pos: int, where: str) -> tuple[Entry, int]:
    (_, _, _, flags, method, time, date, crc, csize, usize, n, m, k, disk, _, external,
     offset) = CENTRAL.unpack_from(data, pos)
    start = pos + CENTRAL.size
    if start + n + m + k > len(data):
        raise BundleError(f"{where}: runs past the end of the central directory; refused")
    raw = data[start:start + n]
    name = _decode_name(raw, flags, where)
    where = f"{where}, {name!r}"
    usize, csize, offset = _zip64_fields(data[start + n:start + n + m], (usize, csize, offset), False, where)
    if k or disk:
        raise BundleError(f"{where}: {'a file comment' if k else f'on disk {disk}'}; edgeship writes none; refused")
    _check_form(flags, method, csize, usize, where)
    if name.endswith("/") and (usize or csize > EMPTY_DEFLATE):  # a folder's data is never read: nothing may hide there
        raise BundleError(f"{where}: a folder entry holding {csize:,} bytes; a folder holds none; refused")
    entry = Entry(name, offset, method, csize, usize, crc, flags, external, raw_name=raw, date_time=(date, time))
    return entry, start + n + m + k


def _decode_name(raw: bytes, flags: int, where: str) -> str:
    """An entry's name: UTF-8 when flagged, else ASCII (readers decode other bytes differently:
    Python as cp437, Java as UTF-8); no control characters (Python's zipfile cuts a name at NUL)."""
    try:
        name = raw.decode("utf-8" if flags & UTF8_FLAG else "ascii")
    except UnicodeDecodeError:
        raise BundleError(f"{where}: name {raw!r} is neither ASCII nor UTF-8 flagged as such: readers would "
                          "decode it differently; refused") from None
    if not name or any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        raise BundleError(f"{where}: name {name!r} is empty or holds control characters; refused")
    return name


def _zip64_fields(extra: bytes, values: tuple[int, ...], local: bool, where: str) -> tuple[int, ...]:
    """``values`` with each 0xFFFFFFFF replaced from the zip64 extra field, which must hold exactly
    those (in a local header: both sizes or none), and be the only extra field."""
    fields, pos = {}, 0
    while pos < len(extra):
        if pos + 4 > len(extra):
            raise BundleError(f"{where}: a damaged extra field; refused")
        tag, size = struct.unpack_from("<HH", extra, pos)
        if tag != ZIP64_EXTRA or tag in fields or pos + 4 + size > len(extra):
            raise BundleError(f"{where}: extra field 0x{tag:04x} ({size} bytes); edgeship writes only one zip64 "
                              "field, and some readers take names or sizes from others; refused")
        fields[tag] = extra[pos + 4:pos + 4 + size]
        pos += 4 + size
    wide = [i for i, v in enumerate(values) if v == MAX32]
    if local and wide not in ([], [0, 1]):
        raise BundleError(f"{where}: a local header with one size in zip64 form and not the other; refused")
    data = fields.get(ZIP64_EXTRA, b"")
    if len(data) != 8 * len(wide) or (fields and not wide):
        raise BundleError(f"{where}: a zip64 extra field of {len(data)} bytes where its header's fields call for "
                          f"{8 * len(wide)}; refused")
    out = list(values)
    for k, i in enumerate(wide):
        out[i] = struct.unpack_from("<Q", data, 8 * k)[0]
    return tuple(out)


def _check_form(flags: int, method: int, csize: int, usize: int, where: str) -> None:
    odd = flags & ~ALLOWED_FLAGS
    if odd:
        what = next((text for bit, text in FLAG_NAMES.items() if odd & bit), f"flag bits 0x{odd:04x}")
        raise BundleError(f"{where}: {what}; edgeship writes no such entry; refused")
    if method not in METHODS:
        raise BundleError(f"{where}: compression method {method}; bundles hold stored or deflated entries only; "
                          "refused")
    if method == zipfile.ZIP_STORED and csize != usize:
        raise BundleError(f"{where}: stored, but {csize:,} bytes compressed and {usize:,} uncompressed; refused")


def _check_local_headers(f: BinaryIO, path: Path, entries: list[Entry], dir_offset: int) -> list[Entry]:
    """Each entry's local header, right where the previous entry's data ended, agreeing with the directory."""
    at, checked, previous = 0, [], None
    for e in entries:
        if e.header_offset != at:
            raise _uncovered(f, path, at, e.header_offset, previous, e.filename)
        data_offset = _local_header(f, path, e)
        checked.append(replace(e, data_offset=data_offset))
        at, previous = data_offset + e.compress_size, e.filename
    if at != dir_offset:
        raise _uncovered(f, path, at, dir_offset, previous, "the central directory")
    return checked


def _local_header(f: BinaryIO, path: Path, e: Entry) -> int:
    """Where ``e``'s data starts, after checking its local header against its directory entry."""
    where = f"{path}: {e.filename}: local header at offset {e.header_offset:,}"
    header = _read(f, e.header_offset, LOCAL.size, path, f"{e.filename}'s local header")
    sig, _, flags, method, time, date, crc, csize, usize, n, m = LOCAL.unpack(header)
    if sig != LOCAL_SIG:
        raise BundleError(f"{where}: no local header where the central directory points; refused")
    raw = _read(f, e.header_offset + LOCAL.size, n + m, path, f"{e.filename}'s local header")
    usize, csize = _zip64_fields(raw[n:], (usize, csize), True, where)
    local = {"name": raw[:n], "flags": flags, "compression method": method, "CRC-32": crc,
             "compressed size": csize, "size": usize, "modification time": (date, time)}
    directory = {"name": e.raw_name, "flags": e.flag_bits, "compression method": e.compress_type, "CRC-32": e.CRC,
                 "compressed size": e.compress_size, "size": e.file_size, "modification time": e.date_time}
    for what, value in local.items():
        if value != directory[what]:
            raise BundleError(f"{where}: {what} {value!r}, the central directory's {directory[what]!r}: a "
                              f"streaming reader and a directory reader would read different files; refused")
    return e.header_offset + LOCAL.size + n + m


def _uncovered(f: BinaryIO, path: Path, start: int, stop: int, previous: str | None, next_: str) -> BundleError:
    """The error for bytes ``start``-``stop`` that no directory entry covers (or, when ``stop`` <
    ``start``, an entry starting inside the previous one)."""
    if stop < start:
        return BundleError(f"{path}: {next_} starts at offset {stop:,}, inside {previous} (which ends at offset "
                           f"{start:,}): overlapping entries; refused")
    where = "before the first entry" if previous is None else f"after {previous}"
    f.seek(start)
    head = f.read(min(stop - start, LOCAL.size + MAX16))
    if head[:4] == LOCAL_SIG and len(head) >= LOCAL.size:
        n = struct.unpack_from("<H", head, 26)[0]
        name = head[LOCAL.size:LOCAL.size + n].decode("utf-8", "replace")
        return BundleError(f"{path}: a local entry {name!r} at offset {start:,} ({where}) that the central "
                           f"directory does not list: {STREAMING}, and nothing checked it; the bundle was altered; "
                           "refused")
    what = "prefix data" if previous is None else "data that belongs to no entry"
    return BundleError(f"{path}: {stop - start:,} bytes of {what} at offset {start:,} ({where}); {STREAMING} or "
                       "skip it unchecked; the bundle was altered; refused")


class EntryReader:
    """An entry's bytes, decompressed, from a zip whose layout was checked. Its data must be exactly
    one deflate stream (or the stored bytes) filling its compressed size, with its CRC-32 and size;
    otherwise zipfile.BadZipFile naming the offset (bytes after the deflate stream's end are what a
    reader that finds the next entry by inflating would read as one)."""

    def __init__(self, f: BinaryIO, entry: Entry) -> None:
        self._f, self._entry = f, entry
        self._pos, self._left = entry.data_offset, entry.compress_size
        self._inflate = zlib.decompressobj(-zlib.MAX_WBITS) if entry.compress_type == zipfile.ZIP_DEFLATED else None
        self._crc, self._size, self._done = 0, 0, False

    def read(self, n: int = CHUNK) -> bytes:
        """Up to ``n`` bytes of the entry; b"" at its end, once its size and CRC-32 were found right."""
        while not self._done:
            out = self._next(min(n, self._entry.file_size - self._size + 1))
            if out:
                self._crc = zlib.crc32(out, self._crc)
                self._size += len(out)
                if self._size > self._entry.file_size:
                    raise zipfile.BadZipFile(f"it holds more than the {self._entry.file_size:,} bytes its headers "
                                             "declare")
                return out
        return b""

    def _raw(self, n: int) -> bytes:
        self._f.seek(self._pos)
        data = self._f.read(min(n, self._left))
        self._pos += len(data)
        self._left -= len(data)
        return data

    def _next(self, n: int) -> bytes:
        inflate = self._inflate
        if inflate is None:
            out = self._raw(n)
            if not out:
                self._finish()
            return out
        if inflate.eof:
            slack = len(inflate.unused_data) + self._left
            if slack:
                raise zipfile.BadZipFile(f"its deflate stream ends at offset {self._pos - len(inflate.unused_data):,}"
                                         f", {slack:,} bytes before its compressed size does: bytes no reader of "
                                         "the central directory checks")
            self._finish()
            return b""
        data = inflate.unconsumed_tail or self._raw(RAW_CHUNK)
        if data:
            return inflate.decompress(data, n)
        out = inflate.flush()
        if not out and not inflate.eof:
            raise zipfile.BadZipFile(f"its deflate stream is cut short at offset {self._pos:,}")
        return out

    def _finish(self) -> None:
        e = self._entry
        if self._left or self._size != e.file_size or self._crc != e.CRC:
            raise zipfile.BadZipFile(f"{self._size:,} bytes with CRC-32 {self._crc:08x} read, its headers say "
                                     f"{e.file_size:,} bytes with CRC-32 {e.CRC:08x}")
        self._done = True

    def __enter__(self) -> EntryReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass
