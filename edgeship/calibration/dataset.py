"""A data set of model inputs: one array per input, N samples along the first axis, and optional
labels: int64 class indices [N] or masks [N, H, W], or labelled boxes [N, M, 5] (int64 or
float64; rows of x1, y1, x2, y2, class, a negative class padding). Every reader (``.npz``, image
folder, ``module:callable``) returns one."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from edgeship import stopping
from edgeship.errors import DataError
from edgeship.metrics import chunks


@dataclass
class Dataset:
    """N samples: ``inputs[name]`` is an array of shape [N, *sample_shape]; ``labels`` is [N, ...] or None."""

    inputs: dict[str, np.ndarray]
    labels: np.ndarray | None
    source: str

    def __len__(self) -> int:
        return len(next(iter(self.inputs.values())))

    def take(self, n: int | None, seed: int = 0) -> Dataset:
        """A seeded, sorted sample of at most ``n`` items (all of them when ``n`` is None)."""
        if n is None or n >= len(self):
            return self
        idx = sample_indices(len(self), n, seed)
        labels = None if self.labels is None else self.labels[idx]
        return Dataset({k: v[idx] for k, v in self.inputs.items()}, labels, f"{self.source} ({n} sampled)")

    def fingerprint(self) -> str:
        """sha256 of the samples themselves (names, shapes, dtypes, bytes) and the labels: a cache key."""
        h = hashlib.sha256()
        arrays = sorted(self.inputs.items()) + ([] if self.labels is None else [("__labels__", self.labels)])
        for name, array in arrays:
            h.update(f"{name}:{array.dtype.str}:{list(array.shape)};".encode())
            h.update(np.ascontiguousarray(array))  # its buffer: no copy (a memory-mapped array is paged in)
        return h.hexdigest()

    def inputs_sha256(self) -> str:
        """sha256 of the inputs alone (names, dtypes, shapes, bytes): results.json's ``inputs_sha256``,
        what --resume compares and a bundle's sample is checked against."""
        h = hashlib.sha256()
        for name in sorted(self.inputs):
            a = np.ascontiguousarray(self.inputs[name])
            h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
            h.update(a)
        return h.hexdigest()

    def batches(self, batch: int) -> list[dict[str, np.ndarray]]:
        """Consecutive batches of ``batch`` samples; the last one is padded by repeating its tail."""
        out = []
        for start in range(0, len(self), batch):
            part = {k: v[start:start + batch] for k, v in self.inputs.items()}
            short = batch - len(next(iter(part.values())))
            if short:
                part = {k: np.concatenate([v, np.repeat(v[-1:], short, axis=0)]) for k, v in part.items()}
            out.append(part)
        return out


def check_counts(data: Dataset) -> Dataset:
    """``data``, after checking that every array holds the same number of samples, and some."""
    counts = {len(v) for v in data.inputs.values()}
    if len(counts) != 1 or (data.labels is not None and len(data.labels) not in counts):
        raise DataError(f"{data.source}: arrays hold different sample counts: "
                        + ", ".join(f"{k} {len(v)}" for k, v in data.inputs.items())
                        + ("" if data.labels is None else f", y {len(data.labels)}"))
    if counts == {0}:
        raise DataError(f"{data.source}: holds no samples")
    return data


def refuse_non_finite(array: np.ndarray, what: str, after: str = "") -> None:
    """DataError naming ``what`` (file and key) and the count when ``array`` holds NaN or inf:
    NaN inputs make every accuracy figure NaN, and inf breaks int8 calibration ranges."""
    a = np.asarray(array)
    if not np.issubdtype(a.dtype, np.inexact):
        return
    bad = 0
    for chunk in chunks(a):  # an .npz's samples are read (paged in) here: each chunk is progress
        bad += int(chunk.size - np.count_nonzero(np.isfinite(chunk)))
        stopping.progressed()
    if bad:
        nan = sum(int(np.count_nonzero(np.isnan(c))) for c in chunks(a))
        raise DataError(f"{what} holds {bad} non-finite value(s) ({nan} NaN, {bad - nan} inf) of {a.size}{after}; "
                        "calibration and evaluation data must be finite numbers")


def sample_indices(n: int, limit: int | None, seed: int) -> np.ndarray:
    """Sorted indices of a seeded draw of at most ``limit`` of ``n`` items: what ``Dataset.take``
    keeps, so a reader that draws before decoding keeps the same samples."""
    if limit is None or limit >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, limit, replace=False))
