"""This machine: the runner in a fresh subprocess of the current Python."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from edgeship.devices.base import RUNNER, Device, Job, JobResult, MeasurementError


class LocalDevice(Device):
    """Runs each job in its own fresh interpreter, so one artifact's runtime never warms another's."""

    def __init__(self, name: str = "host", python: str | None = None) -> None:
        super().__init__(name)
        self.python = python or sys.executable

    def run_job(self, job: Job, workdir: Path) -> JobResult:
        workdir.mkdir(parents=True, exist_ok=True)
        for stale in ("result.json", "outputs.npz"):
            (workdir / stale).unlink(missing_ok=True)
        artifact = str(job.artifact.resolve()) if job.artifact else None
        (workdir / "job.json").write_text(json.dumps(job.document(artifact, str(job.inputs.resolve()))))
        try:
            proc = subprocess.run([self.python, str(RUNNER), str(workdir / "job.json")],
                                  capture_output=True, text=True, timeout=job.timeout_s)
        except subprocess.TimeoutExpired:
            raise MeasurementError(f"runner did not finish within {job.timeout_s:.0f} s") from None
        if not (workdir / "result.json").exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise MeasurementError(f"runner exited {proc.returncode} without a result: {' | '.join(tail)}")
        result = JobResult.read(workdir)
        if not result.document.get("ok"):
            raise MeasurementError(result.document.get("error", "runner failed"))
        return result
