"""benchmarks/harness.py's cold start: the runtime's import, the load and the first inference timed
apart, and the peak memory of a load over the process's own baseline (not the interpreter's), in a
loader run here and in spawned timing workers that load one at a time."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from harness import SETTLE_S, Timing, cold_start, settle, status_mib  # noqa: E402

from tests import system  # noqa: E402

MIB = 1 << 20
linux_only = pytest.mark.skipif(status_mib("VmRSS") is None,
                                reason=system.reason("os", "memory is read from /proc/self/status (Linux)"))


def holding(mib: int, first_call_s: float = 0.0, log: str | None = None):
    """A loader that touches ``mib`` MiB at load and keeps them; its first inference sleeps
    ``first_call_s``; with ``log``, it appends its load's start and end (wall clock) to that file."""
    started = time.time()
    held = np.ones(mib * MIB, dtype=np.uint8)
    calls = []

    def predict(arrays: list) -> int:
        if not calls and first_call_s:
            time.sleep(first_call_s)
        calls.append(1)
        return int(held[0])

    if log:
        time.sleep(0.3)   # a load long enough for another worker's to overlap it, were they run together
        with open(log, "a") as f:
            f.write(json.dumps([started, time.time()]) + "\n")
    return predict


def passing_through(mib: int):
    """A loader that touches ``mib`` MiB while loading and frees them before it returns."""
    np.ones(mib * MIB, dtype=np.uint8).sum()
    return lambda arrays: None


def slow_import(*args) -> None:
    time.sleep(0.2)


def importing_slowly(mib: int):
    return holding(mib)


importing_slowly.import_runtime = slow_import


@linux_only
def test_cold_start_peak_over_baseline_is_what_the_load_holds_not_the_interpreter() -> None:
    _, cold = cold_start(holding, (64,), [])
    assert 64 - 1 <= cold["rss_over_baseline_mb"] < 64 + 16
    assert cold["peak_rss_mb"] - cold["rss_over_baseline_mb"] == pytest.approx(cold["baseline_rss_mb"])
    assert cold["baseline_rss_mb"] > 10   # the interpreter, left out of the figure above


@linux_only
def test_cold_start_peak_catches_memory_freed_before_the_load_returns() -> None:
    _, cold = cold_start(passing_through, (96,), [])
    assert cold["rss_over_baseline_mb"] >= 96 - 1   # (less what the process itself let go meanwhile)


@linux_only
def test_cold_start_peak_is_reset_to_the_baseline_before_the_load() -> None:
    np.ones(256 * MIB, dtype=np.uint8).sum()   # this process's peak so far, freed again
    _, cold = cold_start(holding, (8,), [])
    assert cold["rss_over_baseline_mb"] < 8 + 16


def test_cold_start_times_import_load_and_first_inference_apart() -> None:
    _, cold = cold_start(importing_slowly, (1,), [])
    assert cold["import_ms"] >= 200 and cold["load_ms"] < 200
    _, cold = cold_start(holding, (1, 0.25), [])
    assert cold["first_inference_ms"] >= 250
    assert cold["import_ms"] is None and "includes the runtime's import" in cold["notes"][0]


@linux_only
def test_timing_workers_load_one_at_a_time_and_report_every_process(tmp_path: Path) -> None:
    log = tmp_path / "loads.jsonl"
    loader = f"{__name__}:holding"
    jobs = {"big": (loader, (48, 0.25, str(log))), "small": (loader, (4, 0.0, str(log)))}
    timing = Timing(jobs, [np.zeros(1, dtype=np.float32)], processes=2)
    try:
        timing.run(2, 5)
        big, small = timing.cold_start("big"), timing.cold_start("small")
        steady = timing.p50("big")
    finally:
        timing.close()
    assert big["processes"] == small["processes"] == 2
    assert big["rss_over_baseline_mb"]["low"] >= 48 and small["rss_over_baseline_mb"]["high"] < 48
    assert big["first_inference_ms"]["low"] >= 250 and steady < 50   # the first call, not the steady runs
    loads = sorted(json.loads(line) for line in log.read_text().splitlines())
    assert len(loads) == 4
    assert all(earlier[1] <= later[0] for earlier, later in zip(loads, loads[1:]))   # no two loads overlapped


def test_timing_a_job_that_cannot_load_says_why_in_its_cold_start() -> None:
    timing = Timing({"broken": ("harness:no_such_loader", ())}, [], processes=1)
    timing.close()
    assert "could not be loaded" in timing.cold_start("broken")["not_measured"]
    assert timing.names == []


@linux_only
def test_timing_a_cold_only_job_is_loaded_and_measured_but_not_timed() -> None:
    loader = f"{__name__}:holding"
    timing = Timing({"timed": (loader, (4,))}, [np.zeros(1, dtype=np.float32)], processes=1,
                    cold_only={"same file, own loader": (loader, (32,))})
    try:
        timing.run(1, 5)
    finally:
        timing.close()
    assert timing.names == ["timed"] and list(timing.log[0]) == ["timed"]
    assert timing.cold_start("same file, own loader")["rss_over_baseline_mb"]["low"] >= 32 - 1


def _spinning(seconds: float) -> subprocess.Popen:
    """A process that spins on the CPU for ``seconds`` (after saying so), then sleeps: a runtime's
    thread pool after a block."""
    code = ("import sys, time; print('up', flush=True); end = time.perf_counter() + float(sys.argv[1])\n"
            "while time.perf_counter() < end: pass\ntime.sleep(30)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "up\n"
    return proc


@linux_only
def test_harness_settle_waits_for_the_last_worker_to_go_idle_and_no_longer() -> None:
    for spin, low, high in ((0.05, 0.04, SETTLE_S), (0.0, 0.0, 0.04), (60.0, SETTLE_S, 1.0)):
        proc = _spinning(spin)
        try:
            waited = settle(proc.pid)
        finally:
            proc.kill()
            proc.wait()
        assert low <= waited <= high, (spin, waited)
    assert settle(None) == SETTLE_S   # no process to watch: the longest wait
