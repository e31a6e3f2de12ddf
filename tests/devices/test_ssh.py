"""The ssh transport against a real OpenSSH server on 127.0.0.1 (throwaway keys), end to end."""
from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from edgeship.devices import Job, LocalDevice
from edgeship.devices.base import MeasurementError, TransportError
from edgeship.devices.config import load_devices
from edgeship.devices.hashing import sha256_file
from edgeship.pipeline.validate import measure
from edgeship.profile import LatencySettings
from tests.devices import sshd as sshd_helper
from tests.devices.conftest import dropping_python


@pytest.fixture
def ssh_device(sshd, tmp_path: Path, request):
    """A factory of ssh devices on the test sshd; their shared connections are closed afterwards."""
    def make(name: str = "board", **extra):
        path = tmp_path / f"{name}.toml"
        path.write_text(sshd.device_toml(name, **extra))
        device = load_devices(path).device(name)
        request.addfinalizer(device.close)
        return device
    return make


def job_for(artifact: Path, inputs: Path) -> Job:
    return Job(runtime="pytorch-mobile", artifact=artifact, sha256=sha256_file(artifact), inputs=inputs,
               input_names=["image"], batch=1, warmup=1, iterations=5, threads=1, timeout_s=120)


def remote_jobs(sshd) -> list[Path]:
    remote = sshd.folder / "remote"
    return sorted(remote.iterdir()) if remote.exists() else []


def test_ssh_device_check_reports_the_remote_python_and_runtimes(sshd, ssh_device, tmp_path) -> None:
    report = ssh_device().check()
    assert report.reachable and report.error is None, report
    assert sys.executable in report.facts["python"] and report.facts["free_disk_bytes"] > 0
    assert report.runtimes["onnxruntime"].startswith("1.") and report.runtimes["executorch"] == "1.5.1"
    assert remote_jobs(sshd) == []


def test_ssh_run_job_returns_the_same_outputs_as_a_local_run_and_cleans_up(sshd, ssh_device, tmp_path, ptl,
                                                                            inputs) -> None:
    job = job_for(ptl, inputs)
    remote = ssh_device().run_job(job, tmp_path / "via-ssh")
    local = LocalDevice().run_job(job, tmp_path / "local")
    assert remote.document["ok"] and len(remote.document["timings_ms"]) == 5
    np.testing.assert_array_equal(remote.outputs[0], local.outputs[0])
    assert remote.outputs[0].shape[0] == 5 and remote_jobs(sshd) == []


def test_ssh_runner_refuses_an_artifact_whose_sha256_differs(sshd, ssh_device, tmp_path, ptl, inputs) -> None:
    job = job_for(ptl, inputs)
    job.sha256 = "0" * 64
    with pytest.raises(MeasurementError, match="does not match the expected") as info:
        ssh_device().run_job(job, tmp_path / "w")
    assert not isinstance(info.value, TransportError) and remote_jobs(sshd) == []


def test_ssh_refuses_a_device_whose_host_key_is_not_known(sshd, ssh_device, tmp_path, ptl, inputs) -> None:
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"[127.0.0.1]:{sshd.port} {' '.join(Path(str(other) + '.pub').read_text().split()[:2])}\n")
    device = ssh_device(known_hosts=str(wrong))
    with pytest.raises(MeasurementError, match="host key") as info:
        device.run_job(job_for(ptl, inputs), tmp_path / "w")
    assert not isinstance(info.value, TransportError)  # retrying cannot fix a host key
    assert device.check().reachable is False


def test_ssh_job_is_retried_after_the_connection_drops_mid_run(sshd, ssh_device, tmp_path, ptl, inputs) -> None:
    device = ssh_device(python=str(dropping_python(tmp_path, times=1)), retries=2, backoff_s=0.1)
    delays: list[float] = []
    m = measure(device, job_for(ptl, inputs), LatencySettings(), tmp_path / "w", sleep=delays.append)
    assert m.latency.p50_ms > 0 and m.latency.attempts == 2 and delays == [0.1]
    assert "attempt 1 failed: ssh to" in m.latency.notes[0] and m.outputs[0].shape[0] == 5
    assert remote_jobs(sshd) == []


def test_ssh_device_that_keeps_dropping_gets_a_failure_record(sshd, ssh_device, tmp_path, ptl, inputs) -> None:
    device = ssh_device(python=str(dropping_python(tmp_path, times=99)), retries=2, backoff_s=0.1)
    delays: list[float] = []
    m = measure(device, job_for(ptl, inputs), LatencySettings(), tmp_path / "w", sleep=delays.append)
    lat = m.latency
    assert m.outputs is None and lat.attempts == 3 and delays == [0.1, 0.2]
    assert lat.p50_ms is None and lat.mean_ms is None and lat.cv is None
    assert lat.notes[-1].startswith("not measured: ssh to") and "gave up after 3 attempts" in lat.notes[-1]
    assert remote_jobs(sshd) == []


