"""A CPU this machine does not have, emulated by qemu-user: the shipped runner, unchanged, run by
this machine's Python (x86-64) under ``qemu-x86_64 -cpu MODEL``, or by an aarch64 Python with the
aarch64 builds of the runtimes (``qemu-aarch64 -L ROOT -cpu max``, the root made by armroot.py).

What it gives is real: every runtime dispatches its kernels on the CPUID the emulator answers
(``-cpu Haswell``: AVX2, no AVX-512, no VNNI; QEMU 7.2's TCG has no AVX-512 at all), so the outputs
are those of the kernels that CPU would run, saturation and rounding included. What it does not
give is that CPU's time: TCG translates every instruction, so a latency row of this device is
labelled ``emulated`` (``Latency.emulated``) and no report, gate, selection or comparison uses it
as a speed. The CPU facts come from the emulated CPU itself: x86, cpu.py reads CPUID when
``EDGESHIP_CPU_FACTS=cpuid`` (/proc/cpuinfo under qemu-user is the host's file); aarch64, the
root's /proc/cpuinfo, written from the emulated CPU's HWCAP when the root was made. On aarch64
only the runtimes the root has run (``arm_runtimes()``: the backends whose declaration says
``runs_in_arm_root``); an artifact of another runtime (code compiled for this machine's x86 CPU, a
runtime without aarch64 wheels in the root) is skipped with the reason.

The device uses this machine's CPU: it shares the host's lock, so the host is never timed while
an emulated job runs beside it.
"""
from __future__ import annotations

import functools
import json
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from edgeship.backends.registry import SPECS
from edgeship.devices import armroot
from edgeship.devices.base import DeviceReport, Job, JobResult, MeasurementError, device_folder, probe_report
from edgeship.devices.cpu import SOURCE_ENV
from edgeship.devices.local import LocalDevice, runnable
from edgeship.devices.targets import unknown_cpu

HERE = Path(__file__).resolve().parent
CPU_SCRIPT = HERE / "cpu.py"
# What qemu-user prints to stderr on every start for the features TCG leaves out of a CPU model.
QEMU_WARNING = "warning: TCG doesn't support requested feature"
INSTALL = "Debian: apt-get install qemu-user"


def arm_runtimes() -> list[str]:
    """The runtimes the aarch64 root runs: those of the backends that declare ``runs_in_arm_root``."""
    return sorted({spec.runtime for spec in SPECS.values() if spec.runs_in_arm_root})


