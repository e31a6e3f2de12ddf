"""A device reached over SSH (a Jetson, a Raspberry Pi, a Mac): anything with sshd and Python.

The OpenSSH client does the work: key-based only (``BatchMode=yes``), the host key always checked
(``StrictHostKeyChecking=yes`` against the device's ``known_hosts``), a connect timeout, keep-alives
that notice a dropped link, and a timeout on every step. A job is two sessions:

    send + run       a tar of runner.py (with protocol.py, hashing.py and the other files it imports),
                     job.json, the artifact and the inputs unpacked into a new job folder (mode 0700, in
                     a workdir only the login user can write to: refused otherwise), then
                     python runner.py job.json (the runner checks the artifact's sha256 and stops
                     itself at the job's deadline)
    fetch + clean    result.json, outputs.npz and runner.log back as a tar, then rm -rf the folder
                     (a folder a dropped connection left behind goes before the next job)

The sessions share one connection (OpenSSH ``ControlMaster``; ``multiplex = false`` turns it off),
which the scheduler closes when the device's last job is done. Its socket lives in a folder this
process makes with a random name and mode 0700, never under a fixed name in ``/tmp``: ssh takes any
master listening on its ``ControlPath``, so another user's master there would carry the jobs to a
host of theirs, past the host key check. A lost connection (ssh exit 255, a step timing out) is a
TransportError, which the caller retries with a new connection; a refused host key or key is a
MeasurementError, because retrying cannot fix it.
"""
from __future__ import annotations

import atexit
import functools
import hashlib
import io
import json
import math
import shlex
import shutil
import subprocess
import tarfile
import tempfile
import uuid
from pathlib import Path
from typing import Any

from edgeship.devices.base import (
    PROBE_FILES,
    RUNNER_FILES,
    DeviceReport,
    Job,
    JobResult,
    MeasurementError,
    RemoteDevice,
    TransportError,
    pid_then_exec,
    probe_report,
)
from edgeship.fsutil import new_private_folder

RESULT_FILES = ("result.json", "outputs.npz", "runner.log")
UNPACK_FAILED = 97       # the exit status of a send + run whose mkdir or tar failed
NOT_OWN_WORKDIR = 98     # ... whose workdir is a link, another user's, or writable by its group or others
RUN_MARGIN_S = 30.0      # the runner stops itself at the job's deadline; ssh gets a little longer
CLEAN_TIMEOUT_S = 20.0
CONTROL_PERSIST_S = 15
NOT_RETRYABLE = {"Host key verification failed": "its host key is not in known_hosts, or has changed",
                 "REMOTE HOST IDENTIFICATION HAS CHANGED": "its host key has changed",
                 "Permission denied": "it refused the key"}


