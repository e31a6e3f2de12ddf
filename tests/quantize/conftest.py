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
    from edgeship.lowering.onnx import export_onnx
    from edgeship.pipeline.capture import Capturer

    path = tmp_path / "fp32.onnx"
    export_onnx(Capturer(tiny_model).get("export", True), 18, True, path)
    return path
