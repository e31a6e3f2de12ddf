"""Data with NaN or inf is refused by every reader, naming the source, the key and the count: NaN
makes every accuracy figure NaN (which passes any "<" gate) and inf breaks int8 calibration ranges."""
from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from edgeship.calibration import load_dataset
from edgeship.errors import DataError
from edgeship.spec import ModelSpec

SOURCE = """\
import numpy as np

def nan_input():
    x = np.ones((4, 3, 8, 8), np.float32)
    x[2, 1, 0, :3] = np.nan
    return [x]

def nan_labels():
    return [{"image": np.ones((2, 3, 8, 8), np.float32), "y": np.array([1.0, np.nan])}]

def fractional_labels():
    return [{"image": np.ones((2, 3, 8, 8), np.float32), "y": np.array([1.0, 2.5])}]

def float_labels():
    return [{"image": np.ones((2, 3, 8, 8), np.float32), "y": np.array([1.0, 3.0])}]
"""


def spec(folder: Path, *names: str, dtype: str = "float32") -> ModelSpec:
    (folder / "nansrc.py").write_text(textwrap.dedent(SOURCE))
    return ModelSpec(name="m", entry="m:build", base_dir=folder,
                     inputs=[{"name": n, "shape": [1, 3, 8, 8], "dtype": dtype} for n in names or ("image",)])


def test_npz_with_nan_or_inf_is_refused_naming_file_key_and_count(tmp_path: Path) -> None:
    x = np.ones((4, 3, 8, 8), np.float32)
    x[0, 0, 0, :2], x[3, 2, 1, 1] = np.nan, -np.inf
    np.savez(tmp_path / "eval.npz", x=x, y=np.arange(4))
    with pytest.raises(DataError, match=r"eval\.npz: array 'x' holds 3 non-finite value\(s\) \(2 NaN, 1 inf\) of 768"):
        load_dataset(tmp_path / "eval.npz", spec(tmp_path), "evaluation")


def test_npz_of_a_multi_input_model_names_the_input_key(tmp_path: Path) -> None:
    good, bad = np.ones((2, 3, 8, 8), np.float32), np.ones((2, 3, 8, 8), np.float32)
    bad[1, 1, 1, 1] = np.inf
    np.savez(tmp_path / "calib.npz", left=good, right=bad)
    with pytest.raises(DataError, match=r"calib\.npz: array 'right' holds 1 non-finite value\(s\)"):
        load_dataset(tmp_path / "calib.npz", spec(tmp_path, "left", "right"), "calibration")


@pytest.mark.parametrize("dtype, limit", [("float32", 1e300), ("float16", 1e5)])
def test_values_beyond_the_specs_dtype_are_refused_not_turned_into_inf(tmp_path: Path, dtype: str,
                                                                       limit: float) -> None:
    x = np.ones((2, 3, 8, 8), np.float64)
    x[0, 0, 0, 0] = limit
    np.savez(tmp_path / "calib.npz", x=x)
    with pytest.raises(DataError, match=rf"input 'image' holds 1 non-finite value\(s\).* after conversion to {dtype}"):
        load_dataset(tmp_path / "calib.npz", spec(tmp_path, dtype=dtype), "calibration")


def test_callable_yielding_nan_inputs_is_refused_naming_the_input(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"^nansrc:nan_input: input 'image' holds 3 non-finite value\(s\)"):
        load_dataset("nansrc:nan_input", spec(tmp_path), "calibration")


@pytest.mark.parametrize("source, message", [
    ("nansrc:nan_labels", r"data source nansrc:nan_labels: batch 0: y holds 1 non-finite value\(s\)"),
    ("nansrc:fractional_labels", r"data source nansrc:fractional_labels: batch 0: y holds fractional values"),
])
def test_callable_labels_that_are_not_class_indices_are_refused(tmp_path: Path, source: str, message: str) -> None:
    with pytest.raises(DataError, match=message):
        load_dataset(source, spec(tmp_path), "evaluation")


def test_callable_whole_number_float_labels_are_read_as_classes(tmp_path: Path) -> None:
    data = load_dataset("nansrc:float_labels", spec(tmp_path), "evaluation")
    assert data.labels.tolist() == [1, 3] and data.labels.dtype == np.int64
