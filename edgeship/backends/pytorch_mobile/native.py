"""PyTorch's ``speed_benchmark_torch`` (binaries/speed_benchmark_torch.cc): the native program that times
lite-interpreter artifacts on a device without Python (Android, over adb).

Its flags: ``--model``, ``--input_dims``, ``--input_type``, ``--warmup``, ``--iter``,
``--report_pep=true``. It prints ``Main run finished. Microseconds per iter: U. ...`` and, with
``--report_pep``, one ``PyTorchObserver {... "value": "us"}`` line per timed run.
"""
from __future__ import annotations

import json
import re

import numpy as np

from edgeship.devices.base import Job, MeasurementError
from edgeship.devices.native import NativeProgram, NativeTimings, last_error

INPUT_TYPES = {"float32": "float", "uint8": "uint8_t", "int64": "int64"}


class SpeedBenchmarkTorch(NativeProgram):
    """PyTorch's ``speed_benchmark_torch`` for TorchScript / lite-interpreter artifacts."""

    program = "speed_benchmark_torch"
    MAIN = re.compile(r"Main run finished\. Microseconds per iter: ([0-9.eE+-]+)")
    OBSERVER = re.compile(r"PyTorchObserver (\{.*\})")

    def command(self, program: str, model: str, job: Job) -> list[str]:
        dims, types = input_dims(job)
        return [program, f"--model={model}", f"--input_dims={dims}", f"--input_type={types}",
                f"--warmup={job.warmup}", f"--iter={job.iterations}", "--report_pep=true"]

    def parse(self, text: str, warmup: int) -> NativeTimings:
        main = self.MAIN.search(text)
        if main is None:
            raise MeasurementError(f"{self.program} printed no 'Main run finished' line: {last_error(text)}")
        mean_ms = float(main.group(1)) / 1000.0
        per_run = [float(json.loads(m.group(1))["value"]) / 1000.0 for m in self.OBSERVER.finditer(text)
                   if json.loads(m.group(1)).get("metric") == "latency"]
        notes = [f"{self.program} ran the model on all-ones inputs (not the evaluation samples) with "
                 "the library's default thread count"]
        if per_run:
            return NativeTimings(per_run, float(np.mean(per_run)), len(per_run), None, notes)
        notes.append(f"p50/p90/p99 not measured: {self.program} printed no per-run PyTorchObserver lines")
        return NativeTimings(None, mean_ms, 0, None, notes)


def input_dims(job: Job) -> tuple[str, str]:
    """``1,3,16,16`` and ``float`` (``;``-joined for several inputs) from the job's inputs .npz, as
    speed_benchmark_torch's ``--input_dims`` and ``--input_type`` take them."""
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
