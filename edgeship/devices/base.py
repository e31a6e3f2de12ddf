"""What every device does: take a measurement job, run the runner there, bring the results back."""
from __future__ import annotations

import atexit
import contextlib
import functools
import json
import shlex
import shutil
import signal
import subprocess
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgeship.backends.registry import device_files
from edgeship.devices.protocol import PROTOCOL_VERSION, other_version, result_problems
from edgeship.devices.runner import decode_outputs
from edgeship.fsutil import new_private_folder
from edgeship.results import REFERENCE

HERE = Path(__file__).resolve().parent
# What goes to a device beside each job: the runner and the sibling modules it imports (it
# imports nothing of edgeship there): the job and result protocol, artifact hashing, the CPU facts,
# and every backend's device-side modules (its Runner and the helpers it imports: an engine
# builder, a package compiler), flat, under the names the registry gives them.
RUNNER_FILES = {**{name: HERE / name for name in ("runner.py", "protocol.py", "hashing.py", "cpu.py")},
                **device_files()}
# What `devices check` sends: the probe, and the runner it imports to list the runtimes.
PROBE_FILES = {"probe.py": HERE / "probe.py", **RUNNER_FILES}


@functools.cache
def device_folder() -> Path:
    """This machine as a device sees it: a private folder of this process holding PROBE_FILES, flat,
    as they are sent to every other device (removed when the process exits). The local device runs
    runner.py and probe.py from here, so the host runs what a device runs."""
    folder = new_private_folder("edgeship-device-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    for name, path in PROBE_FILES.items():
        shutil.copyfile(path, folder / name)
    return folder


# The runtime that only a browser device runs (a web backend's).
WEB_RUNTIME = "onnxruntime-web"
BROWSER_ONLY = ('onnxruntime-web runs in a browser: measured on a device with transport = "browser" '
                "(the built-in 'browser' device is this machine's Chromium)")
# The host-only eager runtime (it needs edgeship), run as a module instead of runner.py.
EAGER_MODULE = "edgeship.devices.eager"


@dataclass
class Job:
    """One measurement: an artifact run by one runtime on one device."""

    runtime: str
    artifact: Path | None          # None for the eager model
    sha256: str | None
    inputs: Path                   # .npz, one array per input name
    input_names: list[str]
    batch: int
    warmup: int
    iterations: int
    threads: int | None
    timeout_s: float
    options: dict[str, Any] = field(default_factory=dict)
    size: str | None = None        # "min" / "max": a dynamic-shape model's inputs at that size; None: opt

    @property
    def is_reference(self) -> bool:
        """The float model's job (the host-only eager runtime), not an artifact's."""
        return self.runtime == REFERENCE

    def document(self, artifact: str | None, inputs: str) -> dict[str, Any]:
        """The job JSON the runner reads, with paths as the device sees them (protocol.py's job fields)."""
        return {"protocol": PROTOCOL_VERSION, "runtime": self.runtime, "artifact": artifact, "sha256": self.sha256,
                "inputs": inputs, "input_names": self.input_names, "batch": self.batch, "warmup": self.warmup,
                "iterations": self.iterations, "threads": self.threads, "options": self.options,
                "outputs": "outputs.npz", "result": "result.json", "deadline_s": self.timeout_s}


@dataclass
class JobResult:
    """What came back: the runner's result document and its outputs."""

    document: dict[str, Any]
    outputs: list[np.ndarray | list[np.ndarray]]  # in flattened order; a list: one array per sample
    notes: list[str] = field(default_factory=list)

    @classmethod
    def read_from(cls, folder: Path, exit_code: int, output: str) -> JobResult:
        """The result.json and outputs.npz a runner wrote into ``folder``. Raises MeasurementError
        when it wrote no result (the last lines of ``output``, what it printed, say why) or the
        artifact is not made for the device's CPU (not run there, by design), RunnerError when its
        result reports a failure or does not follow the device protocol (protocol.py)."""
        if not (folder / "result.json").exists():
            tail = output.strip().splitlines()[-3:]
            raise RunnerLost(f"runner {exit_words(exit_code)} without a result"
                             + (f": {' | '.join(tail)}" if tail else " (it printed nothing)"))
        try:
            doc = json.loads((folder / "result.json").read_text())
        except ValueError as e:
            raise RunnerError(f"the runner's result.json is not JSON ({e})") from None
        doc = checked_result(doc, "the runner's result.json")
        if not doc["ok"] and doc.get("not_for_this_cpu"):
            raise MeasurementError(doc["error"])
        if not doc["ok"]:
            raise RunnerError(doc["error"])
        outputs: list[np.ndarray | list[np.ndarray]] = []
        if (folder / "outputs.npz").exists():
            with np.load(folder / "outputs.npz", allow_pickle=False) as npz:
                outputs = decode_outputs(npz)
        return cls(doc, outputs)


class MeasurementError(Exception):
    """A measurement that could not be taken; the message says why (it goes into the notes)."""


class RunnerError(MeasurementError):
    """The runner started on the device and the artifact failed to load or run there (its own fault,
    not the device's): the message is the runtime's error."""


class RunnerLost(RunnerError):
    """The runner ended without a result: killed (a signal, the kernel's OOM killer), crashed or
    stopped at its deadline. The variant was not measured there, so it fails its gates."""


def exit_words(code: int) -> str:
    """How a runner process ended, in words: ``killed by signal 9 (SIGKILL; out of memory?)`` for
    a negative status (Python's subprocess), the signal a shell's 128+N status names, else ``exited N``."""
    number = -code if code < 0 else code - 128 if 128 < code < 128 + 65 else None
    try:
        name = signal.Signals(number).name if number else None
    except ValueError:
        name = None
    if name is None:
        return f"exited {code}"
    hint = "; out of memory?" if number == signal.SIGKILL else ""
    if code < 0:
        return f"killed by signal {number} ({name}{hint})"
    return f"exited {code} (signal {number}, {name}{hint}, as a shell reports it)"


def checked_result(doc: Any, what: str) -> dict[str, Any]:
    """``doc``, a result document (``what`` names it), when it follows the device protocol; else a
    RunnerError that names each key at fault (a runner of another protocol version: both versions,
    and its error, if it reports one), before anything reads a key of it."""
    problems = result_problems(doc)
    if not problems:
        return doc
    error = doc.get("error") if isinstance(doc, dict) else None
    said = f" (its error: {error})" if isinstance(error, str) else ""
    if other_version(doc) is not None:
        raise RunnerError(f"{what} is device protocol {doc['protocol']!r}; this edgeship reads protocol "
                          f"{PROTOCOL_VERSION}: it came from a runner.py of another edgeship{said}")
    raise RunnerError(f"{what} does not follow device protocol {PROTOCOL_VERSION}: {'; '.join(problems)}{said}")


class TransportError(MeasurementError):
    """The device could not be reached, or the connection dropped mid-job: worth retrying."""


@dataclass
class DeviceReport:
    """What ``edgeship devices check`` found out about a device."""

    name: str
    transport: str
    address: str
    reachable: bool
    error: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)      # os, arch, python, cpus, free disk
    runtimes: dict[str, str] = field(default_factory=dict)   # runtime id -> version, or why it is missing
    notes: list[str] = field(default_factory=list)


