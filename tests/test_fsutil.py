"""Atomic writes: a full disk is an WriteFailure naming the file and the bytes it needed, with nothing
half-written left behind and the previous file as it was."""
from __future__ import annotations

import errno
import os
import pwd
import re
import stat
import subprocess
from pathlib import Path

import pytest

from edgeship.errors import OutputError, WriteFailure
from edgeship.fsutil import (
    atomic_output,
    atomic_write_bytes,
    atomic_write_text,
    new_private_folder,
    private_folder,
    temp_owner,
)
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


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_fsutil_new_private_folder_has_a_new_random_name_and_mode_0700(tmp_path: Path) -> None:
    a, b = new_private_folder("edgeship-x-", tmp_path), new_private_folder("edgeship-x-", tmp_path)
    assert a != b and a.parent == tmp_path and a.name.startswith("edgeship-x-")
    assert _mode(a) == 0o700 and os.lstat(a).st_uid == os.geteuid()


def test_fsutil_private_folder_is_made_0700_and_an_own_0755_one_narrowed_to_0700(tmp_path: Path) -> None:
    made = private_folder(tmp_path / "a" / "locks", "the locks folder")
    assert made == tmp_path / "a" / "locks" and _mode(made) == 0o700
    older = tmp_path / "older"
    older.mkdir(mode=0o755)
    older.chmod(0o755)
    (older / "kept").write_text("x")
    assert private_folder(older, "the locks folder") == older and _mode(older) == 0o700
    assert (older / "kept").read_text() == "x"


@pytest.mark.parametrize("setup, problem", [
    ("nobody", "is owned by nobody"),
    ("0777", "is writable by everyone (mode 0777)"),
    ("0775", "is writable by its group (mode 0775)"),
    ("link", "is a symbolic link"),
    ("file", "is not a folder"),
])
def test_fsutil_private_folder_refuses_a_folder_another_user_could_have_filled(tmp_path: Path, setup: str,
                                                                               problem: str) -> None:
    path = tmp_path / "edgeship-ssh-0"
    if setup == "link":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        path.symlink_to(tmp_path / "elsewhere")
    elif setup == "file":
        path.write_text("")
    else:
        path.mkdir()
        path.chmod(0o700 if setup == "nobody" else int(setup, 8))
        if setup == "nobody":
            nobody = pwd.getpwnam("nobody")
            os.chown(path, nobody.pw_uid, nobody.pw_gid)
    before = os.lstat(path)
    with pytest.raises(OutputError, match=f"^the cache folder {re.escape(f'{path}: {problem}')}") as info:
        private_folder(path, "the cache folder")
    assert info.value.exit_code == 2 and os.lstat(path) == before   # refused, left as it was


def test_fsutil_private_folder_refuses_one_anyone_may_rename_away(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # no sticky bit, unlike /tmp
    with pytest.raises(OutputError, match="where anyone may rename it"):
        private_folder(shared / "edgeship", "the cache folder")


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_fsutil_atomic_write_refuses_to_replace_a_device_or_a_pipe(tmp_path, kind) -> None:
    """Run as root, a rename over /dev/null puts a regular file in its place for every process."""
    special = tmp_path / "null"
    if kind == "device":
        if os.geteuid() != 0:
            pytest.skip(system.reason("os", "making a device node needs root"))
        os.mknod(special, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    else:
        os.mkfifo(special)
    with pytest.raises(OutputError, match="not a file edgeship may replace"):
        atomic_write_text(special, "text")
    mode = os.lstat(special).st_mode
    assert stat.S_ISCHR(mode) if kind == "device" else stat.S_ISFIFO(mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]


def test_fsutil_private_folder_never_narrows_what_a_link_swapped_in_after_the_check_points_at(
        tmp_path, monkeypatch) -> None:
    import edgeship.fsutil as fsutil

    mine, victim = tmp_path / "state", tmp_path / "victim"
    mine.mkdir(mode=0o755)
    victim.mkdir(mode=0o755)
    checked = fsutil.folder_problem

    def check_then_swap(path):
        problem = checked(path)
        mine.rmdir()
        mine.symlink_to(victim)  # another process, between the check and the chmod
        return problem

    monkeypatch.setattr(fsutil, "folder_problem", check_then_swap)
    with pytest.raises(OutputError, match="changed while edgeship checked it"):
        private_folder(mine, "a folder")
    assert stat.S_IMODE(victim.stat().st_mode) == 0o755
