"""Atomic writes: a full disk is an WriteFailure naming the file and the bytes it needed, with nothing
half-written left behind and the previous file as it was."""
from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from edgeship.errors import WriteFailure
from edgeship.fsutil import atomic_output, atomic_write_bytes, atomic_write_text, temp_owner
from tests import system


def _full_after(limit: int):
    """An os.write that fills a disk with room for ``limit`` bytes."""
    real, written = os.write, [0]

    def write(fd: int, data) -> int:
        if written[0] + len(data) > limit:
            room = limit - written[0]
            if room <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            data = bytes(data[:room])
        n = real(fd, data)
        written[0] += n
        return n

    return write


def test_fsutil_full_disk_names_the_file_and_size_and_keeps_the_previous_file(tmp_path: Path, monkeypatch) -> None:
    dest = tmp_path / "results.json"
    atomic_write_text(dest, "previous")
    monkeypatch.setattr(os, "write", _full_after(1000))
    with pytest.raises(WriteFailure, match=rf"{dest}: no space left on the device while writing it \(5,000 bytes to "
                                          r"write; [\d,]+ bytes free there\)"):
        atomic_write_bytes(dest, b"x" * 5000)
    assert dest.read_text() == "previous" and [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_fsutil_full_disk_inside_an_atomic_output_block_is_an_output_error(tmp_path: Path) -> None:
    dest = tmp_path / "model.onnx"
    dest.write_bytes(b"validated")
    with pytest.raises(WriteFailure, match=r"model.onnx: no space left .*size not known in advance"):
        with atomic_output(dest) as tmp:
            tmp.write_bytes(b"half")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert dest.read_bytes() == b"validated" and [p.name for p in tmp_path.iterdir()] == ["model.onnx"]


def test_fsutil_other_write_errors_stay_what_they_are(tmp_path: Path) -> None:
    with pytest.raises(PermissionError):
        with atomic_output(tmp_path / "x.txt"):
            raise PermissionError(errno.EACCES, "denied")


def test_fsutil_temporary_names_carry_the_writers_pid(tmp_path: Path) -> None:
    seen = []
    with atomic_output(tmp_path / "report.html") as tmp:
        seen.append(tmp.name)
        tmp.write_text("x")
    assert temp_owner(seen[0]) == os.getpid() and seen[0].endswith(".html")
    assert temp_owner("report.html") is None


@pytest.fixture
def small_tmpfs(tmp_path: Path):
    """A 2 MiB tmpfs (mounting needs root; skipped where it cannot be mounted)."""
    mount = tmp_path / "small"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        pytest.skip(system.reason("os", f"cannot mount a small tmpfs here: {proc.stderr.strip() or proc.returncode}"))
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_fsutil_full_disk_on_a_real_small_file_system(small_tmpfs: Path) -> None:
    dest = small_tmpfs / "model.onnx"
    atomic_write_bytes(dest, b"v" * 1000)
    with pytest.raises(WriteFailure, match=r"model.onnx: no space left on the device .*3,145,728 bytes to write"):
        atomic_write_bytes(dest, b"x" * (3 << 20))
    assert dest.read_bytes() == b"v" * 1000 and [p.name for p in small_tmpfs.iterdir()] == ["model.onnx"]