def test_ssh_runs_an_openvino_ir_folder_checked_by_its_sha256_and_labelled_by_what_the_plugin_ran(
        sshd, ssh_device, tmp_path, tiny_model, inputs) -> None:
    from edgeship.devices.hashing import sha256_path
    from tests.backends.openvino.test_lower import _lower

    artifact, _ = _lower(tiny_model, tmp_path / "ov" / "model.openvino")
    job = Job(runtime="openvino", artifact=artifact.path, sha256=sha256_path(artifact.path), inputs=inputs,
              input_names=["image"], batch=1, warmup=1, iterations=5, threads=1, timeout_s=120,
              options={"performance_hint": "LATENCY"})
    remote = ssh_device().run_job(job, tmp_path / "via-ssh")
    local = LocalDevice().run_job(job, tmp_path / "local")
    assert remote.document["ok"] and remote.document["runtime_version"].endswith(", f32)")
    np.testing.assert_array_equal(remote.outputs[0], local.outputs[0])
    (artifact.path / "model.bin").write_bytes(b"0" + (artifact.path / "model.bin").read_bytes()[1:])
    with pytest.raises(MeasurementError, match="sha256"):
        ssh_device().run_job(job, tmp_path / "changed")
    assert remote_jobs(sshd) == []


@pytest.fixture
def attacker_master(sshd, tmp_path: Path, monkeypatch):
    """Another local user's trap (simulated as ``nobody``): the folder of edgeship's old fixed control-socket
    name (``$TMPDIR/edgeship-ssh-<uid>``) made first, mode 0777, and in it an ssh master on the socket name
    ssh would give the test sshd, connected to a server of theirs that answers every command with HIJACKED."""
    temp = Path(tempfile.mkdtemp(prefix="es-", dir="/tmp"))  # short: a socket path has at most 107 characters
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    theirs = sshd_helper.start(tmp_path / "attacker", extra_config="ForceCommand echo HIJACKED\n")
    fixed = temp / f"edgeship-ssh-{os.getuid()}"
    fixed.mkdir()
    fixed.chmod(0o777)
    nobody = pwd.getpwnam("nobody")
    os.chown(fixed, nobody.pw_uid, nobody.pw_gid)
    name = subprocess.run(["ssh", "-G", "-o", "ControlPath=%C", "-p", str(sshd.port), "-l", sshd.user, "127.0.0.1"],
                          capture_output=True, text=True, check=True).stdout.split("controlpath ")[1].split()[0]
    master = subprocess.Popen(["ssh", "-M", "-N", "-o", f"ControlPath={fixed / name}", "-o", "BatchMode=yes",
                               "-o", f"UserKnownHostsFile={theirs.known_hosts}", "-i", str(theirs.identity),
                               "-p", str(theirs.port), "-l", theirs.user, "127.0.0.1"], stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while not (fixed / name).exists():
        assert master.poll() is None and time.monotonic() < deadline, "the attacker's master did not start"
        time.sleep(0.05)
    os.chown(fixed / name, nobody.pw_uid, nobody.pw_gid, follow_symlinks=False)
    yield fixed
    master.terminate()
    master.wait(10)
    theirs.stop()
    shutil.rmtree(temp, ignore_errors=True)


def test_ssh_never_uses_a_master_another_user_put_at_the_old_fixed_socket_folder(sshd, ssh_device,
                                                                                 attacker_master) -> None:
    device = ssh_device()
    proc = subprocess.run(device.ssh_args("echo board"), capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert proc.stdout.strip() == "board", proc.stdout + proc.stderr   # the test sshd, not the attacker's
    socket = Path(next(a.split("=", 1)[1] for a in device.ssh_args("true") if a.startswith("ControlPath=")))
    folder = os.lstat(socket.parent)
    assert socket.parent != attacker_master and socket.parent.name.startswith("edgeship-ssh-")
    assert folder.st_uid == os.geteuid() and stat.S_IMODE(folder.st_mode) == 0o700
    assert stat.S_ISSOCK(os.lstat(socket).st_mode)   # our own master, in our own folder


@pytest.mark.parametrize("how", ["0777", "nobody"])
def test_ssh_refuses_a_workdir_others_could_swap_job_files_in(sshd, ssh_device, tmp_path, ptl, inputs, how) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777 if how == "0777" else 0o755)
    if how == "nobody":
        nobody = pwd.getpwnam("nobody")
        os.chown(shared, nobody.pw_uid, nobody.pw_gid)
    device = ssh_device(workdir=str(shared))
    with pytest.raises(MeasurementError, match=f"workdir {shared} on .* is a link, another user") as info:
        device.run_job(job_for(ptl, inputs), tmp_path / "w")
    assert not isinstance(info.value, TransportError) and list(shared.iterdir()) == []
    assert "workdir" in device.check().error


def test_ssh_job_folder_is_private_to_the_login_user(sshd, ssh_device, tmp_path, ptl, inputs) -> None:
    device = ssh_device(python=str(tmp_path / "python"))
    (tmp_path / "python").write_text(f"#!/bin/sh\nstat -c %a . > {tmp_path / 'mode'}\nexec {sys.executable} \"$@\"\n")
    (tmp_path / "python").chmod(0o755)
    assert device.run_job(job_for(ptl, inputs), tmp_path / "w").document["ok"]
    assert (tmp_path / "mode").read_text().strip() == "700"