class Device(ABC):
    """A place artifacts run: this machine, an ssh board, an adb phone.

    ``retries`` and ``backoff_s`` say how often a job that lost its connection (TransportError)
    is started again; ``lock_key`` names the physical device, so that two builds never time on it
    at once whatever the device is called in their devices files.
    """

    transport = "local"
    retries = 0
    backoff_s = 1.0
    lock_timeout_s = 3600.0
    # Part of the machine edgeship runs on (its CPU, its browser, an emulator on it): on a cluster,
    # every build node has its own, measured there, never advertised as a shared lab device.
    local_to_node = False

    def __init__(self, name: str) -> None:
        self.name = name

    @abstractmethod
    def run_job(self, job: Job, workdir: Path) -> JobResult:
        """Run ``job`` with the runner on the device; raise MeasurementError when it fails."""

    @abstractmethod
    def check(self) -> DeviceReport:
        """Reach the device and report its OS, architecture, Python, runtimes and free disk."""

    @property
    @abstractmethod
    def address(self) -> str:
        """Where the device is: ``local``, ``user@host:port``, an adb serial."""

    @property
    def lock_key(self) -> str:
        return f"{self.transport}-{self.address}"

    def skip_reason(self, job: Job, host_unavailable: str | None) -> str | None:
        """Why ``job`` is not run on this device (None: run it). ``host_unavailable`` is the
        backend's reason it cannot run on this machine, which matters only for local devices."""
        if job.is_reference and self.transport != "local":
            return "the eager float model runs only on the host (it needs edgeship and the model's source)"
        if job.runtime == WEB_RUNTIME and self.transport != "browser":
            return BROWSER_ONLY
        return host_unavailable if self.transport == "local" else None

    def planned(self, job: Job) -> Job:
        """The job as this device runs it (an emulator runs fewer iterations); default: as asked."""
        return job

    @property
    def emulation(self) -> str | None:
        """How the device's CPU is emulated (its latency rows say so and are never used as a speed),
        or None for a real device."""
        return None

    def own_cpu(self) -> dict[str, Any] | None:
        """The device's CPU facts when it knows them without a probe (this machine's, an emulator's
        CPU model), else None: the build probes it (devices/targets.py)."""
        return None

    def cancel(self) -> None:  # noqa: B027 (a hook: a local runner is stopped as this process's child)
        """Stop the job running now where it runs (the command is being interrupted; called from the
        main thread while a worker waits for ``run_job``); default: nothing beyond the local processes."""

    def close(self) -> None:  # noqa: B027 (a hook: most transports keep nothing open)
        """Release what the device keeps open between jobs (a shared connection); default: nothing."""

    def describe(self) -> str:
        """A short label for progress lines."""
        return self.name


