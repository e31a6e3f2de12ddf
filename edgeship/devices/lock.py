"""One lock per physical device, shared by every edgeship process on this machine, so two builds
never time on the same device at once (each would slow the other down and both numbers would be
wrong).

The lock is an OS file lock (``fcntl.flock``) on ``~/.cache/edgeship/locks/<device>.lock``
(``$XDG_CACHE_HOME`` is honoured). The kernel drops it when its holder exits, even on a crash,
so a stale lock cannot outlive a killed build. The file holds the holder's pid, host and start
time, for the message the waiting build prints.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from edgeship.devices.base import MeasurementError

POLL_S = 0.2


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


class DeviceLock:
    """``with DeviceLock(key):`` holds the device's lock; waits while another process holds it.

    ``on_wait`` is called once, with the holder's details, when the lock is busy; after
    ``timeout_s`` of waiting a MeasurementError says who holds it.
    """

    def __init__(self, key: str, timeout_s: float = 3600.0,
                 on_wait: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.key = key
        self.path = lock_path(key)
        self.timeout_s = timeout_s
        self.on_wait = on_wait
        self._file: IO[str] | None = None

    def __enter__(self) -> DeviceLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        f = open(self.path, "a+")
        try:
            self._acquire(f)
        except BaseException:
            f.close()
            raise
        f.seek(0)
        f.truncate()
        f.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}))
        f.flush()
        self._file = f
        return self

    def _acquire(self, f: IO[str]) -> None:
        """flock the file, polling while another process holds it, until ``timeout_s``."""
        import fcntl

        deadline = time.monotonic() + self.timeout_s
        waited = False
        while True:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if not waited and self.on_wait:
                    self.on_wait(holder(self.path))
                waited = True
                if time.monotonic() > deadline:
                    raise MeasurementError(f"device {self.key} stayed busy for {self.timeout_s:.0f} s "
                                           f"(held by {describe(holder(self.path))})") from None
                time.sleep(POLL_S)

    def __exit__(self, *exc: object) -> None:
        import fcntl

        if self._file is not None:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
            self._file = None


def holder(path: Path) -> dict[str, Any]:
    """What the lock file says about its holder (empty when it says nothing readable)."""
    try:
        return json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}


def describe(info: dict[str, Any]) -> str:
    """``pid 123 on host, for 4 s`` from a holder record."""
    if not info:
        return "another process"
    since = f", for {time.time() - info['since']:.0f} s" if "since" in info else ""
    return f"pid {info.get('pid', '?')} on {info.get('host', '?')}{since}"
