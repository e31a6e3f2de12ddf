"""A data file's header is checked before anything is allocated: an 8 KB .npz whose ``x`` header
declares 1.7 TiB is refused (exit 2, naming the file, the array, its shape and size) by a real
``edgeship build`` process, where numpy would have tried to allocate it (a traceback, exit 1)."""
from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from edgeship.calibration.dataset import sample_indices
from edgeship.calibration.npz import declared_arrays, read_npz, refuse_oversized
from edgeship.errors import DataError
from edgeship.spec import ModelSpec
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


def test_compressed_arrays_that_need_more_than_the_free_memory_are_refused_naming_the_largest(
        tmp_path, monkeypatch) -> None:
    """The memory comparison, for arrays numpy must decompress whole (the free memory is set small here:
    a real one would need a file larger than this machine's memory). Stored arrays are memory-mapped."""
    import psutil

    path = tmp_path / "data.npz"
    np.savez_compressed(path, x=np.zeros((64, 3, 32, 32), np.float32), y=np.zeros(64, np.int64))
    declared = declared_arrays(path)
    assert {k: (a.shape, a.dtype, a.needed, a.mapped) for k, a in declared.items()} == {
        "x": ((64, 3, 32, 32), np.dtype("float32"), 786_432, False), "y": ((64,), np.dtype("int64"), 512, False)}
    refuse_oversized(path)  # fits
    real = psutil.virtual_memory()
    monkeypatch.setattr(psutil, "virtual_memory", lambda: real._replace(available=500_000))
    with pytest.raises(DataError, match=r"its compressed arrays need 786,944 bytes in memory, more than the "
                                        r"500,000 bytes free here \(largest: 'x', shape \[64, 3, 32, 32\] float32, "
                                        r"786,432 bytes\); save it uncompressed"):
        refuse_oversized(path)
    np.savez(path, x=np.zeros((64, 3, 32, 32), np.float32), y=np.zeros(64, np.int64))
    assert all(a.mapped for a in declared_arrays(path).values())
    refuse_oversized(path)  # stored: memory-mapped, nothing to hold whole


# also in the code below
SPEC = ModelSpec(name="m", entry="m:build", inputs=[{"name": "image", "shape": [1, 3, 64, 64]}])
BIG = 20_000  # samples of 3x64x64 float32: 983 MB


@pytest.fixture(scope="module")
def big_npz(tmp_path_factory) -> Path:
    """A 983 MB evaluation set as numpy.savez writes it (stored .npy members): big.npz beside x.npy."""
    folder = tmp_path_factory.mktemp("big")
    path = folder / "big.npz"
    x = np.lib.format.open_memmap(folder / "x.npy", mode="w+", dtype=np.float32, shape=(BIG, 3, 64, 64))
    for start in range(0, BIG, 2000):  # written in parts: the test itself never holds it whole
        x[start:start + 2000] = np.random.default_rng(start).random((2000, 3, 64, 64), dtype=np.float32)
    x.flush()
    with zipfile.ZipFile(path, "w") as zf:
        zf.write(folder / "x.npy", "x.npy")
        zf.writestr("y.npy", _npy(np.arange(BIG) % 4))
    assert path.stat().st_size > 980_000_000
    return path


def test_a_large_npz_is_read_only_where_its_samples_are_drawn(big_npz, tmp_path) -> None:
    """A 983 MB evaluation set (numpy.savez, stored) of which a build draws 24 samples: a fresh process
    reads it with under 100 MB more peak memory (it held the whole file before: 1.2 GB more), and gets
    the samples a whole read would have drawn (the same seeded indices)."""
    import subprocess
    import sys

    path = big_npz
    # VmHWM (the process's own peak; ru_maxrss would start from the parent's peak, carried across exec)
    code = ("import json, re, sys; from pathlib import Path; import numpy as np; "
            "peak = lambda: int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)); "
            "from edgeship.calibration.datasets import load_dataset; from edgeship.spec import ModelSpec; "
            "SPEC = ModelSpec(name='m', entry='m:build', inputs=[{'name': 'image', 'shape': [1, 3, 64, 64]}]); "
            "before = peak(); "
            "d = load_dataset(Path(sys.argv[1]), SPEC, 'evaluation', 24, 7); "
            "grew = peak() - before; "
            "np.savez(sys.argv[2], x=d.inputs['image'], y=d.labels); print(json.dumps([grew, d.source]))")
    proc = subprocess.run([sys.executable, "-c", code, str(path), str(tmp_path / "drawn.npz")], capture_output=True,
                          text=True, timeout=300, cwd=Path(__file__).parents[2])
    assert proc.returncode == 0, proc.stderr[-2000:]
    grew_kb, source = json.loads(proc.stdout.splitlines()[-1])
    assert grew_kb < 100_000 and source == f"{path} (24 sampled)", (grew_kb, source)
    idx = sample_indices(BIG, 24, 7)
    drawn = np.load(tmp_path / "drawn.npz")
    np.testing.assert_array_equal(drawn["x"], np.load(path.parent / "x.npy", mmap_mode="r")[idx])
    np.testing.assert_array_equal(drawn["y"], idx % 4)


