"""Locks between edgeship processes: an OS file lock (``fcntl.flock``) on a file that says who holds
it. The kernel drops the lock when its holder exits, even on ``kill -9``, so a stale lock never
outlives a killed process. The file holds the holder's pid, host and start time, for the message a
waiting process prints.

A lock file may be removed by its holder when it lets go (``remove=True``: the build folder's lock,
so a folder holds no lock file between builds). A waiter that then gets the lock holds it on a file
that is no longer there, so every acquisition checks that the path still names the locked file and
starts again when it does not.
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from edgeship import stopping

POLL_S = 0.2


class Busy(Exception):
    """The lock is held by another process and the caller did not wait (or waited long enough)."""

    def __init__(self, holder: Mapping[str, object]) -> None:
        super().__init__(describe(holder))
        self.holder = holder


class FileLock:
    """``with FileLock(path):`` holds the lock; while another process holds it, calls ``on_wait`` once
    with the holder's details and polls, until ``timeout_s`` (None: no limit; 0: do not wait), then
    raises Busy."""

    def __init__(self, path: Path, timeout_s: float | None = None,
                 on_wait: Callable[[dict[str, Any]], None] | None = None, remove: bool = False) -> None:
        self.path = Path(path)
        self.timeout_s = timeout_s
        self.on_wait = on_wait
        self.remove = remove
        self._file: IO[str] | None = None

    def __enter__(self) -> FileLock:
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        waited = False
        while True:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            f = open(self.path, "a+")
            try:
                held = self._try(f)
            except BaseException:
                f.close()
                raise
            if held:
                break
            f.close()
            if not waited and self.on_wait and self.timeout_s != 0:
                self.on_wait(holder(self.path))
            waited = True
            if deadline is not None and time.monotonic() >= deadline:
                raise Busy(holder(self.path))
            stopping.pause(POLL_S)  # a build being interrupted stops waiting
        f.seek(0)
        f.truncate()
        f.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}))
        f.flush()
        self._file = f
        return self

    def _try(self, f: IO[str]) -> bool:
        """Lock ``f`` without waiting; False when another process holds it or the file was removed."""
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        try:
            same = os.stat(self.path).st_ino == os.fstat(f.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # its holder removed it while letting go: lock the file that is there now
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
        return same

    def __exit__(self, *exc: object) -> None:
        if self._file is None:
            return
        if self.remove:
            self.path.unlink(missing_ok=True)  # still held: no one can have locked the new file yet
        fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
        self._file.close()
        self._file = None


def holder(path: Path) -> dict[str, object]:
    """What the lock file says about its holder (empty when it says nothing readable)."""
    try:
        doc = json.loads(Path(path).read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def describe(info: Mapping[str, object]) -> str:
    """``pid 123 on host, for 4 s`` from a holder record."""
    if not info:
        return "another process"
    started = info.get("since")
    since = f", for {time.time() - started:.0f} s" if isinstance(started, (int, float)) else ""
    return f"pid {info.get('pid', '?')} on {info.get('host', '?')}{since}"
