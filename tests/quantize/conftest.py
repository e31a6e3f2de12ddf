"""Fixtures for quantizer tests: the tiny model as float ONNX, and calibration samples for it."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeship.calibration import Dataset


@pytest.fixture
def calib_data() -> Dataset:
    """32 seeded samples shaped like the tiny model's input ("image": 3x16x16)."""
    rng = np.random.default_rng(0)
    return Dataset({"image": rng.random((32, 3, 16, 16), dtype=np.float32)}, None, "test samples")


@pytest.fixture
def tiny_onnx(tiny_model, tmp_path: Path) -> Path:
    """The tiny model exported to float ONNX with a free batch dimension."""
    from edgeship.lowering.capture import Capturer
    from edgeship.lowering.onnx import export_onnx

    path = tmp_path / "fp32.onnx"
    export_onnx(Capturer(tiny_model).get("export", True), 18, True, path)
    return path


@pytest.fixture
def lower_int8(tiny_model, calib_data, tmp_path: Path):
    """lower_int8(backend, method, quantization={...}, cache=None, **options) -> (artifact, predict)."""
    from edgeship.lowering.backends import BACKENDS
    from edgeship.lowering.base import LowerRequest
    from edgeship.lowering.capture import Capturer
    from edgeship.profile import Variant

    capturer = Capturer(tiny_model)

    def run(backend_name: str, method: str, quantization: dict | None = None, cache=None, name: str = "q", **options):
        backend = BACKENDS[backend_name]
        variant = Variant(name=name, backend=backend_name, precision="int8", options=options,
                          quantization={"samples": 16, "seed": 0, **(quantization or {})})
        parsed = backend.parse_options(options)
        captured = capturer.get(method, backend.wants_dynamic_batch(parsed))
        dest = tmp_path / name / f"model{backend.suffix}"
        artifact = backend.lower(LowerRequest(captured, variant, parsed, dest, lambda: calib_data, cache))
        return artifact, backend.load(artifact.path, parsed, threads=1)
    return run


def sqnr_vs_eager(model, predict, data: Dataset, n: int = 4, batch: int = 1) -> float:
    """SQNR (dB) of ``predict`` against the float module on the first ``n`` samples."""
    import torch

    from edgeship import metrics

    x = data.inputs["image"][:n]
    with torch.no_grad():
        ref = model.module(torch.from_numpy(x)).numpy()
    out = np.concatenate([predict([x[i:i + batch]])[0] for i in range(0, n, batch)])
    return metrics.sqnr_db(ref, out)
