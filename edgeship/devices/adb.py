"""An Android device reached with the ``adb`` client (``-s SERIAL``: push, shell, logcat, rm).

Android has no Python, so the runner does not run there: each runtime's native benchmark program
(named per runtime under ``programs`` in devices.toml, already on the device) times the artifact,
and that program's class (``devices.native.PROGRAMS``: the backend's ``native.py``) reads its
output. Those programs return timings but no outputs edgeship can compare, so accuracy is not
measured on an adb device (the notes say why); the build's accuracy comes from a device that runs
the runner.
"""
from __future__ import annotations

import shlex
import subprocess
import uuid
from pathlib import Path
from typing import Any

from edgeship.devices.base import (
    DeviceReport,
    Job,
    JobResult,
    MeasurementError,
    RemoteDevice,
    TransportError,
    checked_result,
    pid_then_exec,
)
from edgeship.devices.native import PROGRAMS, NativeProgram, NativeTimings
from edgeship.devices.protocol import not_measured, result_document
from edgeship.errors import one_of

CONNECTION_ERRORS = ("device offline", "not found", "no devices", "error: closed", "device unauthorized",
                     "protocol fault", "connection reset")
PROPS = {"os": "ro.build.version.release", "arch": "ro.product.cpu.abi", "model": "ro.product.model"}


def native_result(job: Job, program: str, timings: NativeTimings) -> dict[str, Any]:
    """The result document of a native benchmark program's run (a runner's, as protocol.py has it):
    its per-run times, or only the mean it printed (``summary_ms``, no percentiles; measure() reads
    it as is); no outputs, and no first run or memory (null, with the note saying why)."""
    unmeasured = ["import_ms", *(["load_ms"] if timings.load_ms is None else []), "first_inference_ms",
                  "rss_over_baseline_mb"]
    doc = result_document(ok=True, runtime=job.runtime, runtime_version=f"{job.runtime} ({program})",
                          threads=job.threads, import_ms=None, load_ms=timings.load_ms, first_inference_ms=None,
                          peak_rss_mb=None, rss_over_baseline_mb=None, samples=0,
                          timings_ms=timings.timings_ms or [],
                          notes=[not_measured(unmeasured, f"{program} prints no first run apart from the others and "
                                                          "no memory of its process")])
    if not timings.timings_ms:
        doc["summary_ms"] = {"mean_ms": timings.mean_ms}
    return checked_result(doc, f"the result of {program}")


