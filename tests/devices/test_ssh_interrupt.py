"""Ctrl-C while an ssh device (a real sshd on 127.0.0.1) is timing a model: the build stops within
seconds and so does the runner on the device, whose job folder goes too. (Killing the local ssh
client alone would leave the remote runner timing until its deadline: its output goes to a file.)"""
from __future__ import annotations

import os
import signal
import sys
import time

import psutil

from tests.conftest import write_profile
from tests.faults.test_interrupts import interrupt_at
from tests.pipeline.test_faults import ORT


def test_faults_ctrl_c_stops_the_remote_runner_and_removes_its_job_folder(sshd, tiny_project, tmp_path,
                                                                            lock_home) -> None:
    devices = tmp_path / "devices.toml"
    devices.write_text(sshd.device_toml("board"))
    profile = write_profile(tmp_path, ORT)
    profile.write_text(profile.read_text().replace("iterations = 10", "iterations = 2000000"))
    remote = sshd.folder / "remote"
    cmd = [sys.executable, "-m", "edgeship", "build", "--target", str(profile), "--model",
           str(tiny_project / "model.toml"), "--out", str(tmp_path / "out"), "--devices", str(devices),
           "--device", "board", "--db", f"sqlite:///{tmp_path / 'r.db'}"]
    env = {**os.environ, "EDGESHIP_CACHE_DIR": str(tmp_path / "cache"), "XDG_CACHE_HOME": str(lock_home)}
    runners = []

    def remote_runners() -> list[psutil.Process]:
        found = []
        for p in psutil.process_iter(["cmdline", "cwd"]):
            try:
                if (p.info["cwd"] or "").startswith(str(remote)) and "runner.py" in " ".join(p.info["cmdline"] or []):
                    found.append(p)
            except psutil.Error:
                continue
        return found

    def timing_on_the_device(build: object) -> None:
        deadline = time.monotonic() + 60
        while not runners:
            assert time.monotonic() < deadline, "no runner started on the device"
            runners.extend(remote_runners())
            time.sleep(0.1)
        time.sleep(0.5)

    code, err, seconds, _ = interrupt_at(cmd, "measuring", signal.SIGINT, env, timing_on_the_device)
    print(f"\nssh device, SIGINT while measuring: exit {code} {seconds:.2f} s after the signal")
    assert code == 130 and "✗ measure on board" in err and "Traceback" not in err, err[-2000:]
    assert seconds < 10, seconds
    assert runners, "no runner was timing on the device when the signal came"
    deadline = time.monotonic() + 5
    while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in runners):
        assert time.monotonic() < deadline, "the runner on the device is still timing"
        time.sleep(0.1)
    assert not [p for p in remote.glob("job-*")], list(remote.iterdir())
