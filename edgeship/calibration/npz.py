""".npz files as data sets: ``x`` for a one-input model, else one array per input name, and
optional ``y`` labels (int class indices)."""
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
    if labels is not None:
        if labels.ndim not in (1, 3) or not np.issubdtype(labels.dtype, np.integer):
            raise DataError(f"{path}: y must be integer class indices [N] (or class masks [N, H, W] for task "
                            f"segmentation), got shape {list(labels.shape)} dtype {labels.dtype}")
        labels = labels.astype(np.int64)
    return Dataset(inputs, labels, str(path))
