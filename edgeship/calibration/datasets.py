"""Data sets of model inputs, read by the reader each source needs (``.npz`` file, image folder,
``module:callable``) and checked against the model spec's inputs.

A data set (:class:`~edgeship.calibration.dataset.Dataset`) holds one array per model input, each
with N samples along the first axis (the input's shape without its batch dimension), and
optional int64 labels.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol

import numpy as np

from edgeship.calibration.callables import read_callable
from edgeship.calibration.dataset import Dataset, check_counts, refuse_non_finite
from edgeship.calibration.images import read_image_folder
from edgeship.calibration.npz import read_npz
from edgeship.config import ENTRY_PATTERN
from edgeship.errors import DataError
from edgeship.shapes import shape_at
from edgeship.spec import InputSpec, ModelSpec


def load_dataset(source: str | Path, spec: ModelSpec, role: str, limit: int | None = None,
                 seed: int = 0) -> Dataset:
    """Read ``source`` for ``role`` (calibration/evaluation) and check it fits the model.

    ``source`` is an ``.npz`` file, an image folder, or ``module:callable``. ``limit`` draws at
    most that many samples (seeded, as ``Dataset.take``), before decoding where it can; of a
    callable, which may never end, the first ``limit`` are read.
    """
    text = str(source)
    if is_callable(text):
        return check_fits(read_callable(text, spec, limit, role=role), spec)
    path = Path(source)
    if path.is_dir():
        return check_fits(read_image_folder(path, spec, limit, seed), spec)
    if path.suffix != ".npz":
        raise DataError(f"{path}: {role} data must be an .npz file (x, optional y), an image folder, "
                        "or module:callable")
    return check_fits(read_npz(path, spec, limit, seed), spec)


def is_callable(source: str) -> bool:
    """Whether a data source names ``module:callable`` (not a file or folder)."""
    return bool(re.match(ENTRY_PATTERN, source)) and not Path(source).exists()


def load_sized(entry: str, spec: ModelSpec, size: str, limit: int) -> Dataset:
    """The spec's ``[data] sizes`` callable's samples at ``size`` ("min" or "max"), at most ``limit``,
    checked against the inputs' shapes at that size."""
    data = read_callable(entry, spec, limit, args=(size,))
    return check_fits(Dataset(data.inputs, None, f"{entry}({size!r})"), spec, size)


def check_fits(data: Dataset, spec: ModelSpec, size: str = "opt") -> Dataset:
    """Check every input's sample shape (at ``size``) and dtype against the spec; cast floats to the
    spec dtype."""
    check_counts(data)
    fitted = {inp.name: _fit_input(data.inputs[inp.name], inp, data.source, size) for inp in spec.inputs}
    return Dataset(fitted, data.labels, data.source)


def _fit_input(array: np.ndarray, inp: InputSpec, source: str, size: str = "opt") -> np.ndarray:
    shape = shape_at(inp, size)
    want = tuple(shape[1:])
    if tuple(array.shape[1:]) != want:
        at = "" if size == "opt" else f" at the {size} size"
        raise DataError(f"{source}: input {inp.name!r} samples have shape {list(array.shape[1:])} "
                        f"(array {list(array.shape)}), but the model takes {list(want)} per sample{at} "
                        f"(input shape {list(shape)})")
    target = np.dtype(inp.dtype)
    if np.issubdtype(target, np.floating) != np.issubdtype(array.dtype, np.floating):
        raise DataError(f"{source}: input {inp.name!r} has dtype {array.dtype}, the model takes {inp.dtype}")
    with np.errstate(over="ignore"):  # a value beyond the spec's dtype becomes inf: refused just below
        fitted = np.ascontiguousarray(array.astype(target, copy=False))
    try:  # one scan when the data is fine; on a failure, say whether the data or the conversion made it
        refuse_non_finite(fitted, "")
    except DataError:
        refuse_non_finite(array, f"{source}: input {inp.name!r}")
        refuse_non_finite(fitted, f"{source}: input {inp.name!r}", f" after conversion to {inp.dtype} "
                          "(values beyond its range)")
    return fitted


class EvaluationCounts(Protocol):
    """How many evaluation samples, and the seed (the profile's ``[evaluation]``, EvaluationSettings)."""

    @property
    def samples(self) -> int | None: ...
    @property
    def random_samples(self) -> int: ...
    @property
    def seed(self) -> int: ...


def evaluation_samples(source: str | Path | None, spec: ModelSpec, settings: EvaluationCounts) -> Dataset:
    """The evaluation samples a build measures: ``source`` (the profile's or the spec's data) with the
    profile's ``[evaluation]`` sample count and seed, else seeded random inputs."""
    if source:  # a file or folder is drawn from before it is read; a callable, which may never end, read up to it
        data = load_dataset(source, spec, "evaluation", settings.samples, settings.seed)
        return data.take(settings.samples, settings.seed)
    return random_dataset(spec, settings.random_samples, settings.seed)


def random_dataset(spec: ModelSpec, n: int, seed: int = 0, size: str = "opt") -> Dataset:
    """``n`` seeded random samples at ``size`` ("min", "opt" or "max": the inputs' dynamic dimensions
    at that size; without dynamic dimensions every size is the spec's shape), for models without
    data and for measuring at each size. Values follow each input's ``range``: integers in
    [low, high) for integer dtypes, uniform floats in [low, high); unset, floats in [0, 1) and
    integers 0."""
    rng = np.random.default_rng(seed)
    inputs = {inp.name: random_values(rng, inp, (n, *shape_at(inp, size)[1:])) for inp in spec.inputs}
    at = "" if size == "opt" else f" at the {size} size"
    return Dataset(inputs, None, f"{n} seeded random inputs{at} (seed {seed})")


def random_batch(spec: ModelSpec, size: str = "opt", seed: int = 0) -> list[np.ndarray]:
    """One seeded random array per input, each of the input's whole shape at ``size`` (batch included)."""
    rng = np.random.default_rng(seed)
    return [random_values(rng, inp, tuple(shape_at(inp, size))) for inp in spec.inputs]


def random_values(rng: np.random.Generator, inp: InputSpec, shape: tuple[int, ...]) -> np.ndarray:
    """Random values for one input, as its ``range`` says (see ``random_dataset``)."""
    floating = np.issubdtype(np.dtype(inp.dtype), np.floating)
    if inp.range is None:
        if floating:  # the draw of earlier versions: data sets of specs without a range are unchanged
            return rng.random(shape, dtype=np.float32).astype(inp.dtype)
        return np.zeros(shape, dtype=inp.dtype)
    low, high = inp.range
    if floating:
        values = (low + (high - low) * rng.random(shape)).astype(inp.dtype)
        below = np.nextafter(np.array(high, inp.dtype), np.array(low, inp.dtype))  # rounding may reach high
        return np.minimum(values, below)
    return rng.integers(int(low), int(high), shape, dtype=np.int64).astype(inp.dtype)
