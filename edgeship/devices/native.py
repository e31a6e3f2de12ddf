"""The native benchmark programs that devices without Python (Android) run, and their output.

Each program answers two things: the command line that times an artifact on the device, and how
to read the timings back from what it printed. Both programs run their own inputs (all ones),
not edgeship's evaluation samples, and print no outputs edgeship can compare, so accuracy is not
measured on these devices; the notes say so.

- ExecuTorch's ``executor_runner`` (examples/portable/executor_runner): ``--model_path``,
  ``--num_executions``, ``--cpu_threads``. It logs ``Model executed successfully N time(s) in T ms.``
  and, in newer versions, one ``Iteration i of N: t ms`` line per run; ``Model loaded in T ms.``.
  It has no warm-up flag, so edgeship runs warmup + iterations executions and drops the first
  ``warmup`` per-run times; where only the total is printed, the mean includes the warm-up runs.
  On Android ``ET_LOG`` goes to logcat (tag ``ExecuTorch``), so the caller passes logcat too.
- PyTorch's ``speed_benchmark_torch`` (binaries/speed_benchmark_torch.cc): ``--model``,
  ``--input_dims``, ``--input_type``, ``--warmup``, ``--iter``, ``--report_pep=true``. It prints
  ``Main run finished. Microseconds per iter: U. ...`` and, with ``--report_pep``, one
  ``PyTorchObserver {... "value": "us"}`` line per timed run.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import numpy as np

from edgeship.devices.base import Job, MeasurementError

INPUT_TYPES = {"float32": "float", "uint8": "uint8_t", "int64": "int64"}


@dataclass
class NativeTimings:
    """What a native program's output says: per-run times when it prints them, else the mean."""

    timings_ms: list[float] | None
    mean_ms: float
    runs: int
    load_ms: float | None = None
    notes: list[str] = field(default_factory=list)


class ExecutorRunner:
    """ExecuTorch's ``executor_runner`` for ``.pte`` artifacts."""

    runtime = "executorch"
    program = "executor_runner"
    logcat_tag = "ExecuTorch"
    TOTAL = re.compile(r"Model executed successfully (\d+) time\(s\) in ([0-9.]+) ms")
    ITERATION = re.compile(r"Iteration (\d+) of (\d+): ([0-9.]+) ms")
    LOAD = re.compile(r"Model loaded in ([0-9.]+) ms")

    def command(self, program: str, model: str, job: Job) -> list[str]:
        args = [program, f"--model_path={model}", f"--num_executions={job.warmup + job.iterations}"]
        return args + ([f"--cpu_threads={job.threads}"] if job.threads else [])

    def parse(self, text: str, warmup: int) -> NativeTimings:
        total = self.TOTAL.search(text)
        if total is None:
            raise MeasurementError(f"{self.program} printed no 'Model executed successfully' line: "
                                   f"{_last_error(text)}")
        runs, total_ms = int(total.group(1)), float(total.group(2))
        load = self.LOAD.search(text)
        per_run = [float(m.group(3)) for m in self.ITERATION.finditer(text)]
        notes = [f"{self.program} ran the model on all-ones inputs (not the evaluation samples)"]
        if len(per_run) == runs and runs > warmup:
            timed = per_run[warmup:]
            return NativeTimings(timed, float(np.mean(timed)), len(timed),
                                 float(load.group(1)) if load else None, notes)
        notes.append(f"p50/p90/p99 not measured: this {self.program} prints only the total of its {runs} "
                     f"run(s); mean_ms is that total / {runs} and includes {min(warmup, runs)} warm-up run(s)")
        return NativeTimings(None, total_ms / runs, runs, float(load.group(1)) if load else None, notes)


class SpeedBenchmarkTorch:
    """PyTorch's ``speed_benchmark_torch`` for TorchScript / lite-interpreter artifacts."""

    runtime = "pytorch-mobile"
    program = "speed_benchmark_torch"
    logcat_tag = None
    MAIN = re.compile(r"Main run finished\. Microseconds per iter: ([0-9.eE+-]+)")
    OBSERVER = re.compile(r"PyTorchObserver (\{.*\})")

    def command(self, program: str, model: str, job: Job) -> list[str]:
        dims, types = input_dims(job)
        return [program, f"--model={model}", f"--input_dims={dims}", f"--input_type={types}",
                f"--warmup={job.warmup}", f"--iter={job.iterations}", "--report_pep=true"]

    def parse(self, text: str, warmup: int) -> NativeTimings:
        main = self.MAIN.search(text)
        if main is None:
            raise MeasurementError(f"{self.program} printed no 'Main run finished' line: {_last_error(text)}")
        mean_ms = float(main.group(1)) / 1000.0
        per_run = [float(json.loads(m.group(1))["value"]) / 1000.0 for m in self.OBSERVER.finditer(text)
                   if json.loads(m.group(1)).get("metric") == "latency"]
        notes = [f"{self.program} ran the model on all-ones inputs (not the evaluation samples) with "
                 "the library's default thread count"]
        if per_run:
            return NativeTimings(per_run, float(np.mean(per_run)), len(per_run), None, notes)
        notes.append(f"p50/p90/p99 not measured: {self.program} printed no per-run PyTorchObserver lines")
        return NativeTimings(None, mean_ms, 0, None, notes)


PROGRAMS = {p.runtime: p for p in (ExecutorRunner(), SpeedBenchmarkTorch())}


def input_dims(job: Job) -> tuple[str, str]:
    """``1,3,16,16`` and ``float`` (``;``-joined for several inputs) from the job's inputs .npz."""
    dims, types = [], []
    with np.load(job.inputs, allow_pickle=False) as npz:
        for name in job.input_names:
            array = npz[name]
            if array.dtype.name not in INPUT_TYPES:
                raise MeasurementError(f"input {name}: speed_benchmark_torch takes {', '.join(INPUT_TYPES)} "
                                       f"inputs, not {array.dtype.name}")
            dims.append(",".join(str(d) for d in (job.batch, *array.shape[1:])))
            types.append(INPUT_TYPES[array.dtype.name])
    return ";".join(dims), ";".join(types)


def _last_error(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.match(r"^(E|F) ", ln) or "rror" in ln or "failed" in ln]
    return (errors or lines or ["no output"])[-1][:300]
