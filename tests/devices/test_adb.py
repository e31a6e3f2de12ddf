"""The adb transport: the commands it sends and how it reads a run.

No Android device is attached here, so ``adb`` is a stand-in script that records every command
line and answers with recorded outputs of the real benchmark programs (tests/fixtures/native/).
What is tested is edgeship's side: serial selection, push, shell command, logcat, cleanup,
parsing, retries; not a phone's timings.
"""
from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from edgeship.devices import Job
from edgeship.devices.config import load_devices
from edgeship.pipeline.validate import measure
from edgeship.profile import LatencySettings
from tests.devices.test_native import FIXTURES

FAKE_ADB = textwrap.dedent(f"""\
    #!{sys.executable}
    import json, os, sys
    args = sys.argv[1:]
    with open(os.environ["FAKE_ADB_LOG"], "a") as f:
        f.write(json.dumps(args) + "\\n")
    if os.environ.get("FAKE_ADB_OFFLINE"):
        sys.stderr.write("error: device '%s' not found\\n" % args[1])
        sys.exit(1)
    cmd = args[2:]
    if cmd == ["get-state"]:
        print("device")
    elif cmd[0] == "shell" and cmd[1].startswith("getprop"):
        print({{"ro.build.version.release": "14", "ro.product.cpu.abi": "arm64-v8a",
               "ro.product.model": "Pixel 8"}}[cmd[1].split()[1]])
    elif cmd[0] == "shell" and cmd[1].startswith("df"):
        print("Filesystem 1K-blocks Used Available Use% Mounted on")
        print("/dev/block/dm-48 115023040 50233152 64658816 44% /data")
    elif cmd[0] == "shell" and cmd[1].startswith("ls"):
        sys.exit(0 if "executor_runner" in cmd[1] else 1)
    elif cmd[0] == "shell" and "/bin/" in cmd[1]:
        sys.stdout.write(open(os.environ["FAKE_ADB_STDOUT"]).read())
    elif cmd[:2] == ["logcat", "-d"]:
        sys.stdout.write(open(os.environ["FAKE_ADB_LOGCAT"]).read())
    """)


@pytest.fixture
def adb(tmp_path, monkeypatch):
    """A devices file with one adb device whose ``adb`` is the recording stand-in."""
    script = tmp_path / "adb"
    script.write_text(FAKE_ADB)
    script.chmod(0o755)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    monkeypatch.setenv("FAKE_ADB_LOG", str(tmp_path / "adb.log"))
    monkeypatch.setenv("FAKE_ADB_STDOUT", str(empty))
    monkeypatch.setenv("FAKE_ADB_LOGCAT", str(empty))
    devices = tmp_path / "devices.toml"
    devices.write_text(textwrap.dedent(f"""\
        [devices.pixel8]
        transport = "adb"
        serial = "38011FDJH00ABC"
        adb = "{script}"
        retries = 1
        backoff_s = 0.5
        [devices.pixel8.programs]
        executorch = "/data/local/tmp/bin/executor_runner"
        "pytorch-mobile" = "/data/local/tmp/bin/speed_benchmark_torch"
        """))
    return load_devices(devices).device("pixel8")


def calls(tmp_path: Path) -> list[list[str]]:
    return [json.loads(line) for line in (tmp_path / "adb.log").read_text().splitlines()]


def job(tmp_path: Path, runtime: str, suffix: str) -> Job:
    artifact = tmp_path / f"model{suffix}"
    artifact.write_bytes(b"artifact")
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, image=np.zeros((4, 3, 16, 16), np.float32))
    return Job(runtime=runtime, artifact=artifact, sha256=None, inputs=inputs, input_names=["image"], batch=1,
               warmup=5, iterations=3, threads=None, timeout_s=60)


