"""A small content-addressed cache: folders under ``artifacts/.cache``, one per key, written atomically.

A key is the sha256 of its parts (any JSON-serializable values: content hashes, method names,
settings), so equal inputs find the same entry and any change misses. ``compute`` fills a fresh
temporary folder; the folder becomes the entry in one rename, so a reader sees a whole entry or
none, and two builds racing on one key both end with a complete entry (the first to finish wins).

Trust is checked, not assumed: an entry's ``key.json`` lists the sha256 of every file in it and is
signed (HMAC-SHA256, with the entry's namespace and key) by this machine's key
(:mod:`edgeship.machinekey`, kept outside the cache), and every hit is read back against both. A list
proves an entry whole; the signature proves edgeship wrote it here: an entry edited and its list
recomputed does not verify. A damaged or unsigned entry (a truncated file, one missing or added, an
edit) is discarded and computed again, with a line in ``Cache.notices`` saying so. A cache shared
between machines (``$EDGESHIP_CACHE_DIR`` on a network folder) is shared in full only by machines
holding the same key file; each other machine's entries are made again.

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

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from edgeship.devices.hashing import sha256_file
from edgeship.errors import OutputError, listing
from edgeship.fsutil import full_disk_is_write_failure, pid_alive, tree_size
from edgeship.machinekey import MachineKey, machine_key

DEFAULT_ROOT = Path("artifacts") / ".cache"
ROOT_ENV = "EDGESHIP_CACHE_DIR"  # overrides DEFAULT_ROOT
KEY_FILE = "key.json"
SIGNATURE = "hmac"   # key.json's field: this machine's HMAC-SHA256 of the entry's name and listing
MARKER = ".edgeship-cache"
KEY_NAME = re.compile(r"^[0-9a-f]{64}$")
HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:32] or "host"
TEMP_NAME = re.compile(r"^\.[0-9a-f]{12}\.(?P<host>[A-Za-z0-9-]+)\.(?P<pid>\d+)\.[A-Za-z0-9_]+\.tmp$")
OLD_TEMP_NAME = re.compile(r"^\.[0-9a-f]{12}\.[A-Za-z0-9_]{8}\.tmp$")  # before pids were in the name
FOREIGN_TEMP_AGE_S = 24 * 3600


@dataclass(frozen=True)
class CacheEntry:
    """A complete cache entry: its folder, its key, whether it was found (``hit``) or computed, and
    the sha256 of each of its files as signed (what a reader checks what it reads against)."""

    path: Path
    key: str
    hit: bool
    files: dict[str, str] = field(default_factory=dict)


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
    """Entries in ``root/<namespace>/<key>/``; ``get_or_compute`` is the way in, ``get`` looks only."""

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
        return self.root / namespace / key

    def get(self, namespace: str, key_parts: object, redo: str = "computing it again") -> CacheEntry | None:
        """The entry for ``key_parts`` when it is there, whole and signed by this machine; a damaged
        or unsigned one is discarded (None)."""
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
        """Take a damaged entry away and say so in ``notices`` (what was wrong, what the build does);
        quietly for one that only this process's own key fails to verify (a notice said why once)."""
        self.discard(entry.path)
        if self.signer.problem is None or not problem.startswith(UNSIGNED):
            self.notices.append(f"stage cache entry {entry.path.parent.name}/{entry.key} is damaged ({problem}); "
                                f"discarded, {redo}")

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
                doc = signed_listing(namespace, key, key_parts, file_hashes(tmp), self.signer)
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
                if KEY_NAME.match(item.name) and item.is_dir() and not item.is_symlink():
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
                if not KEY_NAME.match(item.name) and _ours(item) and _orphaned(item):
                    shutil.rmtree(item, ignore_errors=True)
                    removed += 1
        return removed

    def _entries(self) -> list[tuple[str, Path]]:
        return [(ns.name, e) for ns in sorted(self.root.iterdir()) if ns.is_dir() and not ns.is_symlink()
                for e in sorted(ns.iterdir()) if KEY_NAME.match(e.name) and e.is_dir()]


UNSIGNED = f"{KEY_FILE} does not verify"


def signed_listing(namespace: str, key: str, key_parts: object, files: dict[str, str],
                   signer: MachineKey) -> dict:
    """An entry's key file: its key parts and files' sha256, signed with the entry's namespace and key
    (an entry moved to another key does not verify)."""
    doc = json.loads(json.dumps({"key": key_parts, "files": files}, default=str))  # as a reader will see it
    return {**doc, SIGNATURE: signer.sign(_signed_text(namespace, key, doc))}


def _signed_text(namespace: str, key: str, doc: dict) -> bytes:
    return json.dumps({"entry": f"{namespace}/{key}", "listing": doc}, sort_keys=True,
                      separators=(",", ":")).encode("utf-8")


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
    if not signer.verifies(_signed_text(entry.parent.name, entry.name, doc), signature):
        return {}, (f"{UNSIGNED} with this machine's key: changed since edgeship wrote it, or written with "
                    f"another key{f' than {signer.path}' if signer.path else ''}")
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
    """A key-named entry or one of edgeship's temporary folders."""
    return item.is_dir() and not item.is_symlink() and bool(
        KEY_NAME.match(item.name) or TEMP_NAME.match(item.name) or OLD_TEMP_NAME.match(item.name))


def _orphaned(item: Path) -> bool:
    """A temporary folder whose writer is gone: its pid dead on this host; else older than a day."""
    match = TEMP_NAME.match(item.name)
    if match and match["host"] == HOST:
        return not pid_alive(int(match["pid"]))
    try:
        return time.time() - item.stat().st_mtime > FOREIGN_TEMP_AGE_S
    except OSError:
        return False


def default_cache() -> Cache:
    """The build's cache: ``$EDGESHIP_CACHE_DIR``, else ``artifacts/.cache`` under the working folder
    (OutputError, exit 2, when that path is a file or lies under one)."""
    from edgeship.config import usable_folder

    root = Path(os.environ.get(ROOT_ENV) or DEFAULT_ROOT)
    usable_folder(root, f"cache folder (${ROOT_ENV})" if os.environ.get(ROOT_ENV) else "cache folder", writable=False)
    return Cache(root)