class AdbDevice(RemoteDevice):
    """Runs each job in a fresh folder under the device's ``workdir``, removed afterwards."""

    transport = "adb"

    @property
    def address(self) -> str:
        return self.config.serial

    def adb_args(self, *args: str) -> list[str]:
        return [self.config.adb, "-s", self.config.serial, *args]

    def skip_reason(self, job: Job, host_unavailable: str | None) -> str | None:
        base = super().skip_reason(job, host_unavailable)
        if base or job.is_reference:
            return base
        if job.runtime not in PROGRAMS:
            return (f"no native benchmark program runs {job.runtime} on Android; edgeship drives "
                    f"{one_of(PROGRAMS)}")
        if job.runtime not in self.config.programs:
            return (f"no {PROGRAMS[job.runtime].program} set for this device "
                    f"(devices.{self.name}.programs.{job.runtime} in the devices file)")
        return None

    def run_job(self, job: Job, workdir: Path) -> JobResult:
        spec = PROGRAMS[job.runtime]
        remote = f"{self.config.workdir}/job-{uuid.uuid4().hex[:12]}"
        model = f"{remote}/{job.artifact.name}"
        workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._adb(["shell", f"mkdir -p {shlex.quote(remote)}"], self.config.transfer_timeout_s, "mkdir")
            self._adb(["push", str(job.artifact), model], self.config.transfer_timeout_s, "push")
            self._running = remote
            text = self._run_program(spec, spec.command(self.config.programs[job.runtime], model, job), job,
                                     f"{remote}/runner.pid")
        finally:
            self._running = None
            notes = self._remove(remote)
        (workdir / "native.log").write_text(text)
        timings = spec.parse(text, job.warmup)
        why = (f"accuracy not measured on {self.name}: {spec.program} runs all-ones inputs and returns "
               "no outputs to compare")
        return JobResult(native_result(job, spec.program, timings), [], notes + timings.notes + [why])

    def shell_args(self, script: str) -> list[str]:
        return self.adb_args("shell", script)

    def check(self) -> DeviceReport:
        report = DeviceReport(self.name, self.transport, self.address, reachable=False)
        try:
            state = self._adb(["get-state"], self.config.connect_timeout_s, "get-state").stdout.strip()
            for key, prop in PROPS.items():
                report.facts[key] = self._adb(["shell", f"getprop {prop}"], self.config.connect_timeout_s,
                                              "getprop").stdout.strip()
            report.facts["free_disk_bytes"] = self._free_disk()
            report.runtimes = {runtime: self._program_state(path) for runtime, path in self.config.programs.items()}
        except MeasurementError as e:
            report.error = str(e)
            return report
        report.reachable = state == "device"
        report.facts["python"] = "none: adb devices run the native benchmark programs named in programs"
        return report

    def _run_program(self, spec: NativeProgram, command: list[str], job: Job, pid_file: str) -> str:
        """The program's output; its shell writes its pid to ``pid_file`` first (for ``cancel``)."""
        if spec.logcat_tag:  # ET_LOG goes to logcat on Android: start from an empty log
            self._adb(["logcat", "-c"], self.config.connect_timeout_s, "logcat")
        proc = self._adb(["shell", pid_then_exec(pid_file, shlex.join(command))], job.timeout_s, "run", check=False)
        text = proc.stdout + proc.stderr
        if spec.logcat_tag:
            text += self._adb(["logcat", "-d", "-s", f"{spec.logcat_tag}:I"], self.config.transfer_timeout_s,
                              "logcat").stdout
        if proc.returncode != 0:
            raise MeasurementError(f"{spec.program} exited {proc.returncode}: {text.strip()[-300:]}")
        return text

    def _free_disk(self) -> int | None:
        out = self._adb(["shell", f"df -k {shlex.quote(self.config.workdir.rsplit('/', 1)[0] or '/')}"],
                        self.config.connect_timeout_s, "df").stdout.strip().splitlines()
        fields = out[-1].split() if len(out) > 1 else []
        return int(fields[3]) * 1024 if len(fields) > 3 and fields[3].isdigit() else None

    def _program_state(self, path: str) -> str:
        proc = self._adb(["shell", f"ls {shlex.quote(path)}"], self.config.connect_timeout_s, "ls", check=False)
        return f"program at {path}" if proc.returncode == 0 else f"missing: no {path} on the device"

    def _remove(self, remote: str) -> list[str]:
        try:
            self._adb(["shell", f"rm -rf {shlex.quote(remote)}"], self.config.connect_timeout_s, "clean")
            return []
        except MeasurementError as e:
            return [f"could not remove {remote} on the device: {e}"]

    def _adb(self, args: list[str], timeout: float, step: str, check: bool = True) -> subprocess.CompletedProcess:
        try:
            proc = subprocess.run(self.adb_args(*args), capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise TransportError(f"adb {step} on {self.address} did not finish within {timeout:.0f} s") from None
        except FileNotFoundError:
            raise MeasurementError(f"the adb client {self.config.adb!r} is not installed") from None
        if proc.returncode != 0 and any(m in proc.stderr for m in CONNECTION_ERRORS):
            raise TransportError(f"adb {step} on {self.address}: {proc.stderr.strip()[-300:]}")
        if check and proc.returncode != 0:
            raise MeasurementError(f"adb {step} on {self.address} failed (exit {proc.returncode}): "
                                   f"{(proc.stderr or proc.stdout).strip()[-300:]}")
        return proc
