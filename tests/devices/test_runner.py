"""The device runner, run as a separate process the way devices run it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from edgeship.devices import Job, LocalDevice
from edgeship.devices.base import MeasurementError, device_folder
from edgeship.devices.hashing import sha256_file
from edgeship.devices.protocol import PROTOCOL_VERSION
from tests import system


def _job(artifact: Path, inputs: Path, sha: str | None, runtime: str = "pytorch-mobile") -> Job:
    return Job(runtime=runtime, artifact=artifact, sha256=sha, inputs=inputs, input_names=["image"],
               batch=1, warmup=1, iterations=5, threads=1, timeout_s=120)


def test_runner_times_and_returns_outputs_for_every_sample(ptl, inputs, tiny_model, tmp_path) -> None:
    result = LocalDevice().run_job(_job(ptl, inputs, sha256_file(ptl)), tmp_path / "w")
    doc = result.document
    assert doc["ok"] and len(doc["timings_ms"]) == 5 and doc["threads"] == 1 and doc["peak_rss_mb"] > 0
    x = np.load(inputs)["image"]
    with torch.no_grad():
        ref = tiny_model.module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(result.outputs[0], ref, rtol=1e-4, atol=1e-5)


def test_runner_refuses_an_artifact_whose_sha256_differs(ptl, inputs, tmp_path) -> None:
    with pytest.raises(MeasurementError, match="does not match the expected"):
        LocalDevice().run_job(_job(ptl, inputs, "0" * 64), tmp_path / "w")


def test_runner_unknown_runtime_lists_the_known_ones(ptl, inputs, tmp_path) -> None:
    with pytest.raises(MeasurementError, match="unknown runtime 'tflite'.*onnxruntime"):
        LocalDevice().run_job(_job(ptl, inputs, None, runtime="tflite"), tmp_path / "w")


# A module named like one of the standard library's that every runner imports (torch and numpy import
# platform): it leaves a marker, then puts the real module in its place so the job still runs.
PLANTED = """\
import os, sys
open(os.environ["EDGESHIP_TEST_MARKER"], "a").write(repr(sys.argv) + "\\n")
del sys.modules["platform"]
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
import platform as real
sys.modules[__name__] = real
"""


def _working_folder_with_platform_py(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder holding a planted ``platform.py``, entered; the marker file it would write."""
    folder, marker = tmp_path / "cwd", tmp_path / "imported.txt"
    folder.mkdir()
    (folder / "platform.py").write_text(PLANTED)
    monkeypatch.chdir(folder)
    monkeypatch.setenv("EDGESHIP_TEST_MARKER", str(marker))
    return marker


def test_local_device_eager_runner_imports_nothing_from_the_working_folder(tiny_spec, inputs, tmp_path,
                                                                           monkeypatch) -> None:
    marker = _working_folder_with_platform_py(tmp_path, monkeypatch)
    options = {"spec": tiny_spec.model_dump(mode="json"), "base_dir": str(tiny_spec.base_dir)}
    job = Job(runtime="eager", artifact=None, sha256=None, inputs=inputs, input_names=["image"], batch=1,
              warmup=0, iterations=1, threads=1, timeout_s=120, options=options)
    result = LocalDevice().run_job(job, Path("w"))
    assert result.document["ok"] and len(result.outputs[0]) == 5
    assert not marker.exists(), marker.read_text()


def test_local_device_runner_imports_nothing_from_the_working_folder_when_pythonpath_has_an_empty_entry(
        ptl, inputs, tmp_path, monkeypatch) -> None:
    marker = _working_folder_with_platform_py(tmp_path, monkeypatch)
    monkeypatch.setenv("PYTHONPATH", os.pathsep + os.environ.get("PYTHONPATH", ""))  # "" is the working folder
    result = LocalDevice().run_job(_job(ptl, inputs, sha256_file(ptl)), tmp_path / "w")
    assert result.document["ok"]
    assert not marker.exists(), marker.read_text()


