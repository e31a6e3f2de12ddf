"""The browser device: onnxruntime-web artifacts run in real headless Chromium (Debian's package,
driven by playwright), served from 127.0.0.1 with the cross-origin isolation headers."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from edgeship.backends.registry import SPECS
from edgeship.devices import Job, LocalDevice
from edgeship.devices.base import BROWSER_ONLY, WEB_RUNTIME, MeasurementError, RunnerError
from edgeship.devices.browser import BrowserDevice, IsolatedHandler, web_backends
from edgeship.devices.config import BUILT_IN, BrowserConfig, load_devices
from edgeship.devices.hashing import sha256_file
from edgeship.errors import DeviceError
from edgeship.metrics import sqnr_db
from edgeship.webfiles import ORT_FILES, ort_web_package
from tests import system

NO_BROWSER = system.browser()
needs_browser = pytest.mark.skipif(NO_BROWSER is not None, reason=str(NO_BROWSER))


def browser(**settings) -> BrowserDevice:
    return BrowserDevice("browser", BrowserConfig(transport="browser", **settings))


def web_job(artifact: Path, inputs: Path, **changes) -> Job:
    job = dict(runtime="onnxruntime-web", artifact=artifact, sha256=sha256_file(artifact), inputs=inputs,
               input_names=["image"], batch=1, warmup=2, iterations=5, threads=1, timeout_s=120)
    return Job(**{**job, **changes})


@pytest.fixture
def tiny_onnx(tiny_model, tmp_path: Path) -> tuple[Path, Path]:
    """The tiny model as ONNX (opset 17, TorchScript exporter) and 6 evaluation inputs."""
    path = tmp_path / "tiny.onnx"
    torch.onnx.export(tiny_model.module, tiny_model.example_inputs, str(path), dynamo=False, opset_version=17,
                      input_names=["image"], output_names=["logits"])
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, image=np.random.default_rng(3).random((6, 3, 16, 16), dtype=np.float32))
    return path, inputs


def test_browser_is_a_built_in_device_and_devices_files_may_name_one(tmp_path: Path) -> None:
    assert isinstance(BUILT_IN["browser"], BrowserConfig)
    path = tmp_path / "devices.toml"
    path.write_text('[devices.chrome]\ntransport = "browser"\nthreads = 2\nexecutable = "/opt/chromium"\n')
    devices = load_devices(path)
    assert {"host", "browser", "chrome"} <= set(devices.names)
    assert devices.device("chrome").config.threads == 2
    path.write_text('[devices.chrome]\ntransport = "browser"\nthreds = 2\n')
    with pytest.raises(DeviceError, match="devices.chrome.threds"):
        load_devices(path)
    path.write_text('[devices.chrome]\ntransport = "browser"\nthreads = 0\n')
    with pytest.raises(DeviceError, match="devices.chrome.threads"):
        load_devices(path)


def test_only_a_browser_runs_onnxruntime_web_and_a_browser_runs_nothing_else(tiny_onnx) -> None:
    artifact, inputs = tiny_onnx
    job = web_job(artifact, inputs)
    assert LocalDevice().skip_reason(job, None) == BROWSER_ONLY
    native = web_job(artifact, inputs, runtime="onnxruntime")
    assert browser().skip_reason(native, None) == ("a browser device runs only onnxruntime-web artifacts "
                                                   "(backend onnx-web), not onnxruntime")
    assert browser().skip_reason(web_job(artifact, inputs, runtime="eager"), None).startswith("the eager")


def test_a_browser_runs_the_backends_whose_runtime_is_the_pages() -> None:
    assert web_backends() == {name: spec for name, spec in SPECS.items() if spec.runtime == WEB_RUNTIME}
    assert web_backends() and all(spec.suffix in IsolatedHandler.extensions_map for spec in web_backends().values())


def test_a_missing_chromium_is_named_with_how_to_install_it(tiny_onnx, tmp_path: Path) -> None:
    artifact, inputs = tiny_onnx
    device = browser(executable=str(tmp_path / "no-such-chromium"))
    assert "no Chromium" in device.skip_reason(web_job(artifact, inputs), None)
    assert "apt-get install chromium" in device.skip_reason(web_job(artifact, inputs), None)
    with pytest.raises(MeasurementError, match="not measured here: no Chromium"):
        device.run_job(web_job(artifact, inputs), tmp_path / "w")


@needs_browser
def test_chromium_runs_the_model_as_native_onnx_runtime_does(tiny_onnx, tmp_path: Path) -> None:
    import onnxruntime as ort

    artifact, inputs = tiny_onnx
    result = browser().run_job(web_job(artifact, inputs), tmp_path / "w")
    doc = result.document
    assert doc["ok"] and len(doc["timings_ms"]) == 5 and all(t > 0 for t in doc["timings_ms"])
    assert doc["samples"] == 6 and doc["load_ms"] > 0
    assert doc["first_inference_ms"] > 0 and doc["import_ms"] is None and doc["rss_over_baseline_mb"] is None
    assert doc["runtime_version"].startswith("onnxruntime-web 1.30.0 wasm (simd, 1 thread), Chromium ")
    x = np.load(inputs)["image"]
    session = ort.InferenceSession(str(artifact), providers=["CPUExecutionProvider"])
    native = np.concatenate([session.run(None, {"image": x[i:i + 1]})[0] for i in range(6)])
    assert result.outputs[0].shape == native.shape and result.outputs[0].dtype == np.float32
    assert sqnr_db(native, result.outputs[0]) > 60


@needs_browser
def test_two_threads_run_in_a_cross_origin_isolated_page(tiny_onnx, tmp_path: Path) -> None:
    artifact, inputs = tiny_onnx
    result = browser().run_job(web_job(artifact, inputs, threads=2), tmp_path / "w")
    assert result.document["threads"] == 2 and result.document["browser"]["cross_origin_isolated"] is True
    assert "(simd, 2 threads)" in result.document["runtime_version"] and result.notes == []


@needs_browser
def test_a_404_page_served_as_wasm_fails_with_the_browsers_message(tiny_onnx, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    artifact, inputs = tiny_onnx
    broken = tmp_path / "ort-web"
    shutil.copytree(ort_web_package(), broken, ignore=shutil.ignore_patterns("*.map", "*jsep*", "*jspi*", "*asyncify*",
                                                                            "ort.all*", "ort.webgl*", "ort.node*"))
    (broken / "dist" / ORT_FILES[2]).write_text("<html><body>404 Not Found</body></html>")
    monkeypatch.setenv("EDGESHIP_ORT_WEB", str(broken))
    with pytest.raises(RunnerError, match="expected magic word 00 61 73 6d"):
        browser().run_job(web_job(artifact, inputs), tmp_path / "w")


@needs_browser
def test_an_op_the_wasm_backend_lacks_fails_naming_the_op(tmp_path: Path) -> None:
    from onnx import TensorProto, helper, save

    node = helper.make_node("EdgeshipNoSuchOp", ["image"], ["y"], domain="edgeship.test")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("edgeship.test", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=10)
    save(model, tmp_path / "custom.onnx")
    np.savez(tmp_path / "in.npz", image=np.ones((1, 4), np.float32))
    with pytest.raises(RunnerError, match="EdgeshipNoSuchOp"):
        browser().run_job(web_job(tmp_path / "custom.onnx", tmp_path / "in.npz"), tmp_path / "w")


@needs_browser
def test_a_page_that_does_not_finish_is_killed_at_the_timeout(tiny_onnx, tmp_path: Path) -> None:
    artifact, inputs = tiny_onnx
    with pytest.raises(MeasurementError, match="did not finish within 8 s; Chromium was killed"):
        browser().run_job(web_job(artifact, inputs, iterations=10_000_000, timeout_s=8), tmp_path / "w")
    assert (tmp_path / "w" / "browser.log").exists()


@needs_browser
def test_the_page_loads_nothing_but_what_edgeship_serves(tiny_onnx, tmp_path: Path) -> None:
    """No CDN: every request of the runner page goes to the job's own server on 127.0.0.1, and
    nothing it asks for is missing (a 404 would be in the browser log)."""
    artifact, inputs = tiny_onnx
    browser().run_job(web_job(artifact, inputs), tmp_path / "w")
    seen = json.loads((tmp_path / "w" / "requests.json").read_text())
    assert any(url.endswith("/ort/ort-wasm-simd-threaded.wasm") for url in seen), seen
    assert all(url.startswith("http://127.0.0.1:") for url in seen), seen
    assert "404" not in (tmp_path / "w" / "browser.log").read_text()


@needs_browser
def test_build_for_web_measures_both_variants_in_chromium(tiny_project: Path, tmp_path: Path) -> None:
    from tests.test_build_e2e import edgeship

    proc = edgeship("build", "--target", "web", "--model", str(tiny_project / "model.toml"), "--out",
                    str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["toolchain"]["onnxruntime-web"] == "1.30.0"
    rows = {r["name"]: r for r in results["variants"]}
    assert [lat["device"] for lat in rows["eager"]["latency"]] == ["host"]
    for name in ("web-fp32", "web-int8"):
        row = rows[name]
        assert row["backend"] == "onnx-web" and row["gates"]["passed"], row
        [lat] = row["latency"]
        assert lat["device"] == "browser" and lat["p50_ms"] > 0
        assert lat["runtime"].startswith("onnxruntime-web 1.30.0 wasm (simd, ") and "Chromium" in lat["runtime"]
        assert any("host: not measured here: onnxruntime-web runs in a browser" in n for n in row["notes"])
    assert rows["web-fp32"]["accuracy"]["sqnr_db"] > 60
    assert rows["web-int8"]["accuracy"]["sqnr_db"] > 20
    # the web bundle, as a zip and as the site unpacked beside it, both in the build's manifest
    out = tmp_path / "out"
    manifest = json.loads((out / ".edgeship-build.json").read_text())["files"]
    assert {"tiny-web.zip", "tiny-web/index.html", "tiny-web/ort/ort.wasm.min.mjs"} <= set(manifest)
    assert edgeship("bundle", "verify", str(out / "tiny-web"), cwd=tmp_path).returncode == 0
    again = edgeship("build", "--target", "web", "--model", str(tiny_project / "model.toml"), "--out", str(out),
                     cwd=tmp_path)
    assert again.returncode == 0 and "unchanged since" in again.stderr, again.stderr[-2000:]


@needs_browser
def test_weights_in_an_external_data_file_are_served_beside_the_model(tiny_onnx, tmp_path: Path) -> None:
    """torch.onnx.export's dynamo exporter writes big weights to <model>.onnx.data: the page gets them too."""
    import onnx

    artifact, inputs = tiny_onnx
    split = tmp_path / "split" / "split.onnx"
    split.parent.mkdir()
    onnx.save(onnx.load(str(artifact)), str(split), save_as_external_data=True, all_tensors_to_one_file=True,
              location="split.onnx.data", size_threshold=0)
    whole = browser().run_job(web_job(artifact, inputs), tmp_path / "a")
    parts = browser().run_job(web_job(split, inputs), tmp_path / "b")
    np.testing.assert_array_equal(whole.outputs[0], parts.outputs[0])
