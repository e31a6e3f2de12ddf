"""The per-device OS lock: a second holder waits, a dead holder's lock is free, a wait can time out."""
from __future__ import annotations

import os
import pwd
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from edgeship.devices.base import MeasurementError
from edgeship.devices.lock import DeviceLock, lock_path
from edgeship.errors import OutputError

HOLD = """
import sys, time
from pathlib import Path
from edgeship.devices.lock import DeviceLock
with DeviceLock(sys.argv[1]):
    Path(sys.argv[2]).write_text("held")
    while not Path(sys.argv[3]).exists():
        time.sleep(0.05)
"""


def hold_in_another_process(key: str, tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """A separate process (another build) that holds the lock until ``release`` appears."""
    held, release = tmp_path / "held", tmp_path / "release"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, key, str(held), str(release)], env=os.environ.copy())
    deadline = time.monotonic() + 60
    while not held.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "holder did not start"
        time.sleep(0.05)
    return proc, release


def test_device_lock_second_holder_waits_until_the_first_releases(lock_home, tmp_path) -> None:
    proc, release = hold_in_another_process("ssh-nvidia@orin:22", tmp_path)
    waited_for: list[dict] = []
    acquired = threading.Event()

    def second_build() -> None:
        with DeviceLock("ssh-nvidia@orin:22", on_wait=waited_for.append):
            acquired.set()

    thread = threading.Thread(target=second_build)
    thread.start()
    assert not acquired.wait(1.0)  # blocked while the other process holds the device
    release.touch()
    assert acquired.wait(30) and proc.wait(30) == 0
    thread.join()
    assert len(waited_for) == 1 and waited_for[0]["pid"] == proc.pid


def test_device_lock_of_a_killed_holder_is_free(lock_home, tmp_path) -> None:
    proc, _ = hold_in_another_process("adb-38011FDJH00ABC", tmp_path)
    proc.kill()
    proc.wait()
    with DeviceLock("adb-38011FDJH00ABC", timeout_s=5):
        pass


def test_device_lock_wait_times_out_naming_the_holder(lock_home, tmp_path) -> None:
    proc, release = hold_in_another_process("local-vm", tmp_path)
    try:
        with pytest.raises(MeasurementError, match=rf"stayed busy for 0 s \(held by pid {proc.pid} on "):
            with DeviceLock("local-vm", timeout_s=0.3):
                pass
    finally:
        release.touch()
        proc.wait(30)


def test_device_lock_files_live_under_the_cache_dir_one_per_key(lock_home) -> None:
    a, b = lock_path("ssh-u@h:22"), lock_path("ssh-u@h_22")
    assert a.parent == lock_home / "edgeship" / "locks" and a != b and a.name.startswith("ssh-u_h_22-")


@pytest.mark.parametrize("whose", ["edgeship", "locks"])
def test_device_lock_refuses_a_lock_folder_another_user_made_first(lock_home, tmp_path, whose) -> None:
    """With $XDG_CACHE_HOME (or ~/.cache) shared, another user's folder there, open to everyone, with
    their symbolic link named as the device's lock file: edgeship writes nothing through it."""
    target = tmp_path / "their-choice.txt"
    target.write_text("kept")
    lock = lock_path("ssh-u@h:22")
    lock.parent.mkdir(parents=True)
    lock.symlink_to(target)
    theirs = lock_home / "edgeship" if whose == "edgeship" else lock.parent
    theirs.chmod(0o777)
    nobody = pwd.getpwnam("nobody")
    os.chown(theirs, nobody.pw_uid, nobody.pw_gid)
    with pytest.raises(OutputError, match=f"{theirs}: is owned by nobody") as info:
        with DeviceLock("ssh-u@h:22", timeout_s=1):
            pass
    assert info.value.exit_code == 2 and target.read_text() == "kept"
    assert stat.S_IMODE(os.lstat(theirs).st_mode) == 0o777   # refused, not changed


def test_device_lock_folders_are_made_private(lock_home) -> None:
    with DeviceLock("local-vm", timeout_s=1):
        pass
    for folder in (lock_home / "edgeship", lock_path("local-vm").parent):
        assert stat.S_IMODE(os.lstat(folder).st_mode) == 0o700
