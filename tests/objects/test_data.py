"""Data handed over as objects (a DataLoader, a list, arrays) as the .npz files a model spec reads."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from edgeship.calibration.npz import read_npz
from edgeship.errors import DataError
from edgeship.objects.data import dataset_of, write_npz
from edgeship.spec import ModelSpec


def spec(*shapes: list[int]) -> ModelSpec:
    names = ["input"] if len(shapes) == 1 else [f"input_{i}" for i in range(len(shapes))]
    return ModelSpec(name="m", entry="m:build", inputs=[{"name": n, "shape": s} for n, s in zip(names, shapes)])


X = torch.rand(20, 3, 4, 4, generator=torch.Generator().manual_seed(0))
Y = torch.arange(20) % 3


def test_dataset_of_a_dataloader_of_inputs_and_labels_keeps_both() -> None:
    data = dataset_of(DataLoader(TensorDataset(X, Y), batch_size=6), spec([1, 3, 4, 4]), "evaluation", None)
    assert np.array_equal(data.inputs["input"], X.numpy()) and np.array_equal(data.labels, Y.numpy())
    assert data.labels.dtype == np.int64 and data.inputs["input"].dtype == np.float32


def test_dataset_of_calibration_keeps_no_labels() -> None:
    data = dataset_of(DataLoader(TensorDataset(X, Y), batch_size=6), spec([1, 3, 4, 4]), "calibration", None)
    assert data.labels is None and len(data) == 20


def test_dataset_of_an_iterable_is_read_up_to_the_limit_only() -> None:
    read = []

    def batches():
        for i in range(100):
            read.append(i)
            yield X[:4]
    data = dataset_of(batches(), spec([1, 3, 4, 4]), "calibration", 10)
    assert len(data) == 10 and len(read) == 3


def test_dataset_of_a_dataloader_draws_the_samples_a_build_draws_from_an_npz_of_them_all(tmp_path: Path) -> None:
    np.savez(tmp_path / "all.npz", x=X.numpy(), y=Y.numpy())
    from_npz = read_npz(tmp_path / "all.npz", spec([1, 3, 4, 4]), limit=8, seed=5)
    loader = DataLoader(TensorDataset(X, Y), batch_size=3, shuffle=True)
    for value in (loader, TensorDataset(X, Y)):
        data = dataset_of(value, spec([1, 3, 4, 4]), "evaluation", 8, seed=5)
        assert np.array_equal(data.inputs["input"], from_npz.inputs["input"])
        assert np.array_equal(data.labels, from_npz.labels) and not np.array_equal(data.labels, Y[:8].numpy())


def test_dataset_of_a_dataloader_applies_its_collate_fn() -> None:
    def collate(samples):
        return torch.stack([x for x, _ in samples]) * 0 + 7, torch.tensor([int(y) for _, y in samples])
    data = dataset_of(DataLoader(TensorDataset(X, Y), batch_size=4, collate_fn=collate), spec([1, 3, 4, 4]),
                      "evaluation", 6)
    assert len(data) == 6 and np.all(data.inputs["input"] == 7)


@pytest.mark.parametrize("value", [list(X), [x.numpy() for x in X], [(x, int(y)) for x, y in zip(X, Y)]],
                         ids=["tensors", "arrays", "pairs"])
def test_dataset_of_single_samples_gains_the_batch_axis(value) -> None:
    data = dataset_of(value, spec([1, 3, 4, 4]), "evaluation", None)
    assert np.array_equal(data.inputs["input"], X.numpy())
    assert (data.labels is None) == (not isinstance(value[0], tuple))


def test_dataset_of_whole_arrays_and_dicts_takes_every_sample() -> None:
    assert np.array_equal(dataset_of(X.numpy(), spec([1, 3, 4, 4]), "calibration", 5).inputs["input"], X.numpy())
    data = dataset_of({"input": X, "y": Y}, spec([1, 3, 4, 4]), "evaluation", 5)
    assert len(data) == 20 and np.array_equal(data.labels, Y.numpy())


def test_dataset_of_two_input_items_in_each_tuple_form() -> None:
    two = spec([1, 3, 4, 4], [1, 5])
    b = torch.rand(20, 5)
    for item in ((X[:4], b[:4], Y[:4]), ((X[:4], b[:4]), Y[:4]), {"input_0": X[:4], "input_1": b[:4], "y": Y[:4]}):
        data = dataset_of([item], two, "evaluation", None)
        assert np.array_equal(data.inputs["input_1"], b[:4].numpy()) and np.array_equal(data.labels, Y[:4].numpy())


@pytest.mark.parametrize(("value", "message"), [
    (42, r"evaluation= \(int\): not data edgeship takes; evaluation= is an array or tensor"),
    (["a"], r"evaluation= \(list\): item 0 is a str; an item is a tensor or array"),
    ([(X[:2], Y[:2], Y[:2])], r"item 0 holds 3 elements; the model takes 1 input\(s\)"),
    ([torch.rand(2, 3, 5, 5)], r"evaluation= \(list\): input 'input' samples have shape \[3, 5, 5\] .* the model takes "
                               r"\[3, 4, 4\] per sample"),
    ([{"image": X[:2]}], r"item 0 has keys image; expected input"),
    ([], r"evaluation= \(list\): yielded no batches"),
])
def test_dataset_of_what_edgeship_does_not_take_is_a_data_error_naming_the_argument(value, message) -> None:
    with pytest.raises(DataError, match=message):
        dataset_of(value, spec([1, 3, 4, 4]), "evaluation", None)


def test_dataset_of_non_finite_samples_is_refused_as_a_spec_data_file_is() -> None:
    bad = X.clone()
    bad[3, 0, 0, 0] = float("nan")
    with pytest.raises(DataError, match=r"calibration= \(DataLoader\): input 'input' holds 1 non-finite value\(s\) "
                                        r"\(1 NaN, 0 inf\).*must be finite numbers"):
        dataset_of(DataLoader(TensorDataset(bad), batch_size=8), spec([1, 3, 4, 4]), "calibration", None)


def test_dataset_of_a_loader_that_raises_names_the_argument() -> None:
    def broken():
        yield X[:2]
        raise OSError("disk gone")
    with pytest.raises(DataError, match=r"calibration= \(generator\): iterating it raised OSError: disk gone"):
        dataset_of(broken(), spec([1, 3, 4, 4]), "calibration", None)


def test_write_npz_writes_the_same_bytes_for_the_same_samples_and_read_npz_reads_them(tmp_path: Path) -> None:
    data = dataset_of(DataLoader(TensorDataset(X, Y), batch_size=6), spec([1, 3, 4, 4]), "evaluation", None)
    write_npz(tmp_path / "a.npz", data)
    write_npz(tmp_path / "b.npz", data)
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
    back = read_npz(tmp_path / "a.npz", spec([1, 3, 4, 4]))
    assert isinstance(back.inputs["input"], np.memmap)   # stored uncompressed: read where drawn
    assert np.array_equal(back.inputs["input"], X.numpy()) and np.array_equal(back.labels, Y.numpy())
