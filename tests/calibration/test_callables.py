"""module:callable data sources: batches as arrays, tensors, tuples or dicts; errors name the source."""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from edgeship.calibration import load_dataset
from edgeship.errors import DataError
from edgeship.spec import ModelSpec

SOURCE = """\
import numpy as np
import torch

def arrays():
    rng = np.random.default_rng(0)
    return (rng.random((4, 3, 8, 8), dtype=np.float32) for _ in range(3))

def tensors_with_labels():
    return [{"image": torch.zeros(2, 3, 8, 8), "y": torch.tensor([1, 2])} for _ in range(2)]

def endless():
    while True:
        yield np.ones((5, 3, 8, 8), np.float32)

def wrong_shape():
    return [np.zeros((2, 3, 4, 4), np.float32)]

def broken():
    raise RuntimeError("the dataset server is down")
"""


@pytest.fixture
def spec(tmp_path: Path) -> ModelSpec:
    (tmp_path / "calibsrc.py").write_text(textwrap.dedent(SOURCE))
    return ModelSpec(name="m", entry="m:build", inputs=[{"name": "image", "shape": [1, 3, 8, 8]}], base_dir=tmp_path)


def test_callable_batches_of_arrays_are_concatenated(spec) -> None:
    data = load_dataset("calibsrc:arrays", spec, "calibration")
    assert data.inputs["image"].shape == (12, 3, 8, 8) and data.labels is None


def test_callable_dict_batches_carry_labels(spec) -> None:
    data = load_dataset("calibsrc:tensors_with_labels", spec, "evaluation")
    assert len(data) == 4 and data.labels.tolist() == [1, 2, 1, 2]


def test_callable_endless_source_stops_at_the_limit(spec) -> None:
    assert len(load_dataset("calibsrc:endless", spec, "calibration", limit=7)) == 7


def test_callable_wrong_shape_names_the_source_and_both_shapes(spec) -> None:
    with pytest.raises(DataError) as e:
        load_dataset("calibsrc:wrong_shape", spec, "calibration")
    assert "calibsrc:wrong_shape" in str(e.value) and "[3, 4, 4]" in str(e.value) and "[3, 8, 8]" in str(e.value)


def test_callable_failure_is_a_data_error_with_its_message(spec) -> None:
    with pytest.raises(DataError, match="calibsrc:broken: RuntimeError: the dataset server is down"):
        load_dataset("calibsrc:broken", spec, "calibration")
    with pytest.raises(DataError, match="calibsrc:missing: module 'calibsrc' has no attribute 'missing'"):
        load_dataset("calibsrc:missing", spec, "calibration")


def test_callable_source_leaves_the_spec_folder_off_sys_path(spec) -> None:
    load_dataset("calibsrc:arrays", spec, "calibration")
    assert str(spec.base_dir) not in sys.path
