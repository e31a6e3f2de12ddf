"""Atomic file output: a reader sees the old file or the whole new one, never half of one."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_output(dest: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``dest``; on success it replaces ``dest`` (file or folder)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    # The temporary name keeps the suffix: some writers insist on it (coremltools: .mlpackage).
    fd, name = tempfile.mkstemp(prefix=f".{dest.stem}.tmp-", suffix=dest.suffix, dir=dest.parent)
    os.close(fd)
    tmp = Path(name)
    tmp.unlink()  # the writer creates it (a file or a folder, as it needs)
    try:
        yield tmp
        if dest.is_dir() and not dest.is_symlink():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()


def atomic_write_bytes(dest: Path, data: bytes) -> None:
    """Write ``data`` to ``dest`` atomically."""
    with atomic_output(dest) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())


def atomic_write_text(dest: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``dest`` atomically."""
    atomic_write_bytes(dest, text.encode("utf-8"))


def tree_size(path: Path) -> int:
    """Bytes in a file, or in every file under a folder (an .mlpackage is a folder)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
