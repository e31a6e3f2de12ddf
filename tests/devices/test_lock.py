"""The per-device OS lock: a second holder waits, a dead holder's lock is free, a wait can time out."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from edgeship.devices.base import MeasurementError
from edgeship.devices.lock import DeviceLock, lock_path

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
