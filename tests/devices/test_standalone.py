"""The files shipped to devices run alone: copied to a folder, in a Python that cannot import edgeship."""
from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgeship.devices import Job, LocalDevice
from edgeship.devices.base import PROBE_FILES, RUNNER_FILES, JobResult, MeasurementError
from edgeship.devices.cpu import cpu_facts
from edgeship.devices.hashing import sha256_file
from edgeship.devices.runner import RUNNERS, Runner, load_runners, open_runner
from edgeship.pipeline.validate import measure
from edgeship.profile import LatencySettings
from edgeship.results import CpuFacts
from tests import system

DEVICE_RUNTIMES = {"pytorch-mobile", "executorch", "onnxruntime", "coreml", "tensorrt", "aoti", "torchscript",
                   "openvino"}
# Run before the code under test: the device has numpy and the runtimes, but no edgeship.
NO_EDGESHIP = """\
import sys
class NoEdgeship:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "edgeship":
            raise ImportError("edgeship is not on the device: import " + name)
sys.meta_path.insert(0, NoEdgeship())
"""


def on_device(folder: Path, code: str) -> subprocess.CompletedProcess:
    """``code`` in an isolated Python (-I: no PYTHONPATH, no user site, no cwd on sys.path) in
    ``folder``, with every import of edgeship failing."""
    return subprocess.run([sys.executable, "-I", "-c", NO_EDGESHIP + code], cwd=folder, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def device_folder(tmp_path: Path) -> Path:
    """What a device gets: the runner, its sibling modules and the probe, nothing else of edgeship."""
    folder = tmp_path / "device"
    folder.mkdir()
    for name, path in {**RUNNER_FILES, **PROBE_FILES}.items():
        (folder / name).write_bytes(path.read_bytes())
    return folder


@pytest.fixture
def doubling_onnx(tmp_path: Path) -> Path:
    """A tiny ONNX model: out = 2 * image + 1, on (N, 4) float32."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Mul", ["image", "two"], ["twice"]), helper.make_node("Add", ["twice", "one"], ["out"])],
        "doubling", [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 4])],
        initializer=[helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
                     helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    return path


def onnx_job(device_folder: Path, model: Path, sha256: str, runtime: str = "onnxruntime",
             options: dict | None = None) -> np.ndarray:
    """Copy ``model`` and five samples into the device folder beside job.json; the samples."""
    (device_folder / model.name).write_bytes(model.read_bytes())
    x = np.random.default_rng(0).random((5, 4), dtype=np.float32)
    np.savez(device_folder / "inputs.npz", image=x)
    job = Job(runtime=runtime, artifact=model, sha256=sha256, inputs=device_folder / "inputs.npz",
              input_names=["image"], batch=2, warmup=1, iterations=3, threads=1, timeout_s=60,
              options=options or {})
    (device_folder / "job.json").write_text(json.dumps(job.document(model.name, "inputs.npz")))
    return x


def script(name: str, *args: str) -> str:
    """Code that runs the file ``name`` as ``python name args...`` would."""
    return f"import runpy; sys.argv = {[name, *args]!r}; runpy.run_path({name!r}, run_name='__main__')"


def test_device_files_import_without_edgeship(device_folder) -> None:
    """Every file shipped (the backends' device modules and their companions included) imports there."""
    code = ("import importlib, json, os; sys.path.insert(0, '.'); import runner; runner.load_runners(); "
            "names = sorted(n[:-3] for n in os.listdir('.') if n.endswith('.py')); "
            "[importlib.import_module(n) for n in names]; "
            "print(json.dumps([names, sorted(m for m in sys.modules if m.split('.')[0] == 'edgeship')]))")
    proc = on_device(device_folder, code)
    assert proc.returncode == 0, proc.stderr
    names, edgeship_modules = json.loads(proc.stdout)
    assert edgeship_modules == [] and {"runner", "probe", "aoti_build", "tensorrt_engine", "onnx_device"} <= set(names)


def test_device_probe_lists_every_device_runtime_and_not_eager(device_folder) -> None:
    proc = on_device(device_folder, script("probe.py", "."))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    runtimes = report["runtimes"]
    assert set(runtimes) == DEVICE_RUNTIMES and runtimes["onnxruntime"][0].isdigit()
    assert report["facts"]["cpu"] == cpu_facts()


def test_device_runner_runs_an_onnx_job_without_edgeship(device_folder, doubling_onnx) -> None:
    x = onnx_job(device_folder, doubling_onnx, sha256_file(doubling_onnx))
    proc = on_device(device_folder, script("runner.py", "job.json"))
    result = JobResult.read_from(device_folder, proc.returncode, proc.stderr)
    doc = result.document
    assert proc.returncode == 0 and doc["runtime_version"].startswith("onnxruntime ")
    assert len(doc["timings_ms"]) == 3 and doc["samples"] == 5 and doc["threads"] == 1 and doc["notes"] == []
    assert set(doc) == {"protocol", "ok", "runtime", "runtime_version", "threads", "warmup", "iterations", "load_ms",
                        "timings_ms", "peak_rss_mb", "samples", "outputs", "notes", "host", "cpu", "other_cpu_load",
                        "import_ms", "first_inference_ms", "rss_over_baseline_mb"}
    assert doc["import_ms"] > 0 and doc["first_inference_ms"] > 0 and doc["rss_over_baseline_mb"] > 0
    assert doc["cpu"] == cpu_facts()
    np.testing.assert_allclose(result.outputs[0], 2 * x + 1)


def test_measure_puts_the_cpu_the_runner_ran_on_into_the_latency_row(doubling_onnx, tmp_path) -> None:
    np.savez(tmp_path / "inputs.npz", image=np.ones((2, 4), dtype=np.float32))
    job = Job(runtime="onnxruntime", artifact=doubling_onnx, sha256=sha256_file(doubling_onnx),
              inputs=tmp_path / "inputs.npz", input_names=["image"], batch=1, warmup=0, iterations=2, threads=1,
              timeout_s=60)
    row = measure(LocalDevice(), job, LatencySettings(), tmp_path / "w").latency
    assert row.p50_ms is not None and row.cpu == CpuFacts(**cpu_facts())
    assert json.loads(row.model_dump_json())["cpu"]["flags"] == cpu_facts()["flags"]


def test_device_runner_refuses_an_artifact_whose_sha256_differs(device_folder, doubling_onnx) -> None:
    onnx_job(device_folder, doubling_onnx, "0" * 64)
    proc = on_device(device_folder, script("runner.py", "job.json"))
    assert proc.returncode == 1
    with pytest.raises(MeasurementError, match="does not match the expected"):
        JobResult.read_from(device_folder, proc.returncode, proc.stderr)


def test_device_runner_times_a_tensorrt_job_with_its_proxy_when_tensorrt_is_missing(device_folder,
                                                                                     doubling_onnx) -> None:
    if importlib.util.find_spec("tensorrt") or shutil.which("trtexec"):
        pytest.skip(system.reason("gpu", "TensorRT is here: the runner builds or times a real engine, not the proxy"))
    proxy = {"runtime": "onnxruntime", "label": "onnxruntime (host proxy)", "options": {"graph_optimization": "basic"}}
    x = onnx_job(device_folder, doubling_onnx, sha256_file(doubling_onnx), "tensorrt", {"engine": {}, "proxy": proxy})
    proc = on_device(device_folder, script("runner.py", "job.json"))
    result = JobResult.read_from(device_folder, proc.returncode, proc.stderr)
    doc = result.document
    assert doc["runtime"] == "tensorrt" and doc["runtime_version"] == "onnxruntime (host proxy)"
    assert "cannot import tensorrt" in doc["notes"][0] and "graph optimization basic" in doc["notes"][1]
    np.testing.assert_allclose(result.outputs[0], 2 * x + 1)


def test_runners_register_one_class_per_runtime_each_with_load_and_infer() -> None:
    from edgeship.devices.eager import EagerRunner

    assert set(load_runners()) == DEVICE_RUNTIMES | {"eager"} and RUNNERS["eager"] is EagerRunner
    for runtime, cls in RUNNERS.items():
        assert issubclass(cls, Runner) and cls.runtime == runtime
        assert cls.load is not Runner.load and cls.infer is not Runner.infer, runtime


def test_each_backends_runner_lives_in_its_package_under_its_one_spelling() -> None:
    """A backend's Runner is in its own package's device.py and spelled as its declaration is
    (OpenvinoSpec, OpenvinoBackend, OpenvinoRunner), found through the registry, not a list."""
    from edgeship.backends.registry import PACKAGES, SPECS

    by_runtime = {cls.runtime: cls for cls in load_runners().values()}
    for name, spec in SPECS.items():
        if "device" not in spec.device_modules:
            continue
        cls = by_runtime[spec.runtime]
        assert cls.__module__ == f"{PACKAGES[name]}.device", name
        assert cls.__name__ == spec.__name__.removesuffix("Spec") + "Runner", name


def test_open_runner_loads_the_artifact_as_a_job_does(doubling_onnx) -> None:
    runner = open_runner("onnxruntime", str(doubling_onnx), {"graph_optimization": "disabled"}, 1)
    x = np.ones((2, 4), dtype=np.float32)
    np.testing.assert_allclose(runner.infer([x])[0], 3 * x)
    assert runner.version.startswith("onnxruntime ")
    runner.close()


def test_open_runner_unknown_runtime_lists_the_known_ones() -> None:
    with pytest.raises(RuntimeError, match="unknown runtime 'tflite'; this runner has: .*onnxruntime"):
        open_runner("tflite", "model.tflite")
