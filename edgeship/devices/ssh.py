"""A device reached over SSH (a Jetson, a Raspberry Pi, a Mac): anything with sshd and Python.

The OpenSSH client does the work: key-based only (``BatchMode=yes``), the host key always checked
(``StrictHostKeyChecking=yes`` against the device's ``known_hosts``), a connect timeout, keep-alives
that notice a dropped link, and a timeout on every step. One job is four short connections:

    upload    tar of runner.py, job.json, the artifact and the inputs -> a fresh job folder
    run       python runner.py job.json (the runner checks the artifact's sha256 and stops itself
              at the job's deadline)
    download  result.json, outputs.npz and runner.log, as a tar
    clean     rm -rf the job folder (folders a dropped connection left behind go before the next job)

A lost connection (ssh exit 255, a step timing out) is a TransportError, which the caller retries;
a refused host key or key is a MeasurementError, because retrying cannot fix it.
"""
from __future__ import annotations

import io
import json
import math
import shlex
import subprocess
import tarfile
import tempfile
import uuid
from pathlib import Path
from typing import Any

from edgeship.devices.base import (PROBE, RUNNER, Device, DeviceReport, Job, JobResult, MeasurementError,
                                   TransportError, probe_report)

RESULT_FILES = ("result.json", "outputs.npz", "runner.log")
RUN_MARGIN_S = 30.0      # the runner stops itself at the job's deadline; ssh gets a little longer
CLEAN_TIMEOUT_S = 20.0
NOT_RETRYABLE = {"Host key verification failed": "its host key is not in known_hosts, or has changed",
                 "REMOTE HOST IDENTIFICATION HAS CHANGED": "its host key has changed",
                 "Permission denied": "it refused the key"}


