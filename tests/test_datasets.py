"""Data sets: .npz reading, shape and dtype checks that name the file and both shapes."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeship.calibration import load_dataset, random_dataset
from edgeship.errors import DataError


def test_dataset_npz_loads_inputs_and_labels(tiny_spec, tiny_project: Path) -> None:
    data = load_dataset(tiny_project / "eval.npz", tiny_spec, "evaluation")
    assert len(data) == 32 and data.inputs["image"].shape == (32, 3, 16, 16) and data.labels.dtype == np.int64


def test_dataset_wrong_shape_names_file_and_both_shapes(tiny_spec, tmp_path: Path) -> None:
    np.savez(tmp_path / "bad.npz", x=np.zeros((4, 3, 8, 8), np.float32))
    with pytest.raises(DataError) as e:
        load_dataset(tmp_path / "bad.npz", tiny_spec, "calibration")
    msg = str(e.value)
    assert "bad.npz" in msg and "[3, 8, 8]" in msg and "[3, 16, 16]" in msg


def test_dataset_integer_data_for_float_input_is_refused(tiny_spec, tmp_path: Path) -> None:
    np.savez(tmp_path / "int.npz", x=np.zeros((4, 3, 16, 16), np.int32))
    with pytest.raises(DataError, match="dtype int32, the model takes float32"):
        load_dataset(tmp_path / "int.npz", tiny_spec, "calibration")


def test_dataset_missing_x_lists_what_is_there(tiny_spec, tmp_path: Path) -> None:
    np.savez(tmp_path / "nox.npz", images=np.zeros((4, 3, 16, 16), np.float32))
    with pytest.raises(DataError, match="missing array.*found images"):
        load_dataset(tmp_path / "nox.npz", tiny_spec, "calibration")


def test_dataset_label_count_must_match(tiny_spec, tmp_path: Path) -> None:
    np.savez(tmp_path / "y.npz", x=np.zeros((4, 3, 16, 16), np.float32), y=np.zeros(3, np.int64))
    with pytest.raises(DataError, match="different sample counts"):
        load_dataset(tmp_path / "y.npz", tiny_spec, "evaluation")


def test_dataset_take_is_seeded_and_batches_pad_the_tail(tiny_spec, tiny_project: Path) -> None:
    data = load_dataset(tiny_project / "eval.npz", tiny_spec, "evaluation")
    a, b = data.take(10, seed=3), data.take(10, seed=3)
    assert np.array_equal(a.inputs["image"], b.inputs["image"]) and len(a) == 10
    parts = a.batches(4)
    assert len(parts) == 3 and parts[-1]["image"].shape[0] == 4


def test_dataset_random_is_deterministic(tiny_spec) -> None:
    assert np.array_equal(random_dataset(tiny_spec, 3).inputs["image"], random_dataset(tiny_spec, 3).inputs["image"])


@pytest.mark.parametrize("content", ["text", "npy", "pickle"])
def test_dataset_npz_that_is_not_a_zip_is_refused_without_talking_of_pickles(tiny_spec, tmp_path: Path,
                                                                           content: str) -> None:
    path = tmp_path / "eval.npz"
    if content == "text":
        path.write_text("garbage\n")
    elif content == "npy":
        with open(path, "wb") as f:
            np.save(f, np.zeros((4, 3, 16, 16), np.float32))
    else:
        import pickle

        path.write_bytes(pickle.dumps({"x": [1, 2]}))
    with pytest.raises(DataError, match=r"eval.npz: not an .npz file") as e:
        load_dataset(path, tiny_spec, "evaluation")
    assert "pickle" not in str(e.value)
