""".npz files as data sets: ``x`` for a one-input model, else one array per input name, and
optional ``y`` labels: integer class indices [N] (classification), integer class masks [N, H, W]
(segmentation), or labelled boxes [N, M, 5] of any real dtype (detection: per sample M rows of
x1, y1, x2, y2, class; rows with a negative class pad). The reader does not know the task: the
task's own check (``edgeship.pipeline.validate.check_labels``) decides whether ``y`` fits it."""
from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from edgeship.calibration.dataset import Dataset, refuse_non_finite
from edgeship.errors import DataError
from edgeship.spec import ModelSpec


def read_npz(path: Path, spec: ModelSpec) -> Dataset:
    """Arrays from an .npz: ``x`` for a one-input model, else one key per input name; ``y`` labels."""
    if not zipfile.is_zipfile(path):  # np.load would try a .npy or a pickle and say so, misleadingly
        raise DataError(f"{path}: not an .npz file (a zip of arrays, as numpy.savez writes); "
                        "its bytes are not a zip archive")
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
    for key in keys:
        refuse_non_finite(arrays[key], f"{path}: array {key!r}")
    inputs = {name: arrays[key] for name, key in zip(names, keys)}
    labels = arrays.get("y")
    return Dataset(inputs, None if labels is None else _labels(labels, path), str(path))


def _labels(y: np.ndarray, path: Path) -> np.ndarray:
    """``y`` as int64 class indices or masks, or as labelled boxes [N, M, 5] (float64 when stored as
    floats: box corners need not be whole pixels); DataError for NaN/inf or another shape or dtype."""
    refuse_non_finite(y, f"{path}: array 'y'")
    integer, real = np.issubdtype(y.dtype, np.integer), np.issubdtype(y.dtype, np.floating)
    if y.ndim == 3 and y.shape[-1] == 5 and (integer or real):
        return y.astype(np.float64 if real else np.int64)
    if y.ndim not in (1, 3) or not integer:
        raise DataError(f"{path}: y must be integer class indices [N], integer class masks [N, H, W] (task "
                        "segmentation) or labelled boxes [N, M, 5] of (x1, y1, x2, y2, class) (task detection); "
                        f"got shape {list(y.shape)} dtype {y.dtype}")
    return y.astype(np.int64)