class SshDevice(Device):
    """Runs each job in a fresh folder under the device's ``workdir`` with the device's Python."""

    transport = "ssh"

    def __init__(self, name: str, config: Any) -> None:
        super().__init__(name)
        self.config = config
        self.retries = config.retries
        self.backoff_s = config.backoff_s
        self.lock_timeout_s = config.lock_timeout_s
        self._stale: list[str] = []

    @property
    def address(self) -> str:
        user = f"{self.config.user}@" if self.config.user else ""
        return f"{user}{self.config.host}:{self.config.port}"

    def ssh_args(self, script: str) -> list[str]:
        """The ssh command line that runs ``script`` with ``sh`` on the device."""
        c = self.config
        args = [c.ssh, "-p", str(c.port), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                "-o", f"ConnectTimeout={math.ceil(c.connect_timeout_s)}",
                "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"]
        if c.known_hosts:
            args += ["-o", f"UserKnownHostsFile={c.known_hosts}"]
        if c.identity:
            args += ["-i", str(c.identity), "-o", "IdentitiesOnly=yes"]
        if c.user:
            args += ["-l", c.user]
        return args + [c.host, "--", "sh -c " + shlex.quote(script)]

    def run_job(self, job: Job, workdir: Path) -> JobResult:
        self._clean_stale()
        remote = f"{self.config.workdir}/job-{uuid.uuid4().hex[:12]}"
        workdir.mkdir(parents=True, exist_ok=True)
        for stale in RESULT_FILES:
            (workdir / stale).unlink(missing_ok=True)
        try:
            self._upload(self._job_files(job, workdir), remote)
            code = self._run_runner(job, remote)
            self._download(remote, workdir)
        finally:
            notes = self._remove(remote)
        return self._read(workdir, code, notes)

    def check(self) -> DeviceReport:
        remote = f"{self.config.workdir}/probe-{uuid.uuid4().hex[:12]}"
        try:
            self._upload({"probe.py": PROBE, "runner.py": RUNNER}, remote)
            proc = self._ssh(f"cd {shlex.quote(remote)} && {shlex.quote(self.config.python)} probe.py .",
                             self.config.transfer_timeout_s, "probe")
        except MeasurementError as e:
            return DeviceReport(self.name, self.transport, self.address, reachable=False, error=str(e))
        finally:
            self._remove(remote)
        if proc.returncode != 0:
            return DeviceReport(self.name, self.transport, self.address, reachable=True,
                                error=f"{self.config.python} probe.py exited {proc.returncode}: "
                                      f"{proc.stderr.decode(errors='replace').strip()[-300:]}")
        return probe_report(self, proc.stdout.decode(errors="replace"))

    def _job_files(self, job: Job, workdir: Path) -> dict[str, Path]:
        files = {"runner.py": RUNNER, "inputs.npz": job.inputs}
        artifact = None
        if job.artifact is not None:
            artifact = job.artifact.name
            files[artifact] = job.artifact
        (workdir / "job.json").write_text(json.dumps(job.document(artifact, "inputs.npz")))
        files["job.json"] = workdir / "job.json"
        return files

    def _run_runner(self, job: Job, remote: str) -> int:
        script = f"cd {shlex.quote(remote)} && exec {shlex.quote(self.config.python)} runner.py job.json > runner.log 2>&1"
        return self._ssh(script, job.timeout_s + RUN_MARGIN_S, "run").returncode

    def _upload(self, files: dict[str, Path], remote: str) -> None:
        with tempfile.TemporaryFile() as tar_file:
            with tarfile.open(fileobj=tar_file, mode="w") as tar:
                for name, path in files.items():
                    tar.add(str(path), arcname=name)
            tar_file.seek(0)
            q = shlex.quote(remote)
            self._ssh(f"mkdir -p {q} && tar -xf - -C {q}", self.config.transfer_timeout_s, "upload",
                      stdin=tar_file, check=True)

    def _download(self, remote: str, workdir: Path) -> None:
        names = " ".join(RESULT_FILES)
        script = (f"cd {shlex.quote(remote)} && set -- && for f in {names}; do "
                  f'[ -f "$f" ] && set -- "$@" "$f"; done; tar -cf - "$@"')
        proc = self._ssh(script, self.config.transfer_timeout_s, "download", check=True)
        with tarfile.open(fileobj=io.BytesIO(proc.stdout), mode="r:") as tar:
            tar.extractall(workdir, filter="data")

    def _remove(self, remote: str) -> list[str]:
        """Remove a job folder; when that fails, remember it for the next job and say so."""
        try:
            self._ssh(f"rm -rf {shlex.quote(remote)}", CLEAN_TIMEOUT_S, "clean", check=True)
            return []
        except MeasurementError as e:
            self._stale.append(remote)
            return [f"could not remove {remote} on the device ({e}); it is removed before the next job"]

    def _clean_stale(self) -> None:
        stale, self._stale = self._stale, []
        for remote in stale:
            self._remove(remote)

    def _ssh(self, script: str, timeout: float, step: str, stdin: Any = None,
             check: bool = False) -> subprocess.CompletedProcess:
        try:
            proc = subprocess.run(self.ssh_args(script), stdin=stdin if stdin is not None else subprocess.DEVNULL,
                                  capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TransportError(f"{step} on {self.address} did not finish within {timeout:.0f} s") from None
        except FileNotFoundError:
            raise MeasurementError(f"the ssh client {self.config.ssh!r} is not installed") from None
        if proc.returncode == 255:
            raise self._connection_error(step, proc.stderr.decode(errors="replace"))
        if check and proc.returncode != 0:
            raise MeasurementError(f"{step} on {self.address} failed (exit {proc.returncode}): "
                                   f"{proc.stderr.decode(errors='replace').strip()[-300:]}")
        return proc

    def _connection_error(self, step: str, stderr: str) -> MeasurementError:
        tail = " | ".join(stderr.strip().splitlines()[-2:]) or "no message"
        for marker, why in NOT_RETRYABLE.items():
            if marker in stderr:
                return MeasurementError(f"ssh to {self.address} refused: {why} ({tail})")
        return TransportError(f"ssh to {self.address} failed during {step} (connection lost or refused): {tail}")

    def _read(self, workdir: Path, code: int, notes: list[str]) -> JobResult:
        if not (workdir / "result.json").exists():
            log = (workdir / "runner.log")
            tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
            raise MeasurementError(f"runner exited {code} without a result: {' | '.join(tail)}")
        result = JobResult.read(workdir)
        if not result.document.get("ok"):
            raise MeasurementError(result.document.get("error", "runner failed"))
        result.notes += notes
        return result
