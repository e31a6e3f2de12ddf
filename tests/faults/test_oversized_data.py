"""A data file's header is checked before anything is allocated: an 8 KB .npz whose ``x`` header
declares 1.7 TiB is refused (exit 2, naming the file, the array, its shape and size) by a real
``edgeship build`` process, where numpy would have tried to allocate it (a traceback, exit 1)."""
from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from edgeship.calibration.npz import declared_arrays, refuse_oversized
from edgeship.errors import DataError
from tests.faults.test_failed_writes import build_limited
from tests.faults.test_one_build_per_folder import finish, project  # noqa: F401 - project: a fixture

SHAPE = (2_000_000, 3, 256, 300)  # float32: 1.7 TiB


def forged_npz(path: Path, shape: tuple[int, ...], data: bytes = b"\0" * 8000) -> None:
    """An .npz whose x.npy header says ``shape`` (float32) while the member holds ``data`` after it."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": shape})
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("x.npy", header.getvalue() + data)  # the header starts with the magic string


def test_faults_an_npz_header_that_claims_too_much_is_refused_before_allocating(project, tmp_path) -> None:  # noqa: F811
    model, profile = project
    forged_npz(model.parent / "eval.npz", SHAPE)
    assert (model.parent / "eval.npz").stat().st_size < 9000
    code, err = finish(build_limited(model, profile, tmp_path / "out", None))
    assert code == 2 and "Traceback" not in err and "Unable to allocate" not in err, err[-2000:]
    assert (f"{model.parent / 'eval.npz'}: array 'x' declares shape [2000000, 3, 256, 300] float32 "
            "(1,843,200,000,000 bytes (1.7 TiB)) but the file holds 8,000 bytes of data for it: a truncated or "
            "damaged file") in err, err[-2000:]
    assert not (tmp_path / "out").exists()


def test_arrays_that_need_more_than_the_free_memory_are_refused_naming_the_largest(tmp_path, monkeypatch) -> None:
    """The memory comparison (the free memory is set small here: a real one would need a file larger
    than this machine's memory)."""
    import psutil

    path = tmp_path / "data.npz"
    np.savez(path, x=np.zeros((64, 3, 32, 32), np.float32), y=np.zeros(64, np.int64))
    assert declared_arrays(path) == {"x": ((64, 3, 32, 32), np.dtype("float32"), 786_432, 786_432),
                                     "y": ((64,), np.dtype("int64"), 512, 512)}
    refuse_oversized(path)  # fits
    real = psutil.virtual_memory()
    monkeypatch.setattr(psutil, "virtual_memory", lambda: real._replace(available=500_000))
    with pytest.raises(DataError, match=r"its arrays need 786,944 bytes in memory, more than the 500,000 bytes free "
                                        r"here \(largest: 'x', shape \[64, 3, 32, 32\] float32, 786,432 bytes\)"):
        refuse_oversized(path)