def test_adb_executorch_job_pushes_runs_reads_logcat_and_cleans_up(adb, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_ADB_LOGCAT", str(FIXTURES / "executor_runner_mv2_xnnpack.log"))
    result = adb.run_job(job(tmp_path, "executorch", ".pte"), tmp_path / "w")
    sent = calls(tmp_path)
    assert all(c[:2] == ["-s", "38011FDJH00ABC"] for c in sent)
    remote = sent[0][3].split()[-1]
    assert [c[2:] for c in sent] == [
        ["shell", f"mkdir -p {remote}"], ["push", str(tmp_path / "model.pte"), f"{remote}/model.pte"],
        ["logcat", "-c"],
        ["shell", f"echo $$ > {remote}/runner.pid; exec /data/local/tmp/bin/executor_runner "
                  f"--model_path={remote}/model.pte --num_executions=8"],
        ["logcat", "-d", "-s", "ExecuTorch:I"], ["shell", f"rm -rf {remote}"]]
    assert remote.startswith("/data/local/tmp/edgeship/job-")
    assert result.document["summary_ms"] == {"mean_ms": pytest.approx(15.013292)} and result.outputs == []
    assert any(n.startswith("accuracy not measured on pixel8") for n in result.notes)


def test_adb_pytorch_mobile_job_times_every_run_from_speed_benchmark_torch(adb, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_ADB_STDOUT", str(FIXTURES / "speed_benchmark_torch_report_pep.log"))
    m = measure(adb, job(tmp_path, "pytorch-mobile", ".ptl"), LatencySettings(), tmp_path / "w")
    run = next(c for c in calls(tmp_path) if "speed_benchmark_torch" in " ".join(c))
    assert "--input_dims=1,3,16,16 --input_type=float --warmup=5 --iter=3 --report_pep=true" in run[3]
    assert m.latency.p50_ms == pytest.approx(583.396) and m.latency.runtime == "pytorch-mobile (speed_benchmark_torch)"
    assert m.outputs is None and m.latency.peak_rss_mb is None
    assert not any(c[2] == "logcat" for c in calls(tmp_path))  # speed_benchmark_torch prints to stdout


def test_adb_device_that_went_offline_is_retried_then_recorded_as_failed(adb, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_ADB_OFFLINE", "1")
    delays: list[float] = []
    m = measure(adb, job(tmp_path, "executorch", ".pte"), LatencySettings(), tmp_path / "w", sleep=delays.append)
    assert delays == [0.5] and m.latency.attempts == 2 and m.latency.mean_ms is None
    assert "not found" in m.latency.notes[-1] and m.latency.notes[-1].startswith("not measured: adb mkdir")


def test_adb_device_skips_what_it_has_no_program_for(adb, tmp_path) -> None:
    onnx = job(tmp_path, "onnxruntime", ".onnx")
    assert "no native benchmark program runs onnxruntime on Android" in adb.skip_reason(onnx, None)
    assert "only on the host" in adb.skip_reason(job(tmp_path, "eager", ".pt"), None)
    assert adb.skip_reason(job(tmp_path, "executorch", ".pte"), "needs macOS") is None


def test_adb_check_reports_android_version_abi_disk_and_programs(adb) -> None:
    report = adb.check()
    assert report.reachable and report.facts["os"] == "14" and report.facts["arch"] == "arm64-v8a"
    assert report.facts["free_disk_bytes"] == 64658816 * 1024
    assert report.runtimes == {"executorch": "program at /data/local/tmp/bin/executor_runner",
                               "pytorch-mobile": "missing: no /data/local/tmp/bin/speed_benchmark_torch on the device"}


LOOPBACK_ADB = textwrap.dedent(f"""\
    #!{sys.executable}
    # A stand-in for adb whose "device" is this machine: shell commands run with sh here, push copies.
    import os, shutil, subprocess, sys
    cmd = sys.argv[3:]
    if cmd[0] == "push":
        shutil.copy(cmd[1], cmd[2])
    elif cmd[0] == "shell":
        sys.exit(subprocess.run(["sh", "-c", cmd[1]]).returncode)
    """)


def test_adb_cancel_kills_the_program_running_on_the_device_and_removes_its_folder(tmp_path) -> None:
    """Ctrl-C during a measurement: the local adb client going away does not stop the program on the
    phone (adbd may keep it running), so cancel() kills it there through the pid its shell wrote, as
    the ssh device does. The device is a loopback stand-in (shell commands run by sh on this machine):
    what is tested is the shell edgeship sends, and that the program really stops."""
    import threading
    import time

    from edgeship.devices.base import MeasurementError

    adb = tmp_path / "adb"
    adb.write_text(LOOPBACK_ADB)
    adb.chmod(0o755)
    program = tmp_path / "bin" / "executor_runner"
    program.parent.mkdir()
    program.write_text("#!/bin/sh\nexec sleep 600\n")  # a benchmark that runs long
    program.chmod(0o755)
    devices = tmp_path / "devices.toml"
    devices.write_text(f'[devices.phone]\ntransport = "adb"\nserial = "loop"\nadb = "{adb}"\n'
                       f'workdir = "{tmp_path / "device"}"\n[devices.phone.programs]\nexecutorch = "{program}"\n')
    (tmp_path / "device").mkdir()
    device = load_devices(devices).device("phone")
    failure: list[BaseException] = []
    worker = threading.Thread(target=lambda: _run_catching(device, job(tmp_path, "executorch", ".pte"), tmp_path,
                                                           failure))
    worker.start()
    deadline = time.monotonic() + 30
    while not list((tmp_path / "device").glob("job-*/runner.pid")) and time.monotonic() < deadline:
        time.sleep(0.05)
    pid_files = list((tmp_path / "device").glob("job-*/runner.pid"))
    assert pid_files, "the program's shell wrote no pid file: cancel() could not find the program"

    def program() -> bytes:  # the shell writes its pid, then execs the program (a script that execs sleep)
        pid = pid_files[0].read_text().strip()
        cmdline = Path(f"/proc/{pid}/cmdline")
        return cmdline.read_bytes().split(b"\0")[0] if pid and cmdline.exists() else b""
    while program() != b"sleep" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert program() == b"sleep"  # the pid the shell wrote is the program's, exec'ed
    pid = int(pid_files[0].read_text())
    began = time.monotonic()
    device.cancel()
    worker.join(30)
    assert not worker.is_alive() and time.monotonic() - began < 5
    assert not Path(f"/proc/{pid}").exists() and not any((tmp_path / "device").iterdir())
    assert len(failure) == 1 and isinstance(failure[0], MeasurementError) and "exited" in str(failure[0])


def _run_catching(device, job_: Job, tmp_path: Path, failure: list[BaseException]) -> None:
    try:
        device.run_job(job_, tmp_path / "w")
    except BaseException as e:  # noqa: BLE001 - the test reads it
        failure.append(e)