class QemuDevice(LocalDevice):
    """The runner in this machine's Python under qemu-user with an emulated CPU model (``config``: a
    QemuConfig). Jobs run fewer iterations (``config.warmup``, ``config.iterations``): the time is
    the emulator's, kept only to show what the run took, and the outputs are what count."""

    transport = "qemu"

    def __init__(self, name: str, config: Any) -> None:
        self.config = config
        super().__init__(name, config.python or (str(self.root / armroot.PYTHON) if self.arm else None))

    @property
    def arm(self) -> bool:
        return self.config.arch == "aarch64"

    @property
    def root(self) -> Path:
        """aarch64: the folder qemu takes the aarch64 Python and libraries from."""
        return Path(self.config.root).absolute() if self.config.root else armroot.default_root()

    @property
    def qemu(self) -> str:
        return runnable(self.config.qemu) if self.config.qemu else f"qemu-{self.config.arch}"

    @property
    def address(self) -> str:
        return f"{self.qemu} -cpu {self.config.cpu} on {socket.gethostname()}"

    @property
    def lock_key(self) -> str:
        return f"local-{socket.gethostname()}"  # this machine's CPU: never timed beside the host

    @property
    def emulation(self) -> str | None:
        return f"{self.qemu} {self.qemu_version} -cpu {self.config.cpu} (TCG)"

    def skip_reason(self, job: Job, host_unavailable: str | None) -> str | None:
        # Eager stays on the host. x86: the rest runs on this machine's runtimes, so what cannot run
        # here cannot run under the emulator either. aarch64: the runtimes of the root.
        first = super().skip_reason(job, None)
        if first or not self.arm:
            return first or host_unavailable
        if job.runtime not in arm_runtimes():
            return (f"{job.runtime} has no aarch64 runtime on {self.name} (the emulated root has "
                    f"{', '.join(arm_runtimes())})")
        return self.qemu_missing()

    def planned(self, job: Job) -> Job:
        return replace(job, warmup=min(job.warmup, self.config.warmup),
                       iterations=min(job.iterations, self.config.iterations),
                       timeout_s=job.timeout_s * self.config.timeout_factor)

    def run_job(self, job: Job, workdir: Path) -> JobResult:
        self.require_qemu()
        short = self.planned(job)
        result = super().run_job(short, workdir)
        cpu = result.document.get("cpu")
        if self.arm and isinstance(cpu, dict) and cpu.get("source") == "hwcap" and not cpu.get("model"):
            cpu["model"] = self.arm_model  # HWCAP has the features; the emulated model is the device's to name
        if short.iterations < job.iterations or short.warmup < job.warmup:
            result.notes.append(f"emulated CPU: {short.warmup} warmup and {short.iterations} timed iterations "
                                f"instead of {job.warmup} and {job.iterations} (the time is the emulator's, not "
                                "the CPU's)")
        return result

    def command(self, job: Job, job_file: Path) -> list[str]:
        return [*self.emulator(), *super().command(job, job_file)]

    def emulator(self) -> list[str]:
        """The command line prefix that runs a program on the emulated CPU."""
        if self.arm:
            return [self.qemu, "-L", str(self.root), "-cpu", self.config.cpu]
        return [self.qemu, "-cpu", self.config.cpu]

    def environment(self) -> dict[str, str]:
        if self.arm:  # the root's Python, not this machine's environment for it; cpu.py reads HWCAP
            return {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")} | {
                "PYTHONNOUSERSITE": "1", SOURCE_ENV: "hwcap"}
        return {**os.environ, SOURCE_ENV: "cpuid"}

    def runner_output(self, text: str) -> str:
        return without_warnings(text)

    def check(self) -> DeviceReport:
        missing = self.qemu_missing()
        if missing:
            return DeviceReport(self.name, self.transport, self.address, reachable=False, error=missing)
        with tempfile.TemporaryDirectory(prefix="edgeship-probe-") as tmp:
            proc = self.emulate([str(device_folder() / "probe.py"), tmp], timeout=600)
        if proc.returncode != 0:
            return DeviceReport(self.name, self.transport, self.address, reachable=True,
                                error=f"probe.py exited {proc.returncode}: {without_warnings(proc.stderr)[-300:]}")
        report = probe_report(self, proc.stdout)
        report.notes.append(f"emulated: {self.emulation}; outputs are the emulated CPU's kernels', latency is "
                            "the emulator's time")
        return report

    def own_cpu(self) -> dict[str, Any] | None:
        facts = self.emulated_cpu
        if self.arm and facts.get("source") == "hwcap":  # HWCAP has the features; the model is qemu's
            return {**facts, "model": self.arm_model}
        return facts

    @property
    def arm_model(self) -> str:
        return f"qemu -cpu {self.config.cpu} (emulated aarch64)"

    @functools.cached_property
    def emulated_cpu(self) -> dict[str, Any]:
        """The emulated CPU's facts, read by cpu.py under the emulator (x86: with CPUID)."""
        missing = self.qemu_missing()
        if missing:
            return unknown_cpu(missing)
        proc = self.emulate([str(CPU_SCRIPT)], timeout=120)
        try:
            return json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return unknown_cpu(f"cpu.py under {self.qemu} printed no facts: {without_warnings(proc.stderr)[-200:]}")

    def emulate(self, args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        """A script of this machine's run by the emulated Python, in an empty folder of its own (as
        every runner: never the working folder)."""
        with tempfile.TemporaryDirectory(prefix="edgeship-qemu-") as folder:
            return subprocess.run([*self.emulator(), self.python, *args], capture_output=True, text=True,
                                  timeout=timeout, env=self.environment(), cwd=folder)

    def qemu_missing(self) -> str | None:
        """Why the emulator cannot run here (not installed, the aarch64 root not set up), or None."""
        if shutil.which(self.qemu) is None:
            return f"{self.qemu} is not installed here ({INSTALL})"
        return armroot.root_problem(self.root) if self.arm else None

    def require_qemu(self) -> None:
        missing = self.qemu_missing()
        if missing:
            raise MeasurementError(missing)

    @functools.cached_property
    def qemu_version(self) -> str:
        """qemu's version number (``7.2.22``), or "version unknown"."""
        try:
            out = subprocess.run([self.qemu, "--version"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            return "version unknown"
        words = out.split()
        return words[2] if len(words) > 2 and words[1] == "version" else "version unknown"


def without_warnings(text: str) -> str:
    """qemu's output without its per-start warnings about CPU features TCG leaves out."""
    return "\n".join(line for line in (text or "").splitlines() if QEMU_WARNING not in line)