def test_runner_needs_only_stdlib_and_numpy_at_import() -> None:
    code = ("import sys, runpy; runpy.run_path(sys.argv[1]); "
            "bad = [m for m in ('torch', 'edgeship', 'onnxruntime', 'executorch') if m in sys.modules]; "
            "print(json.dumps(bad))")
    out = subprocess.run([sys.executable, "-c", "import json; " + code, str(device_folder() / "runner.py")],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == []


class _Sleeper:
    """A runner whose inference sleeps: it uses no CPU, so the CPU time counted is other processes'."""

    def infer(self, batch):
        import time
        time.sleep(0.01)


def _other_load(iterations: int = 40) -> float | None:
    from edgeship.devices import runner

    timings, load = runner.time_inference(_Sleeper(), None, 0, iterations)
    assert len(timings) == iterations
    return load


@pytest.mark.alone   # under `make test` the other worker's tests would be the load it counts
@pytest.mark.skipif(not Path("/proc/stat").exists(),
                    reason=system.reason("os", "other_cpu_load is read from /proc/stat (Linux)"))
def test_runner_counts_the_cpus_other_processes_keep_busy_while_it_times() -> None:
    quiet = _other_load()
    if quiet is not None and quiet > (os.cpu_count() or 1) - 1.5:
        pytest.skip(system.reason("load", f"other processes already keep {quiet} of {os.cpu_count()} CPUs busy: "
                                           "no core is free to load"))
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        import time
        time.sleep(0.3)  # let it start spinning
        busy = _other_load()
    finally:
        spinner.kill()
        spinner.wait()
    assert quiet is not None and busy is not None
    assert busy >= quiet + 0.6 and busy <= quiet + 1.4, (quiet, busy)  # one more core kept busy by another process


def test_a_contended_measurement_is_flagged_with_a_note() -> None:
    from edgeship.pipeline.validate import flag_contended
    from edgeship.results import Latency

    def row(load: float | None) -> Latency:
        lat = Latency(device="host", runtime="onnxruntime", warmup=1, iterations=5)
        flag_contended(lat, load)
        return lat

    busy, quiet, unknown = row(1.03), row(0.12), row(None)
    assert busy.contended is True and busy.other_cpu_load == 1.03
    assert busy.notes == ["contended: other processes kept 1.0 CPU(s) busy on host while it was timed; the latency "
                          "is not the artifact's alone: measure on a quiet device"]
    assert quiet.contended is False and not quiet.notes
    assert unknown.contended is None and unknown.other_cpu_load is None


def test_the_runners_memory_grows_with_the_evaluation_set_only_by_its_mapped_pages(tmp_path) -> None:
    """The runner on 5,000 samples (245 MB, numpy.savez) against 100: its peak RSS grows by about the
    set's own pages (memory-mapped, read once), not twice that. Before, each batch's output was a view
    of torch's result that kept about one sample's worth (49 KB) of the runtime's memory alive: 1,012
    against 765 MB peak here for this job."""
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.head = torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.Linear(8, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(torch.relu(self.conv(x)).mean((2, 3)))
    torch.manual_seed(0)
    torch.jit.script(Net().eval()).save(str(tmp_path / "model.pt"))
    peaks = {}
    for n in (100, 5000):
        x = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=np.float32, shape=(n, 3, 64, 64))
        x[:] = np.random.default_rng(0).random((n, 3, 64, 64), dtype=np.float32)
        x.flush()
        np.savez(tmp_path / f"inputs{n}.npz", image=np.load(tmp_path / "x.npy", mmap_mode="r"))
        (tmp_path / "job.json").write_text(json.dumps({
            "protocol": PROTOCOL_VERSION, "runtime": "torchscript", "artifact": "model.pt", "sha256": None,
            "inputs": f"inputs{n}.npz", "input_names": ["image"], "batch": 1, "warmup": 1, "iterations": 3,
            "threads": 1}))
        proc = subprocess.run([sys.executable, str(device_folder() / "runner.py"), str(tmp_path / "job.json")],
                              capture_output=True, text=True, timeout=300)
        result = json.loads((tmp_path / "result.json").read_text())
        assert proc.returncode == 0 and result["ok"] and result["samples"] == n, result.get("error") or proc.stderr
        peaks[n] = result["peak_rss_mb"]
    data_mb = 4900 * 3 * 64 * 64 * 4 / 2**20
    print(f"\nrunner peak: {peaks[100]:.0f} MB at 100 samples, {peaks[5000]:.0f} MB at 5,000 "
          f"(+{data_mb:.0f} MB of data)")
    assert peaks[5000] - peaks[100] < 1.5 * data_mb, peaks
