"""Calibration and evaluation data handed over as Python objects, made into the ``.npz`` files a
model spec's ``[data]`` names.

What is taken (``role``: calibration or evaluation):

- an array or tensor ``[N, ...]``: every sample of a one-input model;
- a dict ``{input name: array, "y": labels}``: every sample, by input name;
- a map-style ``torch.utils.data.Dataset`` of samples, or any iterable (a ``DataLoader``, a list, a
  generator) of batches or single samples. An item is a tensor or array (one-input model), a tuple
  ``(inputs..., label)`` (a DataLoader over a ``TensorDataset(x, y)`` yields ``[x, y]``) or
  ``((inputs...), label)``, or a dict as above. A batch has the rank of the input's shape, a single
  sample one less.

How many: the profile's ``samples`` (``limit``). Where the samples can be counted and indexed (a
map-style ``torch.utils.data.Dataset``, a DataLoader over one) those are the samples a build draws from
an .npz holding them all (seeded, ``sample_indices``), and only they are read: the same samples, so the
same artifacts, as a model spec whose .npz holds the data set. Any other iterable is read from its start,
lazily, as a ``module:callable`` data source is: its first ``limit`` samples.

The samples are checked against the model's inputs as a spec's data is (shape per sample, dtype,
finite values: ``calibration.datasets.check_fits``) and written uncompressed with fixed entry times, so
the same samples give the same file (the stage cache keys on its sha256).
"""
from __future__ import annotations

import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from edgeship.calibration.callables import read_batches
from edgeship.calibration.dataset import Dataset, sample_indices
from edgeship.calibration.datasets import check_fits
from edgeship.errors import DataError
from edgeship.spec import ModelSpec

FORMS = ("an array or tensor [N, ...] of every sample (one-input model), a dict {input name: array, \"y\": labels}, "
         "a torch Dataset or an iterable of batches or samples (a DataLoader, a list, a generator), or a path to an "
         ".npz file or image folder")
ITEM_FORMS = ("a tensor or array (a batch, or one sample), a tuple (inputs..., label) or ((inputs...), label), or "
              "a dict {input name: array, \"y\": labels}")


def dataset_of(value: object, spec: ModelSpec, role: str, limit: int | None, seed: int = 0) -> Dataset:
    """``value`` (not None, not a path) as a checked Dataset for the spec's inputs, at most ``limit``
    samples (drawn with ``seed`` where the samples can be counted and indexed); DataError naming ``role``
    (the argument) and what is taken."""
    what = f"{role}= ({type(value).__name__})"
    names = [i.name for i in spec.inputs]
    if _is_array(value):
        if len(names) != 1:
            raise DataError(f"{what}: one array holds the samples of a one-input model; this model takes "
                            f"{len(names)} inputs ({', '.join(names)}): pass a dict {{input name: array}}")
        data = _whole({names[0]: value}, spec, what)
    elif isinstance(value, dict):
        data = _whole(value, spec, what)
    elif (drawn := drawn_items(value, limit, seed)) is not None:
        data = read_batches(lambda: _batches(drawn, spec, what), spec, what, what, limit, role)
    elif isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
        data = read_batches(lambda: _batches(value, spec, what), spec, what, what, limit, role)
    else:
        raise DataError(f"{what}: not data edgeship takes; {role}= is {FORMS}")
    fitted = check_fits(data, spec)
    return fitted if role == "evaluation" else Dataset(fitted.inputs, None, fitted.source)


def _whole(arrays: dict[str, object], spec: ModelSpec, what: str) -> Dataset:
    """Every sample at once, as one batch: all of them are written (the build draws from the file as
    from any .npz), however many."""
    first = arrays.get(spec.inputs[0].name)
    count = len(first) if _is_array(first) and np.ndim(first) else None  # type: ignore[arg-type]
    data = read_batches(lambda: [arrays], spec, what, what, count)
    return Dataset(data.inputs, data.labels, what)


def drawn_items(value: object, limit: int | None, seed: int) -> Iterator[object] | None:
    """For a map-style ``torch.utils.data.Dataset`` (it has a length and is indexed) or a DataLoader over
    one: the samples ``limit`` of them drawn with ``seed`` (``sample_indices``, as a build draws from an
    .npz of them all), a DataLoader's collated by its ``collate_fn`` in its batch size. Read lazily; None
    for any other iterable (read from its start)."""
    from torch.utils.data import BatchSampler, DataLoader, IterableDataset
    from torch.utils.data import Dataset as TorchDataset

    loader = value if isinstance(value, DataLoader) else None
    dataset = loader.dataset if loader is not None else value
    if not isinstance(dataset, TorchDataset) or isinstance(dataset, IterableDataset) or not hasattr(dataset, "__len__"):
        return None
    if loader is not None and loader.batch_sampler is not None and type(loader.batch_sampler) is not BatchSampler:
        return None  # a batch sampler of its own decides what a batch is
    indices = [int(i) for i in sample_indices(len(dataset), limit, seed)]
    if loader is None:
        return (dataset[i] for i in indices)
    size = loader.batch_size or 1
    return (loader.collate_fn([dataset[i] for i in indices[start:start + size]]) if loader.batch_size else
            loader.collate_fn(dataset[indices[start]]) for start in range(0, len(indices), size))


def _batches(items: Iterable[object], spec: ModelSpec, what: str) -> Iterator[dict[str, object]]:
    """Each item as a batch dict {input name: array, "y": labels}; a single sample gains its batch axis."""
    names, ranks = [i.name for i in spec.inputs], [len(i.shape) for i in spec.inputs]
    for index, item in enumerate(items):
        inputs, label = _parts(item, names, what, index)
        arrays = [_array(a) for a in inputs]
        single = arrays[0].ndim == ranks[0] - 1
        batch: dict[str, object] = {n: a[None] if single else a for n, a in zip(names, arrays)}
        if label is not None:
            batch["y"] = _array(label)[None] if single else label
        yield batch


def _parts(item: object, names: list[str], what: str, index: int) -> tuple[list[object], object | None]:
    """An item's inputs, in the order of ``names``, and its label (None: none)."""
    n = len(names)
    if isinstance(item, dict):
        missing = [name for name in names if name not in item]
        if missing:
            raise DataError(f"{what}: item {index} has keys {', '.join(map(str, item))}; expected "
                            f"{', '.join(names)} (and optionally y)")
        return [item[name] for name in names], item.get("y")
    if _is_array(item):
        return [item], None
    if isinstance(item, (tuple, list)):
        if len(item) == 2 and isinstance(item[0], (tuple, list)) and len(item[0]) == n:
            return list(item[0]), item[1]
        if len(item) == n:
            return list(item), None
        if len(item) == n + 1:
            return list(item[:n]), item[n]
        raise DataError(f"{what}: item {index} holds {len(item)} elements; the model takes {n} input(s), so an item "
                        f"holds {n} array(s), optionally followed by its label")
    raise DataError(f"{what}: item {index} is a {type(item).__name__}; an item is {ITEM_FORMS}")


def _is_array(value: object) -> bool:
    return isinstance(value, np.ndarray) or (hasattr(value, "detach") and hasattr(value, "shape"))


def _array(value: object) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def write_npz(path: Path, data: Dataset) -> None:
    """``data`` as an .npz (one array per input name, ``y`` for labels), stored uncompressed with fixed
    entry times: the same samples give the same bytes. ``path`` must be new."""
    arrays = {**data.inputs, **({"y": data.labels} if data.labels is not None else {})}
    with open(path, "xb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as zf:
        for name, array in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            with zf.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.ascontiguousarray(array), allow_pickle=False)
