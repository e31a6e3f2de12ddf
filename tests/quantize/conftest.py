"""Fixtures for quantizer tests: the tiny model as float ONNX, and calibration samples for it."""
from __future__ import annotations

from pathlib import Path
from typing import Any

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
    from edgeship.backends.onnx.lower import export_onnx
    from edgeship.lowering.capture import Capturer

    path = tmp_path / "fp32.onnx"
    export_onnx(Capturer(tiny_model).get("export", True), 18, True, path)
    return path


def lowerer(model, data: Dataset, folder: Path):
    """lower(backend, method, quantization={...}, cache=None, name="q", **options) -> (artifact, predict)
    for ``model`` calibrated on ``data``, written under ``folder``."""
    from edgeship.backends.base import LowerRequest
    from edgeship.backends.registry import BACKENDS
    from edgeship.lowering.capture import Capturer
    from edgeship.profile import Variant

    capturer = Capturer(model)

    def run(backend_name: str, method: str, quantization: dict | None = None, cache=None, name: str = "q",
            budget=None, **options):
        backend = BACKENDS[backend_name]
        variant = Variant(name=name, backend=backend_name, precision="int8", options=options,
                          quantization={"samples": 16, "seed": 0, **(quantization or {})})
        parsed = backend.parse_options(options)
        captured = capturer.get(method, backend.wants_dynamic_batch(parsed))
        dest = folder / name / f"model{backend.suffix}"
        artifact = backend.lower(LowerRequest(captured, variant, parsed, dest, lambda: data, cache, budget=budget))
        return artifact, backend.load(artifact.path, parsed, threads=1)
    return run


@pytest.fixture
def lower_int8(tiny_model, calib_data, tmp_path: Path):
    """lower_int8(backend, method, quantization={...}, cache=None, **options) -> (artifact, predict)."""
    return lowerer(tiny_model, calib_data, tmp_path)


@pytest.fixture
def culprit_model():
    """tests/quantize/culprit.py's model: its first layer causes the quantization error."""
    from edgeship.model import load_model
    from edgeship.spec import load_spec

    return load_model(load_spec("tests.quantize.culprit:build", "1,3,16,16"))


@pytest.fixture
def lower_culprit(culprit_model, tmp_path: Path):
    """lower_int8 for the culprit model, calibrated on its samples (the outlier pixel in each)."""
    from tests.quantize.culprit import samples

    return lowerer(culprit_model, samples(), tmp_path)


def sqnr_vs_eager(model, predict, data: Dataset, n: int = 4, batch: int = 1) -> float:
    """SQNR (dB) of ``predict`` against the float module on the first ``n`` samples."""
    import torch

    from edgeship import metrics

    x = next(iter(data.inputs.values()))[:n]
    with torch.no_grad():
        ref = model.module(torch.from_numpy(x)).numpy()
    out = np.concatenate([predict([x[i:i + batch]])[0] for i in range(0, n, batch)])
    return metrics.sqnr_db(ref, out)


def keeps_the_culprit(lower, model, backend: str, method: str, **options) -> tuple[Any, float, float]:
    """Lower the culprit model in int8 with keep_float 0 and 1 (minmax ranges, so the outlier sets
    the input's range), check that keep_float took the own ranking's worst layer, one the accumulated
    ranking does not put first: the keep_float = 1 artifact and the output SQNR of both."""
    from tests.quantize.culprit import samples

    _, all_int8 = lower(backend, method, {"method": "minmax"}, name="all", **options)
    kept, one_float = lower(backend, method, {"method": "minmax", "keep_float": 1}, name="kept", **options)
    data = samples(8, seed=1)
    details = kept.details["quantization"]
    assert details["sensitivity"]["keep_float_ranking"] == "own"
    worst = details["sensitivity"]["worst"][0]
    assert details["kept_float"] == [worst["layer"]] and worst["own_rank"] == 1
    assert worst["accumulated_rank"] > 1  # the accumulated measure would have kept another layer
    return kept, sqnr_vs_eager(model, all_int8, data, n=8), sqnr_vs_eager(model, one_float, data, n=8)
