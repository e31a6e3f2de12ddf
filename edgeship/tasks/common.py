"""What every task's metrics share: the result type and the input checks."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class TaskMetrics:
    """One task's figures: ``values`` maps a metric name to a finite float, or to None when the
    metric is undefined or proves nothing here; ``notes`` says why, keyed by the same name (every
    None has a note; a number may have one too, e.g. "only one class present")."""

    task: str
    values: dict[str, float | None]
    notes: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, value in self.values.items():
            if value is None and name not in self.notes:
                raise ValueError(f"{self.task} metric {name!r} is None without a note saying why")
            if value is not None and not math.isfinite(value):
                raise ValueError(f"{self.task} metric {name!r} is {value}: metrics are finite or None")
        stray = sorted(set(self.notes) - set(self.values))
        if stray:
            raise ValueError(f"{self.task} notes name no metric: {stray}")

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict (for results.json): task, values, notes."""
        return {"task": self.task, "values": dict(self.values), "notes": dict(self.notes)}


def checked(name: str, array: object, ndim: int | tuple[int, ...] | None = None) -> np.ndarray:
    """``array`` as a numpy array, refused (ValueError naming ``name``) when it holds NaN or inf or
    has the wrong number of dimensions. The pipeline reports non-finite outputs on its own; a
    metric over them would be a made-up number."""
    a = np.asarray(array)
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else ndim
        if a.ndim not in allowed:
            want = " or ".join(str(d) for d in allowed)
            raise ValueError(f"{name} has shape {list(a.shape)} ({a.ndim} dimensions); expected {want} dimensions")
    if not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
        raise ValueError(f"{name} has dtype {a.dtype}; expected numbers")
    if np.issubdtype(a.dtype, np.inexact):
        bad = int(a.size - np.count_nonzero(np.isfinite(a)))
        if bad:
            raise ValueError(f"{name} contains {bad} non-finite value(s) (NaN or inf)")
    return a


def same_shape(ref_name: str, ref: np.ndarray, out_name: str, out: np.ndarray) -> None:
    """ValueError naming both arrays when their shapes differ."""
    if ref.shape != out.shape:
        raise ValueError(f"{out_name} has shape {list(out.shape)} but {ref_name} has {list(ref.shape)}")