CANCEL_TIMEOUT_S = 2.0  # stopping a remote job when the build is interrupted


class RemoteDevice(Device):
    """A device reached through a transport, with the retry, backoff and lock settings of its
    devices.toml entry (``config``: a RemoteSettings model).

    A job runs in its own folder on the device (``_running`` while it runs), its shell writing its
    pid to ``runner.pid`` there before exec'ing the program (``pid_then_exec``): ``cancel()`` kills
    it through that file and removes the folder, since the local client (ssh, adb) going away does
    not stop a program on the device. A subclass gives ``shell_args``."""

    def __init__(self, name: str, config: Any) -> None:
        super().__init__(name)
        self.config = config
        self.retries = config.retries
        self.backoff_s = config.backoff_s
        self.lock_timeout_s = config.lock_timeout_s
        self._running: str | None = None  # the device folder of the job running now

    def shell_args(self, script: str) -> list[str]:
        """The local command line that runs ``script`` with sh on the device."""
        raise NotImplementedError

    def cancel(self) -> None:
        """Kill the program of the job running now and remove the job's folder on the device."""
        remote = self._running
        if remote is None:
            return
        q = shlex.quote(remote)
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            subprocess.run(self.shell_args(f'pid=$(cat {q}/runner.pid 2>/dev/null) && kill -KILL "$pid"; rm -rf {q}'),
                           capture_output=True, timeout=CANCEL_TIMEOUT_S, stdin=subprocess.DEVNULL)


def pid_then_exec(pid_file: str, command: str) -> str:
    """A shell line that writes its pid to ``pid_file``, then becomes ``command`` (the same pid)."""
    return f"echo $$ > {shlex.quote(pid_file)}; exec {command}"


def probe_report(device: Device, stdout: str) -> DeviceReport:
    """A DeviceReport from the JSON that probe.py printed on the device."""
    try:
        doc = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return DeviceReport(device.name, device.transport, device.address, reachable=True,
                            error=f"probe.py printed no report: {stdout.strip()[-300:]!r}")
    return DeviceReport(device.name, device.transport, device.address, reachable=True,
                        facts=doc["facts"], runtimes=doc["runtimes"])
