"""ExecuTorch's ``executor_runner`` (examples/portable/executor_runner): the native program that times
``.pte`` artifacts on a device without Python (Android, over adb).

Its flags: ``--model_path``, ``--num_executions``, ``--cpu_threads``. It logs ``Model executed
successfully N time(s) in T ms.`` and, in newer versions, one ``Iteration i of N: t ms`` line per
run; ``Model loaded in T ms.``. It has no warm-up flag, so edgeship runs warmup + iterations
executions and drops the first ``warmup`` per-run times; where only the total is printed, the mean
includes the warm-up runs. On Android ``ET_LOG`` goes to logcat (tag ``ExecuTorch``), so the caller
passes logcat too.
"""
from __future__ import annotations

import re

import numpy as np

from edgeship.devices.base import Job, MeasurementError
from edgeship.devices.native import NativeProgram, NativeTimings, last_error


class ExecutorRunner(NativeProgram):
    """ExecuTorch's ``executor_runner`` for ``.pte`` artifacts."""

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
                                   f"{last_error(text)}")
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
