"""``module:callable`` data sources: a function returning an iterable of input batches.

Each batch is an array or tensor (one-input models), a tuple or list with one per input, or a
dict keyed by input name, optionally with ``y`` labels: class indices [B] or class masks [B, H, W]
(whole numbers, read as int64), or labelled boxes for task detection, either an array [B, M, 5]
or a list with one [M_k, 5] array per sample, each row (x1, y1, x2, y2, class) and rows with a
negative class padding. Boxes keep their dtype (float64 or int64); batches of boxes are padded
with rows of -1 to the largest M of the data set. The task's check decides whether ``y`` fits
it. The model spec's folder is importable while the source is read. Batches are read lazily, one at a
time, until the iterable ends or ``limit`` samples are in hand: a generator that never ends is read only
as far as needed. Without a limit it is read up to ``MAX_UNCOUNTED`` samples, and one that yields more is
refused (DataError: set the profile's samples).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import TypeGuard, cast

import numpy as np

from edgeship import stopping
from edgeship.calibration.dataset import Dataset, refuse_non_finite
from edgeship.config import MAX_UNCOUNTED
from edgeship.entry import import_entry, importable
from edgeship.errors import DataError, first_line
from edgeship.spec import ModelSpec


def call_source(entry: str, spec: ModelSpec, args: tuple[object, ...] = ()) -> Iterable[object]:
    """Import ``module:callable`` (the spec's folder on the path) and call it with ``args``;
    DataError on failure."""
    source = cast(Callable[..., Iterable[object]], import_entry(entry, spec.base_dir, DataError, "data source"))
    try:
        return source(*args)
    except Exception as e:  # the user's code: report its failure as bad data input
        raise DataError(f"data source {entry}: {type(e).__name__}: {first_line(e)}") from None


def read_callable(entry: str, spec: ModelSpec, limit: int | None = None, args: tuple[object, ...] = (),
                  role: str = "evaluation") -> Dataset:
    """A Dataset from the batches ``entry(*args)`` yields: the first ``limit`` samples, or without a limit
    every sample up to ``MAX_UNCOUNTED`` (DataError naming the profile's ``[role] samples`` when it yields
    more). A batch without samples is refused (read forever, they would never add up to the limit)."""
    with importable(spec.base_dir):  # a generator may import the folder's modules as it runs
        return read_batches(lambda: call_source(entry, spec, args), spec, f"data source {entry}", entry, limit, role)


def read_batches(batches: Callable[[], Iterable[object]], spec: ModelSpec, what: str, name: str,
                 limit: int | None = None, role: str = "evaluation") -> Dataset:
    """A Dataset from the batches the iterable ``batches()`` returns, read lazily as ``read_callable``
    says; messages name the source as ``what`` (``data source gen:make``), the Dataset as ``name``."""
    names = [i.name for i in spec.inputs]
    parts: dict[str, list[np.ndarray]] = {n: [] for n in names}
    labels: list[np.ndarray] = []
    count, most = 0, MAX_UNCOUNTED if limit is None else limit
    try:
        items = iter(batches())
        for i, batch in enumerate(islice(items, most)):  # each batch adds a sample at least
            arrays, y = _split(batch, names, what, i)
            for key, array in arrays.items():
                parts[key].append(array)
            labels += [] if y is None else [y]
            count += len(arrays[names[0]])
            stopping.progressed()  # a batch read: the stage's watchdog waits from here
            if count >= most:
                break
        if limit is None and (count > most or (count == most and _more(items))):
            raise DataError(f"{what}: yields more than {MAX_UNCOUNTED} samples (does it ever end?); "
                            f"a data source is read up to the profile's [{role}] samples: set it to how many to "
                            "use")
    except DataError:
        raise
    except Exception as e:
        raise DataError(f"{what}: iterating it raised {type(e).__name__}: {first_line(e)}") from None
    if not count:
        raise DataError(f"{what}: yielded no batches")
    inputs = {n: np.concatenate(parts[n])[:limit] for n in names}
    y_all = _joined(labels, what)[:limit] if labels and len(labels) == len(parts[names[0]]) else None
    return Dataset(inputs, y_all, name if limit is None or count < limit else f"{name} (its first {limit} samples)")


def _more(batches: Iterator[object]) -> bool:
    """Whether ``batches`` yields another batch (that one is read, and dropped)."""
    end = object()
    return next(batches, end) is not end


def _split(batch: object, names: list[str], what: str, index: int) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """One batch as {input name: array} and optional labels."""
    if isinstance(batch, dict):
        missing = [n for n in names if n not in batch]
        if missing:
            raise DataError(f"{what}: batch {index} has keys {', '.join(map(str, batch))}; "
                            f"expected {', '.join(names)} (and optionally y)")
        arrays, labels = {n: _array(batch[n]) for n in names}, batch.get("y")
        return _some(arrays, what, index), None if labels is None else _labels(labels, what, index,
                                                                                len(arrays[names[0]]))
    items = list(batch) if isinstance(batch, (tuple, list)) else [batch]
    if len(items) != len(names):
        raise DataError(f"{what}: batch {index} holds {len(items)} arrays; the model takes "
                        f"{len(names)} input(s): {', '.join(names)}")
    return _some({n: _array(a) for n, a in zip(names, items)}, what, index), None


def _some(arrays: dict[str, np.ndarray], what: str, index: int) -> dict[str, np.ndarray]:
    """``arrays`` (one batch) when it holds at least one sample; DataError otherwise."""
    first = next(iter(arrays.values()))
    if first.ndim == 0 or not len(first):
        raise DataError(f"{what}: batch {index} holds no samples (shape {list(first.shape)}); each batch "
                        "holds one sample or more along its first axis")
    return arrays


def _labels(value: object, what: str, index: int, samples: int) -> np.ndarray:
    """A batch's ``y`` for its ``samples`` samples: labelled boxes [B, M, 5] as they are (float64
    or int64: the task's check reads their classes and corners), anything else as int64 class
    indices; DataError for another sample count, NaN/inf, or fractional values outside boxes (a
    cast would turn them into arbitrary classes)."""
    y = _box_list(value, what, index) if _is_box_list(value) else _array(value)
    if y.ndim == 0 or len(y) != samples:
        raise DataError(f"{what}: batch {index} holds {samples} samples but y has shape "
                        f"{list(y.shape)}; labels are one per sample")
    refuse_non_finite(y, f"{what}: batch {index}: y")
    if _is_boxes(y) and np.issubdtype(y.dtype, np.floating):
        return y.astype(np.float64)
    if np.issubdtype(y.dtype, np.inexact) and not np.array_equal(y, np.round(y)):
        raise DataError(f"{what}: batch {index}: y holds fractional values; labels are integer class "
                        "indices (or boxes [B, M, 5] of x1, y1, x2, y2, class)")
    return y.astype(np.int64)


def _is_boxes(y: np.ndarray) -> bool:
    """Labelled boxes [B, M, 5]: M rows of (x1, y1, x2, y2, class) per sample."""
    return y.ndim == 3 and y.shape[-1] == 5


def _is_box_list(value: object) -> TypeGuard[Sequence[object]]:
    """A list with one [M_k, 5] array of labelled boxes per sample ([] or an empty array: none)."""
    if not isinstance(value, (list, tuple)) or not value:
        return False
    parts = [_array(v) for v in value]
    return all(p.size == 0 or (p.ndim == 2 and p.shape[1] == 5) for p in parts)


def _box_list(value: Sequence[object], what: str, index: int) -> np.ndarray:
    """Per-sample [M_k, 5] box arrays as one [B, max M_k, 5] array padded with rows of -1."""
    parts = [_array(v) for v in value]
    kinds = {p.dtype for p in parts if p.size} or {np.dtype(np.int64)}
    if not all(np.issubdtype(k, np.integer) or np.issubdtype(k, np.floating) for k in kinds):
        raise DataError(f"{what}: batch {index}: y holds box arrays of dtype "
                        f"{', '.join(sorted(map(str, kinds)))}; boxes are numbers")
    dtype = np.float64 if any(np.issubdtype(k, np.floating) for k in kinds) else np.int64
    return np.stack(_pad_boxes([p.reshape(-1, 5).astype(dtype) for p in parts]))


def _pad_boxes(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Box arrays [..., M, 5] (int64 or float64) padded with rows of -1 to the largest M among them."""
    most = max(a.shape[-2] for a in arrays)
    return [np.concatenate([a, np.full((*a.shape[:-2], most - a.shape[-2], 5), -1, a.dtype)], axis=-2)
            for a in arrays]


def _joined(labels: list[np.ndarray], what: str) -> np.ndarray:
    """Every batch's labels as one array: boxes padded with rows of -1 to the largest M of the data
    set, other labels as they are; DataError when batches hold labels of different shapes."""
    if all(_is_boxes(y) for y in labels):
        return np.concatenate(_pad_boxes(labels))
    shapes = sorted({str(list(y.shape[1:])) for y in labels})
    if len(shapes) > 1:
        raise DataError(f"{what}: batches hold labels (y) of different shapes per sample: "
                        f"{', '.join(shapes)}")
    return np.concatenate(labels)


def _array(value: object) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)
