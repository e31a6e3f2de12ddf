"""A small content-addressed cache: folders under ``artifacts/.cache``, one per key, written atomically.

A key is the sha256 of its parts (any JSON-serializable values: content hashes, method names,
settings), so equal inputs find the same entry and any change misses. ``compute`` fills a fresh
temporary folder; the folder becomes the entry in one rename, so a reader sees a whole entry or
none, and two builds racing on one key both end with a complete entry (the first to finish wins).

Trust is checked, not assumed: an entry's ``key.json`` lists the sha256 of every file in it and is
signed (HMAC-SHA256, with the entry's namespace and folder name) by this machine's key
(:mod:`edgeship.machinekey`, kept outside the cache), and every hit is read back against both. A list
proves an entry whole; the signature proves edgeship wrote it here: an entry edited and its list
recomputed does not verify. A damaged or unsigned entry (a truncated file, one missing or added, an
edit) is discarded and computed again, with a line in ``Cache.notices`` saying so. What a reader
takes from an entry it reads through the entry (:meth:`CacheEntry.read_bytes`, ``copy_file``,
``copy_tree``), checked as read against the signed list: a file swapped after the entry was checked
is caught where it is read, never opened again by name (:meth:`Cache.read`, :meth:`Cache.read_or_compute`
discard such an entry and miss, or compute it again).

An entry's folder is named ``<key>.<key id>``: the key id (:attr:`MachineKey.key_id`, a short HMAC of
a fixed label, never the secret) names the key that signs it. Each key has its own entries: machines
sharing ``$EDGESHIP_CACHE_DIR`` with different key files (or a process on a key of its own) neither
find nor delete each other's entries, they each keep theirs; machines holding the same key file share
them in full. Entries from before signing (named ``<key>`` alone) are never looked up: misses, removed
by ``clear`` like every key's entries. A process that has no machine key (no home folder to keep one
in) signs with a key of its own and keeps its entries in a private temporary folder, gone when it ends.

The root holds a marker file (``.edgeship-cache``), written when edgeship creates the folder. Only
what edgeship wrote is ever deleted: key-named entries in namespace folders and its own temporary
folders. A folder without the marker that holds anything else is not a cache edgeship will write
into or clear (OutputError); an empty one, or one holding only such entries, is adopted.

Temporary folders are named ``.<key12>.<host>.<pid>.<random>.tmp``. One left by a killed build is
removed by the next (``sweep``) once its process is gone: the pid is checked on this host, since an
age threshold would either delete a slow live build's folder or keep junk for long; a folder from
another host (a cache shared over the network) is removed only when a day old.
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import stat
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, TypeVar

from edgeship.devices.hashing import sha256_file
from edgeship.errors import OutputError, listing
from edgeship.fsutil import atomic_output, full_disk_is_write_failure, new_private_folder, pid_alive, tree_size
from edgeship.machinekey import MachineKey, machine_key

DEFAULT_ROOT = Path("artifacts") / ".cache"
ROOT_ENV = "EDGESHIP_CACHE_DIR"  # overrides DEFAULT_ROOT
KEY_FILE = "key.json"
SIGNATURE = "hmac"   # key.json's field: this machine's HMAC-SHA256 of the entry's name and listing
MARKER = ".edgeship-cache"
ENTRY_NAME = re.compile(r"^[0-9a-f]{64}(?:\.[0-9a-f]{16})?$")   # <key>.<key id>; <key> alone: before signing
HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:32] or "host"
TEMP_NAME = re.compile(r"^\.[0-9a-f]{12}\.(?P<host>[A-Za-z0-9-]+)\.(?P<pid>\d+)\.[A-Za-z0-9_]+\.tmp$")
OLD_TEMP_NAME = re.compile(r"^\.[0-9a-f]{12}\.[A-Za-z0-9_]{8}\.tmp$")  # before pids were in the name
FOREIGN_TEMP_AGE_S = 24 * 3600
T = TypeVar("T")


class EntryDamaged(Exception):
    """A file of an entry is not the one its signed sha256 list holds (changed after the entry was
    checked, or never written so); the message says which."""


@dataclass(frozen=True)
class CacheEntry:
    """A complete cache entry: its folder, its key, whether it was found (``hit``) or computed, and
    the sha256 of each of its files as signed. Read it through ``read_bytes``, ``copy_file`` and
    ``copy_tree``: each checks what it read against ``files`` (EntryDamaged otherwise), so what a
    reader parses or loads is what was signed, even when the folder changes after ``Cache.get``."""

    path: Path
    key: str
    hit: bool
    files: dict[str, str] = field(default_factory=dict)

    def read_bytes(self, name: str) -> bytes:
        """The bytes of the entry's file ``name`` (a path relative to the entry), read once and checked."""
        with self._open(name) as f:
            data = f.read()
        self._check(name, hashlib.sha256(data).hexdigest())
        return data

    def copy_file(self, name: str, dest: Path) -> None:
        """Copy the entry's file ``name`` to ``dest`` (replaced atomically, never written through a link),
        hashing the bytes as they are copied: ``dest`` is what was signed, or is left as it was."""
        h = hashlib.sha256()
        with atomic_output(dest) as tmp, self._open(name) as src, open(tmp, "xb") as out:
            for block in iter(lambda: src.read(1 << 20), b""):
                h.update(block)
                out.write(block)
            self._check(name, h.hexdigest())

    def copy_tree(self, folder: str, dest: Path) -> None:
        """Copy the entry's ``folder`` to ``dest`` (which must not exist), then check the copy against the
        signed list (the entry cannot change between the check and the copy); ``dest`` is removed when
        it is not what was signed."""
        shutil.copytree(self.path / folder, dest)
        prefix = f"{folder}/"
        signed = {name.removeprefix(prefix): sha for name, sha in self.files.items() if name.startswith(prefix)}
        if file_hashes(dest) != signed:
            shutil.rmtree(dest, ignore_errors=True)
            raise EntryDamaged(f"the copy of {folder} differs from the signed sha256 list")

    def _open(self, name: str) -> BinaryIO:
        """The entry's file ``name`` opened to read, when it is a regular file (not a link, a pipe that
        would block the build, or a device)."""
        try:
            fd = os.open(self.path / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as e:
            raise EntryDamaged(f"{name} cannot be read ({e.strerror or e})") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise EntryDamaged(f"{name} is not a regular file")
        return os.fdopen(fd, "rb")

    def _check(self, name: str, sha: str) -> None:
        if name not in self.files:
            raise EntryDamaged(f"{name} is not in its signed sha256 list")
        if sha != self.files[name]:
            raise EntryDamaged(f"{name}: not the file its signed sha256 list holds")


@dataclass
class CacheSummary:
    """What ``info`` and ``clear`` report: entries and bytes, and what was left alone and why."""

    root: Path
    entries: int = 0
    bytes: int = 0
    kept: list[str] = field(default_factory=list)


def cache_key(parts: object) -> str:
    """The sha256 of ``parts`` rendered as canonical JSON (sorted keys, no whitespace)."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Cache:
    """Entries in ``root/<namespace>/<key>.<key id>/``; ``get_or_compute`` is the way in, ``get`` looks
    only; ``read`` and ``read_or_compute`` also read the entry, checked, and miss when it does not check out."""

    def __init__(self, root: Path = DEFAULT_ROOT, signer: MachineKey | None = None) -> None:
        self.root = Path(root)
        self.notices: list[str] = []  # damaged entries discarded, for the build to print
        self._signer = signer

    @property
    def signer(self) -> MachineKey:
        """The key entries are signed and checked with (:meth:`load_signer`)."""
        return self.load_signer()

    def load_signer(self) -> MachineKey:
        """This machine's key, read on first use (OutputError when its file is unsafe); where none can be
        kept, this process's own, and a notice says so once."""
        if self._signer is None:
            self._signer = machine_key()
            if self._signer.problem:
                self.notices.append(f"{self._signer.problem}; nothing is reused from the stage cache {self.root} "
                                    "in this build (set $XDG_CONFIG_HOME to a folder of yours that can be written)")
        return self._signer

    def entry_path(self, namespace: str, key: str) -> Path:
        """The folder of this key's entry for ``key``: each signing key has its own (``<key>.<key id>``).
        A process on a key of its own (no machine key could be kept) keeps its entries in a private
        folder of its own, removed when it ends: no other process could reuse them, and the shared
        root does not fill up with them, build after build."""
        base = self.root if self.signer.problem is None else _process_entries()
        return base / namespace / f"{key}.{self.signer.key_id}"

    def get(self, namespace: str, key_parts: object, redo: str = "computing it again") -> CacheEntry | None:
        """The entry for ``key_parts`` when it is there, whole and signed by this machine; a damaged
        or unsigned one is discarded (None). Entries of other keys are not looked at."""
        key = cache_key(key_parts)
        dest = self.entry_path(namespace, key)
        if not (dest / KEY_FILE).is_file():
            return None
        files, problem = checked_files(dest, self.signer)
        if problem is None:
            return CacheEntry(dest, key, hit=True, files=files)
        self.discard_damaged(CacheEntry(dest, key, hit=True), problem, redo)
        return None

    def discard_damaged(self, entry: CacheEntry, problem: str, redo: str) -> None:
        """Take a damaged entry away and say so in ``notices`` (what was wrong, what the build does)."""
        self.discard(entry.path)
        self.notices.append(f"stage cache entry {entry.path.parent.name}/{entry.path.name} is damaged ({problem}); "
                            f"discarded, {redo}")

    def read(self, namespace: str, key_parts: object, read: Callable[[CacheEntry], T],
             redo: str = "computing it again") -> T | None:
        """``read(entry)`` of the entry for ``key_parts``; None on a miss, or when what ``read`` takes
        through the entry is not what was signed (EntryDamaged: the entry is discarded, with a notice)."""
        entry = self.get(namespace, key_parts, redo)
        if entry is None:
            return None
        try:
            return read(entry)
        except EntryDamaged as e:
            self.discard_damaged(entry, str(e), redo)
            return None

    def read_or_compute(self, namespace: str, key_parts: object, compute: Callable[[Path], None],
                        read: Callable[[CacheEntry], T], redo: str = "computing it again") -> T:
        """``read(entry)`` of the entry for ``key_parts``, computed on a miss. An entry whose files change
        under the reader (EntryDamaged) is discarded and computed once more; OutputError, naming it, when
        that one changes too (another process keeps writing into the cache)."""
        for _ in range(2):
            entry = self.get_or_compute(namespace, key_parts, compute, redo)
            try:
                return read(entry)
            except EntryDamaged as e:
                self.discard_damaged(entry, str(e), redo)
                problem = str(e)
        raise OutputError(f"{entry.path}: the stage cache entry changed while this build read it, twice ({problem}); "
                          f"another process is writing into {self.root}. Run `edgeship cache clear`, or point "
                          f"${ROOT_ENV} at a folder that only you write")

    def get_or_compute(self, namespace: str, key_parts: object, compute: Callable[[Path], None],
                       redo: str = "computing it again") -> CacheEntry:
        """The entry for ``key_parts``; on a miss, ``compute(folder)`` writes it into an empty folder."""
        found = self.get(namespace, key_parts, redo)
        if found is not None:
            return found
        key = cache_key(key_parts)
        dest = self.entry_path(namespace, key)
        self.prepare()
        with full_disk_is_write_failure(dest):
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{key[:12]}.{HOST}.{os.getpid()}.", suffix=".tmp", dir=dest.parent))
        try:
            with full_disk_is_write_failure(dest):
                compute(tmp)
                # Written last: an entry counts only once its key file (with its files' sha256) is there.
                doc = signed_listing(namespace, dest.name, key_parts, file_hashes(tmp), self.signer)
                (tmp / KEY_FILE).write_text(json.dumps(doc, sort_keys=True, indent=1))
                sync_tree(tmp)  # on disk before the rename makes it an entry: a power cut leaves no half entry
            return self._publish(tmp, CacheEntry(dest, key, hit=False, files=doc["files"]))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def discard(self, dest: Path) -> None:
        """Take a (damaged) entry away: renamed out of its key first, so no reader finds half of it."""
        gone = dest.parent / f".{dest.name[:12]}.{HOST}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            os.rename(dest, gone)
        except OSError:
            gone = dest
        shutil.rmtree(gone, ignore_errors=True)

    def _publish(self, tmp: Path, entry: CacheEntry) -> CacheEntry:
        """Rename ``tmp`` to the entry's folder; when another writer got there first, keep theirs if it
        verifies (else it is discarded and ours takes its place)."""
        dest = entry.path
        for _ in range(2):
            if dest.exists() and not (dest / KEY_FILE).is_file():
                shutil.rmtree(dest, ignore_errors=True)  # a leftover without its key file is incomplete
            try:
                os.rename(tmp, dest)
                break
            except OSError:
                if not (dest / KEY_FILE).is_file():
                    raise
            files, problem = checked_files(dest, self.signer)
            if problem is None:
                return CacheEntry(dest, entry.key, hit=False, files=files)
            self.discard_damaged(entry, problem, "writing this build's")
        else:
            raise OutputError(f"{dest}: another process keeps writing an entry there that does not verify")
        with contextlib.suppress(OSError):  # the rename itself on disk
            _fsync(dest.parent)
        return entry

    # The root: whose it is, what is in it, clearing and sweeping.

    def foreign(self) -> list[str]:
        """Names under the root that edgeship did not write (empty when the root carries the marker)."""
        if not self.root.is_dir() or (self.root / MARKER).is_file():
            return []
        out = []
        for item in sorted(self.root.iterdir()):
            if not item.is_dir() or item.is_symlink():
                out.append(item.name)
            else:
                out += [f"{item.name}/{c.name}" for c in sorted(item.iterdir()) if not _ours(c)]
        return out

    def prepare(self) -> None:
        """Make sure the root is an edgeship cache before writing: create it with its marker, adopt an
        empty folder or one holding only edgeship entries, refuse any other (OutputError). The key is read
        here too, so an unsafe key file stops a build before its first slow step."""
        self.load_signer()
        if (self.root / MARKER).is_file():
            return
        self.check_ours()
        with full_disk_is_write_failure(self.root / MARKER):
            self.root.mkdir(parents=True, exist_ok=True)
            (self.root / MARKER).write_text("edgeship stage cache: `edgeship cache clear` empties it\n")

    def check_ours(self) -> None:
        """OutputError naming the root when it holds files edgeship did not write and has no marker."""
        strangers = self.foreign()
        if strangers:
            raise OutputError(f"cache folder {self.root}: not an edgeship cache (no {MARKER} file, and it holds "
                              f"files edgeship did not write: {listing(strangers)}); edgeship neither writes into "
                              f"nor clears it. Point ${ROOT_ENV} at an empty or new folder")

    def info(self) -> CacheSummary:
        """Entries and bytes under the root (OutputError when it is not an edgeship cache)."""
        summary = CacheSummary(self.root)
        if not self.root.is_dir():
            return summary
        self.check_ours()
        for _, entry in self._entries():
            summary.entries += 1
            summary.bytes += tree_size(entry)
        return summary

    def clear(self) -> CacheSummary:
        """Delete every entry and every leftover temporary folder; keep anything else, and say so.
        The root goes too when nothing else is left in it."""
        summary = CacheSummary(self.root)
        if not self.root.is_dir():
            return summary
        self.check_ours()
        for namespace in sorted(p for p in self.root.iterdir() if p.is_dir() and not p.is_symlink()):
            for item in sorted(namespace.iterdir()):
                if ENTRY_NAME.match(item.name) and item.is_dir() and not item.is_symlink():
                    summary.entries += 1
                    summary.bytes += tree_size(item)
                    shutil.rmtree(item, ignore_errors=True)
                elif _ours(item) and _orphaned(item):
                    shutil.rmtree(item, ignore_errors=True)
                else:
                    why = "in use by a running build" if _ours(item) else "not written by edgeship"
                    summary.kept.append(f"{namespace.name}/{item.name} ({why})")
            with contextlib.suppress(OSError):
                namespace.rmdir()  # only when empty
        summary.kept += [f"{p.name} (not written by edgeship)" for p in sorted(self.root.iterdir())
                         if p.name != MARKER and (not p.is_dir() or p.is_symlink())]
        if not summary.kept:
            with contextlib.suppress(OSError):
                (self.root / MARKER).unlink(missing_ok=True)
                self.root.rmdir()
        return summary

    def sweep(self) -> int:
        """Remove temporary folders left by killed builds (their process is gone); how many."""
        if not self.root.is_dir() or self.foreign():
            return 0
        removed = 0
        for namespace in (p for p in self.root.iterdir() if p.is_dir() and not p.is_symlink()):
            for item in namespace.iterdir():
                if not ENTRY_NAME.match(item.name) and _ours(item) and _orphaned(item):
                    shutil.rmtree(item, ignore_errors=True)
                    removed += 1
        return removed

    def _entries(self) -> list[tuple[str, Path]]:
        return [(ns.name, e) for ns in sorted(self.root.iterdir()) if ns.is_dir() and not ns.is_symlink()
                for e in sorted(ns.iterdir()) if ENTRY_NAME.match(e.name) and e.is_dir()]


def signed_listing(namespace: str, name: str, key_parts: object, files: dict[str, str],
                   signer: MachineKey) -> dict:
    """An entry's key file: its key parts and files' sha256, signed with the entry's namespace and
    folder ``name`` (an entry moved to another key does not verify)."""
    doc = json.loads(json.dumps({"key": key_parts, "files": files}, default=str))  # as a reader will see it
    return {**doc, SIGNATURE: signer.sign_document(_signed(namespace, name, doc))}


def _signed(namespace: str, name: str, doc: dict) -> dict:
    return {"entry": f"{namespace}/{name}", "listing": doc}


def checked_files(entry: Path, signer: MachineKey) -> tuple[dict[str, str], str | None]:
    """The sha256 list an entry's key file signs, and what is wrong with the entry (None when whole and
    signed by ``signer``)."""
    try:
        doc = json.loads((entry / KEY_FILE).read_text())
        signature = doc.pop(SIGNATURE, None)
        listed = doc["files"]
        if not isinstance(listed, dict):
            raise TypeError(listed)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}, f"{KEY_FILE} is unreadable or lists no files"
    if not signer.verifies_document(_signed(entry.parent.name, entry.name, doc), signature):
        return {}, f"{KEY_FILE} does not verify with this machine's key: changed since edgeship wrote it"
    return listed, _files_damage(entry, listed)


