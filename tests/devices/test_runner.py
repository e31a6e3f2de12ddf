"""The device runner, run as a separate process the way devices run it."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from edgeship.devices import Job, LocalDevice
from edgeship.devices.base import RUNNER, MeasurementError
from edgeship.devices.hashing import sha256_file


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


def test_runner_needs_only_stdlib_and_numpy_at_import() -> None:
    code = ("import sys, runpy; runpy.run_path(sys.argv[1]); "
            "bad = [m for m in ('torch', 'edgeship', 'onnxruntime', 'executorch') if m in sys.modules]; "
            "print(json.dumps(bad))")
    out = subprocess.run([sys.executable, "-c", "import json; " + code, str(RUNNER)],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == []
