"""Cold start and the runtime's memory in the runner's result: the first inference after the load
timed on its own, and the peak resident memory the runtime added above the runner's own.

The runtime here is a test one, shipped beside runner.py as a device gets the backends' modules: its
import holds IMPORT_MB, its load LOAD_MB, its first inference sleeps FIRST_S, and every output is
OUTPUT_MB a sample, so the evaluation pass holds far more than the timed runs.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgeship.devices import runner
from edgeship.devices.base import RUNNER_FILES
from edgeship.devices.protocol import PROTOCOL_VERSION
from tests import system

IMPORT_MB, LOAD_MB, OUTPUT_MB, SAMPLES, FIRST_S = 32, 64, 1, 96, 0.25

BALLAST_LIB = f"""
import numpy as np
HELD = np.ones({IMPORT_MB} << 20, np.uint8)  # every page written: resident
"""
BALLAST_DEVICE = f"""
import importlib
import time

import numpy as np

runner = importlib.import_module("runner")


class BallastRunner(runner.Runner):
    runtime = "ballast"

    @classmethod
    def import_runtime(cls):
        runner.sibling("ballast_lib")  # beside runner.py, as a device's runtime would be installed

    def load(self):
        self.held = np.ones({LOAD_MB} << 20, np.uint8)
        self.calls = 0
        self.version = "ballast 1"

    def infer(self, arrays):
        self.calls += 1
        if self.calls == 1:
            time.sleep({FIRST_S})
        return [np.ones((len(arrays[0]), {OUTPUT_MB} << 18), np.float32)]
"""


@pytest.fixture
def ballast_folder(tmp_path: Path) -> Path:
    """A device folder: the runner, its siblings and the test runtime, with SAMPLES inputs."""
    folder = tmp_path / "device"
    folder.mkdir()
    for name, path in RUNNER_FILES.items():
        (folder / name).write_bytes(path.read_bytes())
    (folder / "ballast_lib.py").write_text(BALLAST_LIB)
    (folder / "ballast_device.py").write_text(BALLAST_DEVICE)
    np.savez(folder / "inputs.npz", x=np.zeros((SAMPLES, 4), np.float32))
    return folder


def run_ballast(folder: Path, warmup: int = 2, iterations: int = 5) -> dict:
    (folder / "job.json").write_text(json.dumps({
        "protocol": PROTOCOL_VERSION, "runtime": "ballast", "artifact": None, "inputs": "inputs.npz",
        "input_names": ["x"], "batch": 1, "warmup": warmup, "iterations": iterations, "threads": 1}))
    proc = subprocess.run([sys.executable, "-I", "runner.py", "job.json"], cwd=folder, capture_output=True,
                          text=True, timeout=120)
    doc = json.loads((folder / "result.json").read_text())
    assert proc.returncode == 0 and doc["ok"], doc.get("error") or proc.stderr
    return doc


@pytest.mark.skipif(runner.memory_status() is None,
                    reason=system.reason("os", "resident memory is read from /proc/self/status (Linux)"))
def test_runner_memory_over_baseline_is_the_runtimes_not_the_interpreters_nor_the_evaluation_pass(
        ballast_folder) -> None:
    doc = run_ballast(ballast_folder)
    over, peak = doc["rss_over_baseline_mb"], doc["peak_rss_mb"]
    print(f"\nballast runtime: {over:.1f} MiB over the baseline, {peak:.1f} MiB whole-process peak")
    assert IMPORT_MB + LOAD_MB - 1 <= over < IMPORT_MB + LOAD_MB + 16, doc  # its import and load, a few outputs
    # the whole process's peak keeps its meaning: the interpreter, numpy and the evaluation pass's
    # SAMPLES outputs (held, then merged) on top
    assert peak >= over + SAMPLES * OUTPUT_MB, doc
    assert doc["notes"] == []


def test_runner_times_the_first_inference_apart_and_keeps_the_timed_runs(ballast_folder) -> None:
    doc = run_ballast(ballast_folder, warmup=2, iterations=5)
    assert doc["first_inference_ms"] >= FIRST_S * 1000 and doc["import_ms"] > 0 and doc["load_ms"] > 0
    assert doc["warmup"] == 2 and len(doc["timings_ms"]) == 5 and max(doc["timings_ms"]) < FIRST_S * 1000


def test_runner_without_warmup_reports_the_first_timed_run_as_the_first_inference(ballast_folder) -> None:
    doc = run_ballast(ballast_folder, warmup=0, iterations=3)
    assert len(doc["timings_ms"]) == 3 and doc["first_inference_ms"] == doc["timings_ms"][0] >= FIRST_S * 1000


def test_runner_outputs_only_job_measures_no_first_inference_nor_memory(ballast_folder) -> None:
    doc = run_ballast(ballast_folder, warmup=2, iterations=0)
    assert doc["timings_ms"] == [] and doc["first_inference_ms"] is None and doc["rss_over_baseline_mb"] is None
    assert doc["load_ms"] > 0 and doc["samples"] == SAMPLES


class _Status:
    """Stand-in for /proc/self/status: (VmRSS, VmHWM) in MiB, one pair a read."""

    def __init__(self, *reads: tuple[float, float]) -> None:
        self.reads = list(reads)

    def __call__(self) -> tuple[float, float]:
        return self.reads.pop(0)


def test_memory_baseline_without_clear_refs_is_null_with_the_reason_when_the_peak_was_higher(monkeypatch) -> None:
    monkeypatch.setattr(runner, "reset_peak", lambda: False)
    monkeypatch.setattr(runner, "memory_status", _Status((40.0, 300.0), (180.0, 300.0)))
    memory = runner.MemoryBaseline()
    assert memory.over() is None
    assert "cannot be written to reset the peak" in memory.why and "(300.0 MiB)" in memory.why
    assert runner.memory_notes(memory, 5) == [f"rss_over_baseline_mb not measured: {memory.why}"]


def test_memory_baseline_without_clear_refs_counts_when_the_peak_was_the_baseline(monkeypatch) -> None:
    monkeypatch.setattr(runner, "reset_peak", lambda: False)
    monkeypatch.setattr(runner, "memory_status", _Status((40.0, 40.0), (120.0, 130.0), (120.0, 150.0)))
    memory = runner.MemoryBaseline()
    assert memory.why is None and memory.over() == 90.0
    monkeypatch.setattr(runner, "peak_rss_mb", lambda: 150.0)
    assert memory.process_peak() == 150.0


def test_memory_baseline_keeps_the_whole_process_peak_from_before_the_reset(monkeypatch) -> None:
    monkeypatch.setattr(runner, "reset_peak", lambda: True)
    monkeypatch.setattr(runner, "memory_status", _Status((40.0, 300.0), (120.0, 130.0)))
    memory = runner.MemoryBaseline()
    assert memory.over() == 90.0
    monkeypatch.setattr(runner, "peak_rss_mb", lambda: 130.0)  # the kernel's peak since the reset
    assert memory.process_peak() == 300.0


def test_memory_baseline_where_the_os_gives_no_resident_memory_is_null_with_the_reason(monkeypatch) -> None:
    monkeypatch.setattr(runner, "memory_status", lambda: None)
    memory = runner.MemoryBaseline()
    assert memory.over() is None and "no current resident memory" in memory.why
