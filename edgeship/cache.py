"""A small content-addressed cache: folders under ``artifacts/.cache``, one per key, written atomically.

A key is the sha256 of its parts (any JSON-serializable values: content hashes, method names,
settings), so equal inputs find the same entry and any change misses. ``compute`` fills a fresh
temporary folder; the folder becomes the entry in one rename, so a reader sees a whole entry or
none, and two builds racing on one key both end with a complete entry (the first to finish wins).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_ROOT = Path("artifacts") / ".cache"
ROOT_ENV = "EDGESHIP_CACHE_DIR"  # overrides DEFAULT_ROOT
KEY_FILE = "key.json"


@dataclass(frozen=True)
class CacheEntry:
    """A complete cache entry: its folder, its key, and whether it was found (``hit``) or computed."""

    path: Path
    key: str
    hit: bool


def cache_key(parts: Any) -> str:
    """The sha256 of ``parts`` rendered as canonical JSON (sorted keys, no whitespace)."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Cache:
    """Entries in ``root/<namespace>/<key>/``; ``get_or_compute`` is the only way in."""

    def __init__(self, root: Path = DEFAULT_ROOT) -> None:
        self.root = Path(root)

    def entry_path(self, namespace: str, key: str) -> Path:
        return self.root / namespace / key

    def get_or_compute(self, namespace: str, key_parts: Any,
                       compute: Callable[[Path], None]) -> CacheEntry:
        """The entry for ``key_parts``; on a miss, ``compute(folder)`` writes it into an empty folder."""
        key = cache_key(key_parts)
        dest = self.entry_path(namespace, key)
        if (dest / KEY_FILE).is_file():
            return CacheEntry(dest, key, hit=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key[:12]}.", suffix=".tmp", dir=dest.parent))
        try:
            compute(tmp)
            # Written last: an entry counts only once its key file is there.
            (tmp / KEY_FILE).write_text(json.dumps(key_parts, sort_keys=True, indent=1, default=str))
            return CacheEntry(self._publish(tmp, dest), key, hit=False)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    @staticmethod
    def _publish(tmp: Path, dest: Path) -> Path:
        """Rename ``tmp`` to ``dest``; when another writer got there first, keep theirs."""
        if dest.exists() and not (dest / KEY_FILE).is_file():
            shutil.rmtree(dest, ignore_errors=True)  # a leftover without its key file is incomplete
        try:
            os.rename(tmp, dest)
        except OSError:
            if not (dest / KEY_FILE).is_file():
                raise
        return dest


def default_cache() -> Cache:
    """The build's cache: ``$EDGESHIP_CACHE_DIR``, else ``artifacts/.cache`` under the working folder."""
    return Cache(Path(os.environ.get(ROOT_ENV) or DEFAULT_ROOT))
