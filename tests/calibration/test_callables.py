"""module:callable data sources: batches as arrays, tensors, tuples or dicts; errors name the source."""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from edgeship.calibration import load_dataset
from edgeship.calibration.datasets import evaluation_samples
from edgeship.errors import DataError
from edgeship.profile import EvaluationSettings
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

READ = []

def counted():
    while len(READ) < 20_000:  # "never ends": a reader that reads it all fails at the guard, not out of memory
        READ.append(1)
        yield np.ones((1, 3, 8, 8), np.float32)
    raise RuntimeError("read to the end of a source that never ends")

def empty_batches():
    for _ in range(10_000):  # batches that never add up to a limit (a reader that reads on fails at the end)
        yield np.ones((0, 3, 8, 8), np.float32)
    raise RuntimeError("read to the end of a source that never ends")

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


def test_callable_never_ending_is_read_only_up_to_the_evaluation_samples(spec) -> None:
    sys.modules.pop("calibsrc", None)  # its READ counts from 0
    data = evaluation_samples("calibsrc:counted", spec, EvaluationSettings(samples=16))
    assert len(data) == 16 and data.source == "calibsrc:counted (its first 16 samples)"
    assert len(sys.modules["calibsrc"].READ) == 16  # read lazily: not one batch more than needed


def test_callable_never_ending_without_samples_is_refused_at_the_cap(spec) -> None:
    with pytest.raises(DataError) as e:
        evaluation_samples("calibsrc:counted", spec, EvaluationSettings())
    assert str(e.value) == ("data source calibsrc:counted: yields more than 10000 samples (does it ever end?); a "
                            "data source is read up to the profile's [evaluation] samples: set it to how many to use")


def test_callable_batches_without_samples_are_refused(spec) -> None:
    with pytest.raises(DataError, match=r"calibsrc:empty_batches: batch 0 holds no samples \(shape \[0, 3, 8, 8\]\)"):
        load_dataset("calibsrc:empty_batches", spec, "calibration", limit=4)
