"""One lock per physical device, shared by every edgeship process on this machine, so two builds
never time on the same device at once (each would slow the other down and both numbers would be
wrong).

The lock is a ``locks.FileLock`` on ``~/.cache/edgeship/locks/<device>.lock`` (``$XDG_CACHE_HOME``
is honoured): the kernel drops it when its holder exits, and the file says who holds it.
"""
from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgeship.devices.base import MeasurementError
from edgeship.locks import Busy, FileLock, describe


def user_cache() -> Path:
    """edgeship's folder in the user's cache: ``$XDG_CACHE_HOME/edgeship`` or ``~/.cache/edgeship``
    (device locks, the emulated Arm device's root)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "edgeship"


def lock_dir() -> Path:
    """Where lock files live: ``user_cache()/locks``."""
    return user_cache() / "locks"


def lock_path(key: str) -> Path:
    """A file name for ``key`` that is readable and cannot collide after sanitizing."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", key).strip("_")[:80]
    return lock_dir() / f"{readable}-{hashlib.sha256(key.encode()).hexdigest()[:8]}.lock"


class DeviceLock(FileLock):
    """``with DeviceLock(key):`` holds the device's lock; waits while another process holds it.

    ``on_wait`` is called once, with the holder's details, when the lock is busy; after
    ``timeout_s`` of waiting a MeasurementError says who holds it.
    """

    def __init__(self, key: str, timeout_s: float = 3600.0,
                 on_wait: Callable[[dict[str, Any]], None] | None = None) -> None:
        super().__init__(lock_path(key), timeout_s, on_wait)
        self.key = key

    def __enter__(self) -> DeviceLock:
        try:
            super().__enter__()
        except Busy as e:
            raise MeasurementError(f"device {self.key} stayed busy for {self.timeout_s:.0f} s "
                                   f"(held by {describe(e.holder)})") from None
        return self
