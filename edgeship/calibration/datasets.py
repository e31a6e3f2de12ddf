"""Data sets of model inputs (``.npz`` files, image folders, ``module:callable``), checked against
the model spec's inputs.

A data set holds one array per model input, each with N samples along the first axis (the
input's shape without its batch dimension), and optional int64 labels.
"""
from __future__ import annotations

import hashlib
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgeship.config import ENTRY_PATTERN
from edgeship.errors import DataError
from edgeship.spec import InputSpec, ModelSpec


@dataclass
class Dataset:
    """N samples: ``inputs[name]`` is an array of shape [N, *sample_shape]; ``labels`` is [N] or None."""

    inputs: dict[str, np.ndarray]
    labels: np.ndarray | None
    source: str

    def __len__(self) -> int:
        return len(next(iter(self.inputs.values())))

    def take(self, n: int | None, seed: int = 0) -> "Dataset":
        """A seeded, sorted sample of at most ``n`` items (all of them when ``n`` is None)."""
        if n is None or n >= len(self):
            return self
        idx = np.sort(np.random.default_rng(seed).choice(len(self), n, replace=False))
        labels = None if self.labels is None else self.labels[idx]
        return Dataset({k: v[idx] for k, v in self.inputs.items()}, labels, f"{self.source} ({n} sampled)")

    def fingerprint(self) -> str:
        """sha256 of the samples themselves (names, shapes, dtypes, bytes) and the labels: a cache key."""
        h = hashlib.sha256()
        arrays = sorted(self.inputs.items()) + ([] if self.labels is None else [("__labels__", self.labels)])
        for name, array in arrays:
            h.update(f"{name}:{array.dtype.str}:{list(array.shape)};".encode())
            h.update(np.ascontiguousarray(array).tobytes())
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


def load_dataset(source: str | Path, spec: ModelSpec, role: str, limit: int | None = None,
                 seed: int = 0) -> Dataset:
    """Read ``source`` for ``role`` (calibration/evaluation) and check it fits the model.

    ``source`` is an ``.npz`` file, an image folder, or ``module:callable``. ``limit`` draws at
    most that many samples (seeded, as ``Dataset.take``), before decoding where it can.
    """
    text = str(source)
    if re.match(ENTRY_PATTERN, text) and not Path(text).exists():
        from edgeship.calibration.callables import read_callable

        return check_fits(read_callable(text, spec, limit), spec)
    path = Path(source)
    if path.is_dir():
        from edgeship.calibration.images import read_image_folder

        return check_fits(read_image_folder(path, spec, limit, seed), spec)
    if path.suffix != ".npz":
        raise DataError(f"{path}: {role} data must be an .npz file (x, optional y), an image folder, "
                        "or module:callable")
    return check_fits(read_npz(path, spec), spec).take(limit, seed)


def read_npz(path: Path, spec: ModelSpec) -> Dataset:
    """Arrays from an .npz: ``x`` for a one-input model, else one key per input name; ``y`` labels."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise DataError(f"{path}: not a readable .npz file: {e}") from None
    names = [i.name for i in spec.inputs]
    keys = ["x"] if len(names) == 1 and "x" in arrays else names
    missing = [k for k in keys if k not in arrays]
    if missing:
        want = "x" if len(names) == 1 else ", ".join(names)
        raise DataError(f"{path}: missing array(s) {', '.join(missing)}; expected {want} "
                        f"(and optionally y); found {', '.join(arrays) or 'none'}")
    inputs = {name: arrays[key] for name, key in zip(names, keys)}
    labels = arrays.get("y")
    if labels is not None:
        if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
            raise DataError(f"{path}: y must be a 1-D array of integer class indices, "
                            f"got shape {list(labels.shape)} dtype {labels.dtype}")
        labels = labels.astype(np.int64)
    return Dataset(inputs, labels, str(path))


def check_fits(data: Dataset, spec: ModelSpec) -> Dataset:
    """Check every input's sample shape and dtype against the spec; cast floats to the spec dtype."""
    counts = {len(v) for v in data.inputs.values()}
    if len(counts) != 1 or (data.labels is not None and len(data.labels) not in counts):
        raise DataError(f"{data.source}: arrays hold different sample counts: "
                        + ", ".join(f"{k} {len(v)}" for k, v in data.inputs.items())
                        + ("" if data.labels is None else f", y {len(data.labels)}"))
    if counts == {0}:
        raise DataError(f"{data.source}: holds no samples")
    fitted = {inp.name: _fit_input(data.inputs[inp.name], inp, data.source) for inp in spec.inputs}
    return Dataset(fitted, data.labels, data.source)


def _fit_input(array: np.ndarray, inp: InputSpec, source: str) -> np.ndarray:
    want = tuple(inp.shape[1:])
    if tuple(array.shape[1:]) != want:
        raise DataError(f"{source}: input {inp.name!r} samples have shape {list(array.shape[1:])} "
                        f"(array {list(array.shape)}), but the model takes {list(want)} per sample "
                        f"(input shape {inp.shape})")
    target = np.dtype(inp.dtype)
    if np.issubdtype(target, np.floating) != np.issubdtype(array.dtype, np.floating):
        raise DataError(f"{source}: input {inp.name!r} has dtype {array.dtype}, the model takes {inp.dtype}")
    return np.ascontiguousarray(array.astype(target, copy=False))


def random_dataset(spec: ModelSpec, n: int, seed: int = 0) -> Dataset:
    """Seeded random inputs (uniform [0, 1) for floats) for models without evaluation data."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for inp in spec.inputs:
        shape = (n, *inp.shape[1:])
        if np.issubdtype(np.dtype(inp.dtype), np.floating):
            inputs[inp.name] = rng.random(shape, dtype=np.float32).astype(inp.dtype)
        else:
            inputs[inp.name] = np.zeros(shape, dtype=inp.dtype)
    return Dataset(inputs, None, f"{n} seeded random inputs (seed {seed})")