@functools.cache
def control_folder() -> Path:
    """This process's folder for ssh control sockets: new, random name, mode 0700, removed at exit."""
    folder = new_private_folder("edgeship-ssh-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def own_folder(folder: str) -> str:
    """A sh condition that makes ``folder`` when missing and holds when it is a real folder of the login
    user that its group and others cannot write to (``ls -ld``: no w in the group's or others' place)."""
    q = shlex.quote(folder)
    return (f"mkdir -p {q} && [ -d {q} ] && [ ! -h {q} ] && [ -O {q} ] && "
            f"case $(ls -ld {q}) in ?????w*|????????w*) false;; esac")


class SshDevice(RemoteDevice):
    """Runs each job in a fresh folder under the device's ``workdir`` with the device's Python."""

    transport = "ssh"

    def __init__(self, name: str, config: Any) -> None:
        super().__init__(name, config)
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
        return args + self._multiplex() + ["--", c.host, "sh -c " + shlex.quote(script)]  # no host read as an option

    def shell_args(self, script: str) -> list[str]:
        return self.ssh_args(script)

    def close(self) -> None:
        """Stop the shared connection, if one is open (``ssh -O exit``)."""
        if self.config.multiplex:
            base = self.ssh_args("true")[:-3]
            subprocess.run(base + ["-O", "exit", "--", self.config.host], capture_output=True, timeout=CLEAN_TIMEOUT_S,
                           stdin=subprocess.DEVNULL)

    def _multiplex(self) -> list[str]:
        """OpenSSH connection sharing: the steps of a job reuse one authenticated connection.
        The master exits CONTROL_PERSIST_S after its last use, and close() ends it sooner."""
        if not self.config.multiplex:
            return []
        # A short name of our own rather than ssh's %C (40 characters): a socket path has at most 107.
        socket = control_folder() / hashlib.sha256(self.address.encode()).hexdigest()[:12]
        return ["-o", "ControlMaster=auto", "-o", f"ControlPath={socket}",
                "-o", f"ControlPersist={CONTROL_PERSIST_S}"]

    def run_job(self, job: Job, workdir: Path) -> JobResult:
        self._clean_stale()
        remote = f"{self.config.workdir}/job-{uuid.uuid4().hex[:12]}"
        workdir.mkdir(parents=True, exist_ok=True)
        for stale in RESULT_FILES:
            (workdir / stale).unlink(missing_ok=True)
        run = pid_then_exec("runner.pid", f"{shlex.quote(self.config.python)} runner.py job.json > runner.log 2>&1")
        try:
            self._running = remote
            code = self._send_and_run(self._job_files(job, workdir), remote, run,
                                      self.config.transfer_timeout_s + job.timeout_s + RUN_MARGIN_S).returncode
            self._running = None
            self._fetch_and_remove(remote, workdir)
        except MeasurementError:
            self._remove(remote)  # a step failed: the folder may still be there
            raise
        finally:
            self._running = None
        log = workdir / "runner.log"
        return JobResult.read_from(workdir, code, log.read_text(errors="replace") if log.exists() else "")

    def check(self) -> DeviceReport:
        remote = f"{self.config.workdir}/probe-{uuid.uuid4().hex[:12]}"
        probe = (f"{shlex.quote(self.config.python)} probe.py .; status=$?; "
                 f"cd / && rm -rf {shlex.quote(remote)}; exit $status")
        try:
            proc = self._send_and_run(PROBE_FILES, remote, probe, self.config.transfer_timeout_s)
        except MeasurementError as e:
            return DeviceReport(self.name, self.transport, self.address, reachable=False, error=str(e))
        finally:
            self.close()
        if proc.returncode != 0:
            return DeviceReport(self.name, self.transport, self.address, reachable=True,
                                error=f"{self.config.python} probe.py exited {proc.returncode}: "
                                      f"{proc.stderr.decode(errors='replace').strip()[-300:]}")
        return probe_report(self, proc.stdout.decode(errors="replace"))

    def _job_files(self, job: Job, workdir: Path) -> dict[str, Path]:
        files = {**RUNNER_FILES, "inputs.npz": job.inputs}
        artifact = None
        if job.artifact is not None:
            artifact = job.artifact.name
            files[artifact] = job.artifact
        (workdir / "job.json").write_text(json.dumps(job.document(artifact, "inputs.npz")))
        files["job.json"] = workdir / "job.json"
        return files

    def _send_and_run(self, files: dict[str, Path], remote: str, then: str,
                      timeout: float) -> subprocess.CompletedProcess:
        """Unpack ``files`` into a fresh ``remote`` folder and run ``then`` there, in one session."""
        q = shlex.quote(remote)
        script = (f"{own_folder(self.config.workdir)} || exit {NOT_OWN_WORKDIR}; umask 077; "
                  f"mkdir {q} && tar -xf - -C {q} || exit {UNPACK_FAILED}; cd {q} && {then}")
        with tempfile.TemporaryFile() as tar_file:
            with tarfile.open(fileobj=tar_file, mode="w") as tar:
                for name, path in files.items():
                    tar.add(str(path), arcname=name)
            tar_file.seek(0)
            proc = self._ssh(script, timeout, "send + run", stdin=tar_file)
        if proc.returncode == NOT_OWN_WORKDIR:
            raise MeasurementError(f"the device's workdir {self.config.workdir} on {self.address} is a link, another "
                                   "user's, or writable by its group or others, who could swap a job's files (its "
                                   "runner.py) before it runs: set workdir to a folder only the login user can write "
                                   "to (or remove it; edgeship makes it)")
        if proc.returncode == UNPACK_FAILED:
            raise MeasurementError(f"copying the job to {remote} on {self.address} failed: "
                                   f"{proc.stderr.decode(errors='replace').strip()[-300:]}")
        return proc

    def _fetch_and_remove(self, remote: str, workdir: Path) -> None:
        """Bring back the result files as a tar and remove the job folder, in one session."""
        q = shlex.quote(remote)
        script = (f"cd {q} && set -- && for f in {' '.join(RESULT_FILES)}; do "
                  f'[ -f "$f" ] && set -- "$@" "$f"; done; tar -cf - "$@"; status=$?; cd / && rm -rf {q}; exit $status')
        proc = self._ssh(script, self.config.transfer_timeout_s, "fetch + clean", check=True)
        with tarfile.open(fileobj=io.BytesIO(proc.stdout), mode="r:") as tar:
            tar.extractall(workdir, filter="data")

    def _remove(self, remote: str) -> None:
        """Remove a job folder; when that fails too, remember it and try before the next job."""
        try:
            self._ssh(f"rm -rf {shlex.quote(remote)}", CLEAN_TIMEOUT_S, "clean", check=True)
        except MeasurementError:
            self._stale.append(remote)

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
