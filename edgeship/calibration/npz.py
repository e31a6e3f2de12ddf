""".npz files as data sets: ``x`` for a one-input model, else one array per input name, and
optional ``y`` labels: integer class indices [N] (classification), integer class masks [N, H, W]
(segmentation), or labelled boxes [N, M, 5] of any real dtype (detection: per sample M rows of
x1, y1, x2, y2, class; rows with a negative class pad). The reader does not know the task: the
task's own check (``edgeship.pipeline.validate.check_labels``) decides whether ``y`` fits it."""
from __future__ import annotations

import math
import zipfile
from pathlib import Path
from typing import NamedTuple

import numpy as np

from edgeship.calibration.dataset import Dataset, check_counts, refuse_non_finite
from edgeship.devices.runner import is_stored, load_npz
from edgeship.errors import DataError
from edgeship.fsutil import byte_count
from edgeship.spec import ModelSpec


def read_npz(path: Path, spec: ModelSpec, limit: int | None = None, seed: int = 0) -> Dataset:
    """Arrays from an .npz: ``x`` for a one-input model, else one key per input name; ``y`` labels.
    ``limit`` draws at most that many samples (seeded, as ``Dataset.take``) before anything is read:
    arrays stored uncompressed (``numpy.savez``) are memory-mapped, so only the drawn samples are
    read and checked; compressed ones (``savez_compressed``) are decompressed whole."""
    if not zipfile.is_zipfile(path):  # np.load would try a .npy or a pickle and say so, misleadingly
        raise DataError(f"{path}: not an .npz file (a zip of arrays, as numpy.savez writes); "
                        "its bytes are not a zip archive")
    refuse_oversized(path)
    try:
        arrays = load_npz(path)  # stored arrays memory-mapped: read where drawn
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise DataError(f"{path}: not a readable .npz file: {e}") from None
    names = [i.name for i in spec.inputs]
    keys = ["x"] if len(names) == 1 and "x" in arrays else names
    missing = [k for k in keys if k not in arrays]
    if missing:
        want = "x" if len(names) == 1 else ", ".join(names)
        raise DataError(f"{path}: missing array(s) {', '.join(missing)}; expected {want} "
                        f"(and optionally y); found {', '.join(arrays) or 'none'}")
    data = check_counts(Dataset({name: arrays[key] for name, key in zip(names, keys)}, arrays.get("y"), str(path)))
    drawn = data.take(limit, seed)
    inputs = {name: drawn.inputs[name] for name in names}  # drawn: read now; all: still mapped
    for name, key in zip(names, keys):
        refuse_non_finite(inputs[name], f"{path}: array {key!r}", _of_drawn(data, drawn))
    labels = None if drawn.labels is None else _labels(np.array(drawn.labels), path)
    return Dataset(inputs, labels, drawn.source)


def _of_drawn(data: Dataset, drawn: Dataset) -> str:
    return "" if len(drawn) == len(data) else f" in the {len(drawn)} samples drawn from its {len(data)}"


class Declared(NamedTuple):
    """One array of an .npz as its .npy header declares it, read before any data."""
    shape: tuple[int, ...]
    dtype: np.dtype
    needed: int                 # bytes the array needs
    held: int                   # bytes of data its zip member holds
    mapped: bool                # stored uncompressed: memory-mapped (load_npz), not read whole


def declared_arrays(path: Path) -> dict[str, Declared]:
    """Each array of an .npz as its header declares it. DataError for a header numpy cannot read."""
    readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    out = {}
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if not info.filename.endswith(".npy"):
                    continue
                with zf.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    shape, _, dtype = readers.get(version, np.lib.format.read_array_header_2_0)(f)
                    header = f.tell()
                count = math.prod(shape)
                out[info.filename[:-4]] = Declared(tuple(shape), dtype, count * dtype.itemsize,
                                                   info.file_size - header,
                                                   is_stored(info) and not dtype.hasobject and count > 0)
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise DataError(f"{path}: not a readable .npz file: {e}") from None
    return out


def refuse_oversized(path: Path) -> None:
    """DataError, before anything is allocated, for an array whose header declares more bytes than its
    zip member holds (a truncated or forged file), or compressed arrays that together need more memory
    than this machine has free, naming the array, its shape and size (memory-mapped arrays are read
    only where drawn)."""
    import psutil

    arrays = declared_arrays(path)
    for key, a in arrays.items():
        if a.needed > a.held:
            raise DataError(f"{path}: array {key!r} declares shape {list(a.shape)} {a.dtype} "
                            f"({byte_count(a.needed)}) but the file holds {byte_count(a.held)} of data for it: "
                            "a truncated or damaged file")
    whole = {key: a for key, a in arrays.items() if not a.mapped}
    total, free = sum(a.needed for a in whole.values()), psutil.virtual_memory().available
    if total > free:
        largest = max(whole, key=lambda k: whole[k].needed)
        a = whole[largest]
        raise DataError(f"{path}: its compressed arrays need {byte_count(total)} in memory, more than the "
                        f"{byte_count(free)} free here (largest: {largest!r}, shape {list(a.shape)} {a.dtype}, "
                        f"{byte_count(a.needed)}); save it uncompressed (numpy.savez: read only where "
                        "sampled), use fewer samples in the file, or an image folder")


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