def test_every_sample_of_a_large_npz_is_paged_in_not_read_whole(big_npz) -> None:
    """All 20,000 samples (a profile without [evaluation] samples): reading, checking, fingerprinting
    and the runner's loading and batching of the 983 MB set keep the process's anonymous memory
    within 150 MB (the set is memory-mapped: its pages are the file's, dropped under pressure). The
    code before held it whole: a build's peak anonymous memory was 2.6 GB for a 1.08 GB set."""
    import subprocess
    import sys

    code = ("import json, sys, threading, time; from pathlib import Path; import numpy as np; "
            "anon = lambda: int(open('/proc/self/status').read().split('RssAnon:')[1].split()[0]); "
            "peak = [0]; "
            "threading.Thread(target=lambda: [peak.__setitem__(0, max(peak[0], anon())) or time.sleep(0.01) "
            "for _ in iter(int, 1)], daemon=True).start(); "
            "from edgeship.calibration.datasets import load_dataset; from edgeship.spec import ModelSpec; "
            "from edgeship.devices.runner import batches, load_npz; "
            "SPEC = ModelSpec(name='m', entry='m:build', inputs=[{'name': 'image', 'shape': [1, 3, 64, 64]}]); "
            "time.sleep(0.1); before = peak[0]; "
            "d = load_dataset(Path(sys.argv[1]), SPEC, 'evaluation', None, 7); fp = d.fingerprint(); "
            "data, n = batches(load_npz(sys.argv[1]), ['x'], 8); total = sum(float(b[0].sum()) for b in data); "
            "time.sleep(0.1); print(json.dumps([peak[0] - before, len(d), n, fp, d.source]))")
    proc = subprocess.run([sys.executable, "-c", code, str(big_npz)], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).parents[2])
    assert proc.returncode == 0, proc.stderr[-2000:]
    grew_kb, count, batched, fingerprint, source = json.loads(proc.stdout.splitlines()[-1])
    print(f"\nall {count} samples of {big_npz.stat().st_size:,} bytes: anonymous memory +{grew_kb:,} kB at its peak")
    assert count == batched == BIG and source == str(big_npz) and grew_kb < 150_000, (grew_kb, count, source)
    from edgeship.calibration.dataset import Dataset

    whole = Dataset({"image": np.load(big_npz.parent / "x.npy", mmap_mode="r")}, np.arange(BIG) % 4, "")
    assert fingerprint == whole.fingerprint()


def _npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


def test_non_finite_values_are_refused_in_the_drawn_samples_and_named_so(tmp_path) -> None:
    x = np.zeros((100, 3, 64, 64), np.float32)
    x[sample_indices(100, 10, 0)[3], 0, 0, 0] = np.nan
    path = tmp_path / "data.npz"
    np.savez(path, x=x)
    with pytest.raises(DataError, match=r"data.npz: array 'x' holds 1 non-finite value\(s\) \(1 NaN, 0 inf\) of "
                                        r"122880 in the 10 samples drawn from its 100; calibration and evaluation"):
        read_npz(path, SPEC, 10, 0)
    with pytest.raises(DataError, match=r"array 'x' holds 1 non-finite value\(s\) \(1 NaN, 0 inf\) of 1228800;"):
        read_npz(path, SPEC)  # every sample: the whole array checked
    np.savez(path, x=x, y=np.zeros(99, np.int64))
    with pytest.raises(DataError, match="arrays hold different sample counts: image 100, y 99"):
        read_npz(path, SPEC, 10, 0)  # counted before drawing


def forged_png(path: Path, width: int, height: int) -> None:
    """A PNG whose header declares width x height RGB pixels, with 100 bytes of image data."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(b"\0" * 100)) + chunk(b"IEND", b""))


@pytest.mark.parametrize(("width", "height"), [(30_000, 30_000), (12_000, 12_000)])
def test_faults_an_image_whose_header_claims_too_many_pixels_is_refused(project, tmp_path, width, height) -> None:  # noqa: F811
    """An evaluation image folder with one forged PNG (a few hundred bytes declaring 900 or 144
    million pixels): exit 2 naming it, before anything is decoded. PIL itself raises above 179
    million pixels (an error edgeship did not catch: a traceback, exit 1) and only warns between 89
    and 179 million, then decodes (allocates) the whole image."""
    from PIL import Image

    model, profile = project
    folder = model.parent / "images" / "cat"
    folder.mkdir(parents=True)
    for i in range(3):
        Image.fromarray(np.full((16, 16, 3), 40 * i, np.uint8)).save(folder / f"{i}.png")
    forged_png(folder / "bomb.png", width, height)
    model.write_text(model.read_text().replace('evaluation = "eval.npz"', 'evaluation = "images"'))
    code, err = finish(build_limited(model, profile, tmp_path / "out", None))
    assert code == 2 and "Traceback" not in err, err[-2000:]
    assert (f"{folder / 'bomb.png'}: its header declares {width * height:,} pixels, more than the 89,478,485 an image "
            "may have here") in " ".join(err.split()), err[-2000:]
    assert not (tmp_path / "out").exists()
