"""Labelled boxes (y [N, M, 5]: x1, y1, x2, y2, class; a negative class pads) from every reader that
takes labels: an .npz array, and a module:callable yielding padded arrays or one [M_k, 5] array
per sample. The readers give the same Dataset.labels, padded with rows of -1 to the largest M."""
from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from edgeship.calibration import load_dataset
from edgeship.errors import DataError
from edgeship.spec import ModelSpec

# Four samples with 2, 0, 1 and 3 boxes (corners need not be whole pixels).
EXPECTED = np.array([
    [[0, 0, 10.5, 10, 1], [4, 4, 8, 8, 2], [-1, -1, -1, -1, -1]],
    [[-1, -1, -1, -1, -1]] * 3,
    [[1, 2, 3, 4, 0], [-1, -1, -1, -1, -1], [-1, -1, -1, -1, -1]],
    [[0, 0, 5, 5, 3], [5, 5, 9, 9, 3], [2, 2, 6, 7, 1]],
])

SOURCE = """\
import numpy as np
import torch

BOXES = [np.array([[0, 0, 10.5, 10, 1], [4, 4, 8, 8, 2]]), np.zeros((0, 5)),
         np.array([[1, 2, 3, 4, 0]]), np.array([[0, 0, 5, 5, 3], [5, 5, 9, 9, 3], [2, 2, 6, 7, 1]])]


def image(n):
    return np.zeros((n, 3, 8, 8), np.float32)


def ragged():
    # one [M_k, 5] array (or tensor, or []) per sample; M differs within and across batches
    return [{"image": image(2), "y": [BOXES[0], []]},
            {"image": image(2), "y": (torch.tensor(BOXES[2]), BOXES[3])}]


def padded():
    # [B, M, 5] per batch, M = 2 then 3: the first batch is padded to 3 when batches are joined
    first = np.array([BOXES[0], [[-1] * 5] * 2])
    second = np.concatenate([np.concatenate([BOXES[2], [[-1] * 5] * 2])[None], BOXES[3][None]])
    return [{"image": image(2), "y": first}, {"image": image(2), "y": second}]


def integer_boxes():
    return [{"image": image(1), "y": [np.array([[1, 2, 3, 4, 0]], np.int32)]}]


def nan_boxes():
    nan = np.array([[0, np.nan, 1, 1, 0]])
    return [{"image": image(1), "y": [BOXES[2]]}, {"image": image(2), "y": [BOXES[3], nan]}]


def too_few_labels():
    return [{"image": image(2), "y": [BOXES[2]]}]


def mixed_shapes():
    return [{"image": image(1), "y": np.array([1])}, {"image": image(1), "y": np.zeros((1, 2, 5))}]
"""


@pytest.fixture
def spec(tmp_path: Path) -> ModelSpec:
    (tmp_path / "boxsrc.py").write_text(textwrap.dedent(SOURCE))
    return ModelSpec(name="m", entry="m:build", inputs=[{"name": "image", "shape": [1, 3, 8, 8]}], base_dir=tmp_path,
                     task="detection")


@pytest.mark.parametrize("source", ["boxsrc:ragged", "boxsrc:padded", "eval.npz"])
def test_every_reader_gives_the_same_padded_box_labels(spec: ModelSpec, source: str) -> None:
    np.savez(spec.base_dir / "eval.npz", x=np.zeros((4, 3, 8, 8), np.float32), y=EXPECTED.astype(np.float32))
    data = load_dataset(source if ":" in source else spec.base_dir / source, spec, "evaluation")
    assert data.labels.dtype == np.float64 and data.labels.tolist() == EXPECTED.tolist()


def test_integer_boxes_are_read_as_int64(spec: ModelSpec) -> None:
    np.savez(spec.base_dir / "eval.npz", x=np.zeros((4, 3, 8, 8), np.float32), y=EXPECTED.astype(np.int16))
    from_npz = load_dataset(spec.base_dir / "eval.npz", spec, "evaluation").labels
    assert from_npz.dtype == np.int64 and from_npz[0, 0].tolist() == [0, 0, 10, 10, 1]
    from_callable = load_dataset("boxsrc:integer_boxes", spec, "evaluation").labels
    assert from_callable.dtype == np.int64 and from_callable.tolist() == [[[1, 2, 3, 4, 0]]]


def test_a_sample_of_labels_keeps_its_boxes(spec: ModelSpec) -> None:
    np.savez(spec.base_dir / "eval.npz", x=np.arange(4, dtype=np.float32)[:, None, None, None] * np.ones((4, 3, 8, 8),
             np.float32), y=EXPECTED)
    data = load_dataset(spec.base_dir / "eval.npz", spec, "evaluation", limit=2, seed=3)
    kept = data.inputs["image"][:, 0, 0, 0].astype(int)
    assert data.labels.tolist() == EXPECTED[kept].tolist()


def test_npz_boxes_with_nan_are_refused_naming_file_key_and_count(spec: ModelSpec) -> None:
    y = EXPECTED.copy()
    y[3, 1, :2] = np.nan
    np.savez(spec.base_dir / "eval.npz", x=np.zeros((4, 3, 8, 8), np.float32), y=y)
    with pytest.raises(DataError, match=r"eval\.npz: array 'y' holds 2 non-finite value\(s\) \(2 NaN, 0 inf\) of 60"):
        load_dataset(spec.base_dir / "eval.npz", spec, "evaluation")


def test_npz_float_labels_that_are_not_boxes_are_still_refused(spec: ModelSpec) -> None:
    np.savez(spec.base_dir / "eval.npz", x=np.zeros((4, 3, 8, 8), np.float32), y=np.arange(4.0))
    with pytest.raises(DataError, match=r"eval\.npz: y must be integer class indices \[N\], .* or labelled boxes "
                                        r"\[N, M, 5\] .* got shape \[4\] dtype float64"):
        load_dataset(spec.base_dir / "eval.npz", spec, "evaluation")


@pytest.mark.parametrize(("source", "message"), [
    ("boxsrc:nan_boxes", r"^data source boxsrc:nan_boxes: batch 1: y holds 1 non-finite value\(s\) \(1 NaN, 0 inf\)"),
    ("boxsrc:too_few_labels", r"^data source boxsrc:too_few_labels: batch 0 holds 2 samples but y has shape "
                              r"\[1, 1, 5\]"),
    ("boxsrc:mixed_shapes", r"^data source boxsrc:mixed_shapes: batches hold labels \(y\) of different shapes per "
                            r"sample: \[2, 5\], \[\]"),
])
def test_callable_box_labels_that_do_not_fit_are_refused(spec: ModelSpec, source: str, message: str) -> None:
    with pytest.raises(DataError, match=message):
        load_dataset(source, spec, "evaluation")
