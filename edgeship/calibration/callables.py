"""``module:callable`` data sources: a function returning an iterable of input batches.

Each batch is an array or tensor (one-input models), a tuple or list with one per input, or a
dict keyed by input name, optionally with ``y`` (int64 labels). The model spec's folder is
importable while the source is read. Batches are read until the iterable ends or ``limit``
samples are in hand.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from edgeship.calibration.dataset import Dataset, refuse_non_finite
from edgeship.entry import import_entry, importable
from edgeship.errors import DataError, first_line
from edgeship.spec import ModelSpec


def call_source(entry: str, spec: ModelSpec) -> Any:
    """Import ``module:callable`` (the spec's folder on the path) and call it; DataError on failure."""
    source: Any = import_entry(entry, spec.base_dir, DataError, "data source")
    try:
        return source()
    except Exception as e:  # the user's code: report its failure as bad data input
        raise DataError(f"data source {entry}: {type(e).__name__}: {first_line(e)}") from None


def read_callable(entry: str, spec: ModelSpec, limit: int | None = None) -> Dataset:
    """A Dataset from the batches ``entry`` yields (at most ``limit`` samples)."""
    names = [i.name for i in spec.inputs]
    parts: dict[str, list[np.ndarray]] = {n: [] for n in names}
    labels: list[np.ndarray] = []
    count = 0
    try:
        with importable(spec.base_dir):  # a generator may import the folder's modules as it runs
            for i, batch in enumerate(call_source(entry, spec)):
                arrays, y = _split(batch, names, entry, i)
                for name, array in arrays.items():
                    parts[name].append(array)
                labels += [] if y is None else [y]
                count += len(arrays[names[0]])
                if limit is not None and count >= limit:
                    break
    except DataError:
        raise
    except Exception as e:
        raise DataError(f"data source {entry}: iterating it raised {type(e).__name__}: {first_line(e)}") from None
    if not count:
        raise DataError(f"data source {entry}: yielded no batches")
    inputs = {n: np.concatenate(parts[n])[:limit] for n in names}
    y_all = np.concatenate(labels)[:limit] if labels and len(labels) == len(parts[names[0]]) else None
    return Dataset(inputs, y_all, entry)


def _split(batch: Any, names: list[str], entry: str, index: int) -> tuple[dict[str, np.ndarray], Any]:
    """One batch as {input name: array} and optional labels."""
    if isinstance(batch, dict):
        missing = [n for n in names if n not in batch]
        if missing:
            raise DataError(f"data source {entry}: batch {index} has keys {', '.join(map(str, batch))}; "
                            f"expected {', '.join(names)} (and optionally y)")
        labels = batch.get("y")
        return {n: _array(batch[n]) for n in names}, None if labels is None else _labels(labels, entry, index)
    items = list(batch) if isinstance(batch, (tuple, list)) else [batch]
    if len(items) != len(names):
        raise DataError(f"data source {entry}: batch {index} holds {len(items)} arrays; the model takes "
                        f"{len(names)} input(s): {', '.join(names)}")
    return {n: _array(a) for n, a in zip(names, items)}, None


def _labels(value: Any, entry: str, index: int) -> np.ndarray:
    """A batch's ``y`` as int64 class indices; DataError for NaN/inf or fractional values (a cast
    would turn them into arbitrary classes)."""
    y = _array(value)
    refuse_non_finite(y, f"data source {entry}: batch {index}: y")
    if np.issubdtype(y.dtype, np.inexact) and not np.array_equal(y, np.round(y)):
        raise DataError(f"data source {entry}: batch {index}: y holds fractional values; labels are integer "
                        "class indices")
    return y.astype(np.int64)


def _array(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)
