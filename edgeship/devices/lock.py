"""One lock per physical device, shared by every edgeship process on this machine, so two builds
never time on the same device at once (each would slow the other down and both numbers would be
wrong).

The lock is a ``locks.FileLock`` on ``~/.cache/edgeship/locks/<device>.lock`` (``$XDG_CACHE_HOME``
is honoured): the kernel drops it when its holder exits, and the file says who holds it. Both
folders are checked before a lock is taken (``fsutil.private_folder``): a lock file is opened for
writing, so in a folder another user can write to, their symbolic link named like it would have
edgeship write over a file of their choosing.
"""
from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgeship.devices.base import MeasurementError
from edgeship.fsutil import private_folder
from edgeship.locks import Busy, FileLock, describe

LOCKS = "locks"  # the folder of lock files in user_cache()


def user_cache() -> Path:
    """edgeship's folder in the user's cache: ``$XDG_CACHE_HOME/edgeship`` or ``~/.cache/edgeship``
    (device locks, the emulated Arm device's root)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "edgeship"


def user_folder(name: str) -> Path:
    """``user_cache()/name`` for state edgeship trusts (device locks, Inductor's cache), made or checked
    with ``user_cache()`` itself as folders only this user controls (OutputError, exit 2, when not)."""
    cache = private_folder(user_cache(), "edgeship's folder in your cache ($XDG_CACHE_HOME/edgeship)")
    return private_folder(cache / name, "edgeship's folder")


def lock_dir() -> Path:
    """Where lock files live: ``user_cache()/locks``."""
    return user_cache() / LOCKS


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
        user_folder(LOCKS)
        try:
            super().__enter__()
        except Busy as e:
            raise MeasurementError(f"device {self.key} stayed busy for {self.timeout_s:.0f} s "
                                   f"(held by {describe(e.holder)})") from None
        return self
