"""The scheduler: devices concurrently, one job at a time per physical device, failures kept to
their device, cool-down, and what build --resume may reuse."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from edgeship.devices.base import Job, JobResult, TransportError
from edgeship.pipeline.schedule import ReuseKey, Task, measure_all, plan_tasks, reusable, unmeasured_devices
from edgeship.profile import LatencySettings
from edgeship.progress import Progress
from edgeship.results import Latency, ModelInfo, Results, VariantResult
from tests.pipeline.test_validate import ScriptedDevice, job


@pytest.fixture
def lock_home(tmp_path, monkeypatch) -> Path:
    """Device locks under the test's folder, not the user's cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


class WatchedDevice(ScriptedDevice):
    """Counts how many jobs run on its physical device at once; can wait for another device."""

    running: dict[str, int] = {}
    peak: dict[str, int] = {}
    guard = threading.Lock()

    def __init__(self, name: str, key: str, wait_for: threading.Event | None = None,
                 started: threading.Event | None = None, errors: list[Exception] | None = None) -> None:
        super().__init__(errors or [], [1.0, 1.0], retries=0)
        self.name, self.key, self.wait_for, self.started = name, key, wait_for, started

    @property
    def lock_key(self) -> str:
        return self.key

    def run_job(self, job: Job, workdir: Path) -> JobResult:
        with self.guard:
            self.running[self.key] = self.running.get(self.key, 0) + 1
            self.peak[self.key] = max(self.peak.get(self.key, 0), self.running[self.key])
        try:
            if self.started:
                self.started.set()
            if self.wait_for and not self.wait_for.wait(20):
                raise TransportError("the other device never ran at the same time")
            time.sleep(0.05)
            return super().run_job(job, workdir)
        finally:
            with self.guard:
                self.running[self.key] -= 1


def tasks_for(devices, tmp_path: Path, rows: int = 2) -> list[Task]:
    return [Task(VariantResult(name=f"v{i}", backend="onnx", precision="fp32"), job(), d, tmp_path / d.name / str(i))
            for i in range(rows) for d in devices]


def test_measure_all_runs_devices_at_once_but_one_job_at_a_time_per_device(tmp_path, lock_home) -> None:
    board_started = threading.Event()
    phone = WatchedDevice("phone", "adb-1", wait_for=board_started)
    board = WatchedDevice("board", "ssh-1", started=board_started)
    same_board = WatchedDevice("board-again", "ssh-1")  # another name for the same physical device
    tasks = tasks_for([phone, board, same_board], tmp_path)
    measure_all(tasks, LatencySettings(), Progress(quiet=True))
    assert all(t.result.latency.p50_ms == 1.0 for t in tasks)  # the phone saw the board running alongside
    assert (WatchedDevice.peak["adb-1"], WatchedDevice.peak["ssh-1"]) == (1, 1)


def test_measure_all_keeps_other_devices_results_when_one_drops_out(tmp_path, lock_home) -> None:
    gone = WatchedDevice("gone", "ssh-gone", errors=[TransportError("no route to host")] * 4)
    host = WatchedDevice("host", "local-1")
    tasks = tasks_for([gone, host], tmp_path)
    measure_all(tasks, LatencySettings(), Progress(quiet=True))
    by_device = {d: [t.result.latency for t in tasks if t.device.name == d] for d in ("gone", "host")}
    assert [lat.p50_ms for lat in by_device["host"]] == [1.0, 1.0]
    assert all(lat.p50_ms is None and lat.notes[-1].startswith("not measured: no route to host")
               for lat in by_device["gone"])


def test_measure_all_rests_a_device_between_measurements(tmp_path, lock_home) -> None:
    tasks = tasks_for([WatchedDevice("phone", "adb-2")], tmp_path)
    measure_all(tasks, LatencySettings(cooldown_s=0.01), Progress(quiet=True))
    assert not any("rested" in n for n in tasks[0].result.latency.notes)
    assert "phone rested 0.01 s before this run" in tasks[1].result.latency.notes


def test_plan_tasks_notes_why_a_device_does_not_run_a_job(tmp_path) -> None:
    row = VariantResult(name="eager", backend="eager", precision="fp32")
    eager = job()
    eager.runtime = "eager"
    board, host = ScriptedDevice([]), WatchedDevice("host", "local-1")
    host.transport = "local"
    tasks, _ = plan_tasks([(row, eager, None)], [host, board], tmp_path, None, ReuseKey((), "x"))
    assert [t.device.name for t in tasks] == ["host"]
    assert row.notes == ["board: not measured here: the eager float model runs only on the host "
                         "(it needs edgeship and the model's source)"]


def previous(sha: str = "a" * 64, **latency) -> Results:
    lat = Latency(device="board", runtime="onnxruntime 1.32.0", warmup=1, iterations=4, threads=1, p50_ms=2.0,
                  mean_ms=2.0, inputs_sha256="in", reference_sha256="ref", measured_at="2026-01-01T00:00:00Z",
                  **latency)
    variant = VariantResult(name="ort", backend="onnx", precision="fp32", sha256=sha, latency=[lat])
    return Results(target="t", created="2026-01-01T00:00:00Z", toolchain={}, variants=[variant],
                   model=ModelInfo(name="m", entry="m:build", weights_sha256="w", inputs=[], params=7))


