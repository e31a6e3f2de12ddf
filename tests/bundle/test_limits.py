"""Bundle limits: a zip bomb (a member or the files together compressing far beyond what model
files do), a file, a total or a manifest above its size, or a header that under-states a size is
refused with exit 2 naming it and the limit, before anything is written."""
from __future__ import annotations

import io
import struct
import zipfile
from pathlib import Path

import pytest

from edgeship import api
from edgeship.bundle import archive
from edgeship.cli import main
from edgeship.errors import BundleError
from tests.bundle.forge import forge, small_bundle


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return small_bundle(tmp_path / "m-jetson.zip")


def test_verify_and_extract_refuse_a_zero_filled_member_above_the_ratio_limit(capsys, bundle: Path,
                                                                              tmp_path: Path) -> None:
    bomb = forge(bundle, tmp_path / "bomb.zip", {"models/m/weights.bin": bytes(4 << 20)})
    dest = tmp_path / "dest"
    assert main(["bundle", "verify", str(bomb), "--extract", str(dest)]) == 2
    err = capsys.readouterr().err
    assert f"{bomb}: models/m/weights.bin: compresses " in err
    assert "(4,194,304 bytes (4.0 MiB) from " in err and "above the limit of 200:1; refused" in err
    assert not dest.exists()
    with pytest.raises(BundleError, match="weights.bin: compresses"):
        api.verify_bundle(bomb)


def test_verify_refuses_many_small_members_that_together_exceed_the_ratio_limit(bundle: Path, tmp_path: Path) -> None:
    below_floor = archive.RATIO_FLOOR_BYTES - 1  # each one alone is not judged; 16 outweigh the random model
    bomb = forge(bundle, tmp_path / "bombs.zip", {f"models/m/part{i}.bin": bytes(below_floor) for i in range(16)})
    with pytest.raises(BundleError, match=r"bombs.zip: its files together: compresses [\d,]+:1 .* above the limit"):
        api.verify_bundle(bomb)


def test_verify_refuses_a_member_above_the_size_limit(monkeypatch, capsys, bundle: Path) -> None:
    monkeypatch.setattr(archive, "MAX_MEMBER_BYTES", 10_000)
    assert main(["bundle", "verify", str(bundle)]) == 2
    assert (f"{bundle}: models/m/model.onnx: 40,000 bytes uncompressed, above the limit of 10,000 bytes per file; "
            "refused") in capsys.readouterr().err


def test_verify_refuses_a_bundle_above_the_total_size_limit(monkeypatch, bundle: Path) -> None:
    monkeypatch.setattr(archive, "MAX_TOTAL_BYTES", 30_000)
    with pytest.raises(BundleError, match=r"m-jetson.zip: [\d,]+ bytes uncompressed in all, above the limit of "
                                          r"30,000 bytes for a bundle; refused"):
        api.verify_bundle(bundle)


def test_verify_refuses_a_manifest_above_its_size_limit(monkeypatch, bundle: Path) -> None:
    monkeypatch.setattr(archive, "MAX_MANIFEST_BYTES", 100)
    with pytest.raises(BundleError, match=r"manifest.json: [\d,]+ bytes uncompressed, above the limit of 100 bytes "
                                          r"for manifest.json; refused"):
        api.verify_bundle(bundle)


def test_verify_refuses_a_bundle_with_too_many_entries(monkeypatch, bundle: Path) -> None:
    monkeypatch.setattr(archive, "MAX_ENTRIES", 3)
    with pytest.raises(BundleError, match="m-jetson.zip: 5 entries, above the limit of 3; refused"):
        api.verify_bundle(bundle)


def _understate(src: Path, dest: Path, name: str, declared: int) -> Path:
    """A copy whose central directory (and local header) says ``name`` holds ``declared`` bytes."""
    data = bytearray(src.read_bytes())
    with zipfile.ZipFile(src) as zf:
        info = zf.getinfo(name)
    struct.pack_into("<I", data, info.header_offset + 22, declared)
    pos = 0
    while (pos := data.find(b"PK\x01\x02", pos)) != -1:  # the central directory entry naming it
        if data[pos + 46:pos + 46 + struct.unpack_from("<H", data, pos + 28)[0]] == name.encode():
            struct.pack_into("<I", data, pos + 24, declared)
            break
        pos += 4
    dest.write_bytes(bytes(data))
    return dest


def test_verify_refuses_a_member_whose_header_understates_its_size(bundle: Path, tmp_path: Path) -> None:
    # 8 MiB of zeros declared as 1,000 bytes: the directory check sees no bomb; reading stops at the
    # declared size and the bundle is refused, with nothing extracted. Python's zipfile catches this
    # itself (CRC); edgeship's own count of the bytes read is tested on a fake zip below.
    bomb = forge(bundle, tmp_path / "big.zip", {"models/m/weights.bin": bytes(8 << 20)})
    lying = _understate(bomb, tmp_path / "lying.zip", "models/m/weights.bin", 1_000)
    dest = tmp_path / "dest"
    with pytest.raises(BundleError, match=r"lying.zip: models/m/weights.bin: (cannot be read|differs)"):
        api.extract_bundle(lying, dest)
    assert not dest.exists()


def test_stream_refuses_a_member_that_reads_as_more_than_its_header_declares(tmp_path: Path) -> None:
    class Zip:  # a zip reader that (unlike CPython's) does not stop at the declared size
        def open(self, info: zipfile.ZipInfo) -> io.BytesIO:
            return io.BytesIO(b"x" * 5_000)

    info = zipfile.ZipInfo("assets/model.pte")
    info.file_size, info.compress_size = 1_000, 5_000
    with pytest.raises(BundleError, match="assets/model.pte: reads as more than the 1,000 bytes its header declares"):
        b"".join(archive._stream(tmp_path / "b.zip", Zip(), info, archive.MAX_MEMBER_BYTES))  # type: ignore[arg-type]


def test_write_zip_refuses_to_write_a_bundle_its_own_check_would_refuse(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(archive, "MAX_MEMBER_BYTES", 10_000)
    with pytest.raises(BundleError, match="model.onnx: 40,000 bytes uncompressed, .* so it was not written"):
        small_bundle(tmp_path / "out" / "m-jetson.zip")
    assert list((tmp_path / "out").iterdir()) == []


def test_limits_pass_real_bundles_whose_files_compress_like_models(bundle: Path, tmp_path: Path) -> None:
    # Random bytes (1:1) and text just above the ratio floor at a text-like ratio pass.
    text = b"".join(b"label %d: some class name\n" % i for i in range(60_000))
    assert len(text) > archive.RATIO_FLOOR_BYTES
    ok = forge(bundle, tmp_path / "ok.zip", {"labels.txt": text})
    assert api.verify_bundle(ok).files == 4