def entry_damage(entry: Path, signer: MachineKey | None = None) -> str | None:
    """What is wrong with an entry against its signed sha256 list (``signer``: this machine's key by
    default), or None when it is whole and signed."""
    return checked_files(entry, signer or machine_key())[1]


def _files_damage(entry: Path, listed: dict[str, str]) -> str | None:
    present = file_hashes(entry)
    for name, sha in sorted(listed.items()):
        if name not in present:
            return f"{name} is missing"
        if present[name] != sha:
            return f"{name}: sha256 differs from the one stored with it"
    extra = sorted(set(present) - set(listed))
    return f"{extra[0]} was not part of it" if extra else None


def sync_tree(folder: Path) -> None:
    """fsync every file and folder under ``folder`` (and ``folder`` itself)."""
    for path in [*sorted(p for p in folder.rglob("*") if not p.is_symlink()), folder]:
        _fsync(path)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def file_hashes(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder`` (key file excluded), by path relative to it."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and rel != KEY_FILE:
            out[rel] = sha256_file(path)
    return out


def _ours(item: Path) -> bool:
    """An entry (of any key, or from before signing) or one of edgeship's temporary folders."""
    return item.is_dir() and not item.is_symlink() and bool(
        ENTRY_NAME.match(item.name) or TEMP_NAME.match(item.name) or OLD_TEMP_NAME.match(item.name))


def _orphaned(item: Path) -> bool:
    """A temporary folder whose writer is gone: its pid dead on this host; else older than a day."""
    match = TEMP_NAME.match(item.name)
    if match and match["host"] == HOST:
        return not pid_alive(int(match["pid"]))
    try:
        return time.time() - item.stat().st_mtime > FOREIGN_TEMP_AGE_S
    except OSError:
        return False


@functools.cache
def _process_entries() -> Path:
    folder = new_private_folder("edgeship-cache-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def default_cache() -> Cache:
    """The build's cache: ``$EDGESHIP_CACHE_DIR``, else ``artifacts/.cache`` under the working folder
    (OutputError, exit 2, when that path is a file or lies under one)."""
    from edgeship.config import usable_folder

    root = Path(os.environ.get(ROOT_ENV) or DEFAULT_ROOT)
    usable_folder(root, f"cache folder (${ROOT_ENV})" if os.environ.get(ROOT_ENV) else "cache folder", writable=False)
    return Cache(root)
