"""Helpers to lower the tiny model with one backend and compare its outputs with eager."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from edgeship import metrics
from edgeship.backends.base import LowerRequest
from edgeship.backends.registry import BACKENDS
from edgeship.lowering.capture import Capturer
from edgeship.profile import Variant


@pytest.fixture
def lower(tiny_model, tmp_path: Path):
    """lower(backend, method, **options) -> (artifact, predict) for the tiny model."""
    capturer = Capturer(tiny_model)

    def run(backend_name: str, method: str, precision: str = "fp32", **options):
        backend = BACKENDS[backend_name]
        variant = Variant(name=f"t-{backend_name}", backend=backend_name, precision=precision, options=options)
        parsed = backend.parse_options(options)
        captured = capturer.get(method, backend.wants_dynamic_batch(parsed))
        dest = tmp_path / variant.name / f"model{backend.suffix}"
        artifact = backend.lower(LowerRequest(captured, variant, parsed, dest))
        return artifact, backend.load(artifact.path, parsed, threads=1)
    return run


def sqnr_against_eager(model, predict, batch: int = 1) -> float:
    x = torch.rand(batch, *model.spec.inputs[0].shape[1:], generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model.module(x).numpy()
    out = predict([x.numpy()])[0]
    value = metrics.sqnr_db(ref, out)
    return float("inf") if value is None else value
