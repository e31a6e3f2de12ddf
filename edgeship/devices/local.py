"""This machine: the runner in a fresh subprocess of the current Python.

Every Python this module starts runs in a folder edgeship made (the job's workdir, or the probe's
temporary folder), never in the folder the command was started from: ``python -m`` puts its working
folder first on ``sys.path`` (so would an empty entry in ``PYTHONPATH``), and a ``platform.py`` left
there would run inside the runner. Where this interpreter knows ``-P`` (Python 3.11+) the eager
runner gets it too, so not even that folder is on the path.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from edgeship.devices.base import (
    EAGER_MODULE,
    Device,
    DeviceReport,
    Job,
    JobResult,
    RunnerLost,
    device_folder,
    probe_report,
)
from edgeship.devices.cpu import cpu_facts


class LocalDevice(Device):
    """Runs each job in its own fresh interpreter, so one artifact's runtime never warms another's."""

    transport = "local"
    local_to_node = True

    def __init__(self, name: str = "host", python: str | None = None) -> None:
        super().__init__(name)
        self.python = runnable(python) if python else sys.executable

    @property
    def address(self) -> str:
        import socket

        return socket.gethostname()

    def run_job(self, job: Job, workdir: Path) -> JobResult:
        workdir.mkdir(parents=True, exist_ok=True)
        workdir = workdir.resolve()
        for stale in ("result.json", "outputs.npz"):
            (workdir / stale).unlink(missing_ok=True)
        artifact = str(job.artifact.resolve()) if job.artifact else None
        (workdir / "job.json").write_text(json.dumps(job.document(artifact, str(job.inputs.resolve()))))
        try:
            proc = subprocess.run(self.command(job, workdir / "job.json"), capture_output=True, text=True,
                                  timeout=job.timeout_s, env=self.environment(), cwd=workdir)
        except subprocess.TimeoutExpired:
            raise RunnerLost(f"runner did not finish within {job.timeout_s:g} s (latency.timeout_s) and was "
                             "stopped") from None
        return JobResult.read_from(workdir, proc.returncode, self.runner_output(proc.stderr) or proc.stdout)

    def environment(self) -> dict[str, str] | None:
        """The runner's environment (None: this process's)."""
        return None

    def runner_output(self, text: str) -> str:
        """What the runner printed, as a failure's message quotes it."""
        return text

    def own_cpu(self) -> dict[str, Any] | None:
        return cpu_facts()

    def command(self, job: Job, job_file: Path) -> list[str]:
        """runner.py for ``job``, as a device has it (``device_folder``); the eager model's runner as a
        module, since it imports edgeship (without the working folder on its path: ``safe_path``)."""
        if job.is_reference:
            return [self.python, *safe_path(self.python), "-m", EAGER_MODULE, str(job_file)]
        return [self.python, str(device_folder() / "runner.py"), str(job_file)]

    def check(self) -> DeviceReport:
        with tempfile.TemporaryDirectory(prefix="edgeship-probe-") as tmp:
            proc = subprocess.run([self.python, str(device_folder() / "probe.py"), tmp], capture_output=True,
                                  text=True, timeout=300, cwd=tmp)
        if proc.returncode != 0:
            return DeviceReport(self.name, self.transport, self.address, reachable=True,
                                error=f"probe.py exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
        return probe_report(self, proc.stdout)


def safe_path(python: str) -> list[str]:
    """``-P`` when ``python`` is this interpreter and knows it (3.11+): ``-m`` then adds no folder to
    ``sys.path``. Another Python's version is unknown here; the runner's clean working folder covers it."""
    return ["-P"] if python == sys.executable and sys.version_info >= (3, 11) else []


def runnable(program: str) -> str:
    """``program`` as given, but a relative path made absolute against the working folder: the
    runners start in another folder (a bare name is still looked up on PATH)."""
    return os.path.abspath(program) if os.sep in program and not os.path.isabs(program) else program