@pytest.mark.parametrize("change, why", [
    ({}, "reused"),
    ({"sha": "b" * 64}, "artifact changed"),
    ({"device": "phone"}, "not measured there before"),
    ({"inputs": "other"}, "evaluation inputs changed"),
    ({"iterations": 100}, "latency settings changed"),
    ({"reference": "other labels"}, "float outputs or labels changed"),  # its accuracy would be stale
])
def test_resume_reuses_a_measurement_only_while_everything_it_depends_on_is_unchanged(change, why) -> None:
    row = VariantResult(name="ort", backend="onnx", precision="fp32", sha256=change.get("sha", "a" * 64))
    j = job()
    j.iterations = change.get("iterations", 4)
    key = ReuseKey((), change.get("inputs", "in"), change.get("reference", "ref"))
    lat, reason = reusable(previous(), row, change.get("device", "board"), j, key)
    assert reason == why and (lat is not None) == (why == "reused")
    if lat is not None:
        assert lat.measured_at == "2026-01-01T00:00:00Z" and lat.notes[-1].startswith("reused by build --resume")


def test_resume_measures_again_what_failed_before() -> None:
    failed = previous()
    failed.variants[0].latency[0].mean_ms = None
    row = VariantResult(name="ort", backend="onnx", precision="fp32", sha256="a" * 64)
    assert reusable(failed, row, "board", job(), ReuseKey((), "in", "ref")) == (None, "not measured there before")


def test_resume_reuses_the_eager_row_only_for_the_same_float_model() -> None:
    prev = previous()
    prev.variants[0].backend, prev.variants[0].name = "eager", "eager"
    row = VariantResult(name="eager", backend="eager", precision="fp32")
    assert reusable(prev, row, "board", job(), ReuseKey(("m:build", "w", 7), "in", "ref"))[1] == "reused"
    retrained = ReuseKey(("m:build", "retrained", 7), "in", "ref")
    assert reusable(prev, row, "board", job(), retrained)[1] == "artifact changed"
    # another seed builds other random weights: the same entry and parameter count, other float outputs
    assert reusable(prev, row, "board", job(), ReuseKey(("m:build", "w", 7), "in", "seed 1"))[1] == (
        "float outputs or labels changed")


def test_unmeasured_devices_names_each_requested_device_that_measured_nothing() -> None:
    def lat(device: str, mean: float | None, note: str | None = None) -> Latency:
        return Latency(device=device, runtime="r", warmup=1, iterations=1, mean_ms=mean, notes=[note] if note else [])

    eager = VariantResult(name="eager", backend="eager", precision="fp32", latency=[lat("host", 1.0)],
                          notes=["phone: not measured here: the eager float model runs only on the host",
                                 "idle: not measured here: the eager float model runs only on the host"])
    ort = VariantResult(name="ort", backend="onnx", precision="fp32",
                        latency=[lat("host", 0.5), lat("phone", 2.0), lat("gone", None, "not measured: ssh refused")],
                        notes=["idle: not measured here: no program runs onnxruntime"])
    pte = VariantResult(name="pte", backend="executorch", precision="fp32",
                        latency=[lat("host", None, "not measured: runner crashed"), lat("gone", None)])
    devices = ["host", "phone", "gone", "idle", "absent"]
    assert unmeasured_devices([eager, ort, pte], devices) == [  # host and phone (mean only, as adb) measured
        "requested device gone measured nothing: ssh refused",
        "requested device idle measured nothing: it can run none of this build's variants (the eager float model "
        "runs only on the host; no program runs onnxruntime)",
        "requested device absent measured nothing: no variant was measured there"]


def test_resume_reuses_an_emulated_measurement_taken_with_the_devices_own_iterations(tmp_path) -> None:
    """An emulated device runs 1 warmup and 3 iterations whatever the profile asks: its row is
    compared with the job as that device runs it, so --resume reuses it."""
    from edgeship.devices.config import QemuConfig

    device = QemuConfig(transport="qemu", cpu="Haswell").device("board")
    prev = previous(emulated="qemu-x86_64 7.2.22 -cpu Haswell (TCG)")
    prev.variants[0].latency[0].iterations, prev.variants[0].latency[0].warmup = 3, 1
    row = VariantResult(name="ort", backend="onnx", precision="fp32", sha256="a" * 64)
    asked = job()
    asked.warmup, asked.iterations = 10, 100
    tasks, reasons = plan_tasks([(row, asked, None)], [device], tmp_path, prev, ReuseKey((), "in", "ref"))
    assert tasks[0].reused is not None and reasons["reused"] == 0 and sum(reasons.values()) == 0


def test_device_agreement_compares_one_artifacts_outputs_on_two_devices() -> None:
    from edgeship.pipeline.schedule import device_agreement

    a = [np.array([[1.0, 2.0, 3.0]], dtype=np.float32), [np.ones(2), np.zeros(3)]]
    same = device_agreement("host", a, [x.copy() if not isinstance(x, list) else [y.copy() for y in x] for x in a])
    assert same.equal and same.sqnr_db is None and same.max_abs_diff == 0.0
    near = device_agreement("host", a, [a[0] + np.float32(0.01), a[1]])
    assert not near.equal and 40 < near.sqnr_db < 70 and abs(near.max_abs_diff - 0.01) < 1e-6
    other = device_agreement("host", a, [a[0][:, :2], a[1]])
    assert (other.equal, other.sqnr_db, other.max_abs_diff) == (False, None, None)
