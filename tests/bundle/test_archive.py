"""Bundle zips: the manifest check names the file that differs; extraction refuses paths that
leave the destination (tested with crafted zips)."""
from __future__ import annotations

import json
import os
import shutil
import stat
import zipfile
from pathlib import Path

import pytest

from edgeship.bundle import extract_bundle, verify_bundle
from edgeship.bundle.archive import MANIFEST, write_zip
from edgeship.cli import main
from edgeship.errors import BundleError


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    model = tmp_path / "model.pte"
    model.write_bytes(os.urandom(50_000))
    entries = {"assets/model.pte": model, "model.json": b'{"model": "m"}\n', "labels.txt": b"a\nb\n"}
    return write_zip(tmp_path / "m-android.zip", entries, {"platform": "android"})


def rewrite(src: Path, dest: Path, change: dict[str, bytes | None]) -> Path:
    """A copy of ``src`` with entries replaced (bytes), dropped (None) or added, CRCs recomputed."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            if info.filename not in change:
                zout.writestr(info, zin.read(info.filename))
        for name, data in change.items():
            if data is not None:
                zout.writestr(name, data)
    return dest


def test_write_zip_lists_every_file_with_sha256_and_size(bundle: Path) -> None:
    check = verify_bundle(bundle)
    listed = {f["path"]: f for f in check.manifest["files"]}
    assert sorted(listed) == ["assets/model.pte", "labels.txt", "model.json"]
    assert listed["assets/model.pte"]["size"] == 50_000 and len(listed["labels.txt"]["sha256"]) == 64
    assert check.platform == "android" and check.files == 3


def test_write_zip_gives_the_same_bytes_for_the_same_inputs(bundle: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(bundle) as zf:
        entries = {n: zf.read(n) for n in zf.namelist() if n != MANIFEST}
    again = write_zip(tmp_path / "again.zip", entries, {"platform": "android"})
    assert again.read_bytes() == bundle.read_bytes()


def test_verify_exits_2_naming_a_file_changed_after_bundling(capsys, bundle: Path, tmp_path: Path) -> None:
    tampered = rewrite(bundle, tmp_path / "tampered.zip", {"labels.txt": b"a\nc\n"})
    assert main(["bundle", "verify", str(tampered)]) == 2
    err = capsys.readouterr().err
    assert f"{tampered}: labels.txt: differs from manifest.json" in err and "Traceback" not in err


def test_verify_exits_2_naming_a_member_whose_bytes_were_flipped(bundle: Path, tmp_path: Path) -> None:
    data = bytearray(bundle.read_bytes())
    with zipfile.ZipFile(bundle) as zf:
        info = zf.getinfo("assets/model.pte")
    data[info.header_offset + 30 + len(info.filename) + 100] ^= 0xFF  # inside the compressed data
    damaged = tmp_path / "damaged.zip"
    damaged.write_bytes(bytes(data))
    with pytest.raises(BundleError, match=r"damaged.zip: assets/model.pte: (cannot be read|differs)"):
        verify_bundle(damaged)


def test_verify_exits_2_on_a_truncated_bundle(capsys, bundle: Path, tmp_path: Path) -> None:
    truncated = tmp_path / "truncated.zip"
    truncated.write_bytes(bundle.read_bytes()[: bundle.stat().st_size // 2])
    assert main(["bundle", "verify", str(truncated)]) == 2
    assert f"{truncated}: not a complete zip file" in capsys.readouterr().err


def test_verify_exits_2_naming_a_missing_or_unlisted_file(bundle: Path, tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="labels.txt: listed in manifest.json but missing"):
        verify_bundle(rewrite(bundle, tmp_path / "missing.zip", {"labels.txt": None}))
    with pytest.raises(BundleError, match="extra.so: in the bundle but not listed"):
        verify_bundle(rewrite(bundle, tmp_path / "extra.zip", {"extra.so": b"\x7fELF"}))
    with pytest.raises(BundleError, match="no manifest.json: not an edgeship bundle"):
        verify_bundle(rewrite(bundle, tmp_path / "nomanifest.zip", {MANIFEST: None}))


def test_verify_refuses_a_name_added_twice(bundle: Path, tmp_path: Path) -> None:
    twice = tmp_path / "twice.zip"
    shutil.copyfile(bundle, twice)
    with zipfile.ZipFile(twice, "a") as zf:
        zf.writestr("labels.txt", b"z\n")
    with pytest.raises(BundleError, match="'labels.txt' appears twice"):
        verify_bundle(twice)


@pytest.mark.parametrize("evil", ["../escaped.txt", "assets/../../escaped.txt", "/tmp/escaped-abs.txt",
                                  "C:/escaped.txt", "assets\\..\\..\\escaped.txt"])
def test_extract_refuses_entries_that_leave_the_destination(bundle: Path, tmp_path: Path, evil: str) -> None:
    crafted = rewrite(bundle, tmp_path / "crafted.zip", {evil: b"owned"})
    dest = tmp_path / "dest"
    with pytest.raises(BundleError, match="would be written outside the destination folder; refused"):
        extract_bundle(crafted, dest)
    assert not dest.exists() and not (tmp_path / "escaped.txt").exists() and not Path("/tmp/escaped-abs.txt").exists()


def test_extract_refuses_symbolic_links(bundle: Path, tmp_path: Path) -> None:
    crafted = tmp_path / "link.zip"
    shutil.copyfile(bundle, crafted)
    link = zipfile.ZipInfo("assets/passwd")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    with zipfile.ZipFile(crafted, "a") as zf:
        zf.writestr(link, "/etc/passwd")
    with pytest.raises(BundleError, match="'assets/passwd' is a symbolic link; refused"):
        extract_bundle(crafted, tmp_path / "dest")


def test_extract_writes_the_checked_files(capsys, bundle: Path, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    assert main(["bundle", "verify", str(bundle), "--extract", str(dest)]) == 0
    assert "3 files" in capsys.readouterr().out
    assert (dest / "labels.txt").read_bytes() == b"a\nb\n" and (dest / "assets" / "model.pte").stat().st_size == 50_000
    assert json.loads((dest / MANIFEST).read_text())["platform"] == "android"


def test_extract_refuses_to_change_a_file_already_in_the_destination(bundle: Path, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    extract_bundle(bundle, dest)
    extract_bundle(bundle, dest)  # the same files again: nothing changes, allowed
    (dest / "labels.txt").write_bytes(b"my own labels\n")
    with pytest.raises(BundleError, match=r"dest/labels.txt: already exists and differs from the bundle's labels.txt; "
                                          "refused to overwrite it"):
        extract_bundle(bundle, dest)
    assert (dest / "labels.txt").read_bytes() == b"my own labels\n"


@pytest.mark.parametrize(("manifest", "message"), [
    (b"[" * 100_000, "manifest.json: not valid JSON"),
    (b"\xff\xfe{", "manifest.json: not valid JSON"),
    (b'{"files": [{"path": ["a"], "sha256": "x", "size": 1}]}', "needs a 'files' list"),
    (b'{"files": [{"path": "a", "sha256": "x", "size": "1"}]}', "needs a 'files' list"),
    (b'{"files": [{"path": "a", "sha256": "x", "size": -1}]}', "needs a 'files' list"),
])
def test_verify_exits_2_on_a_manifest_of_the_wrong_shape(capsys, bundle: Path, tmp_path: Path, manifest: bytes,
                                                        message: str) -> None:
    crafted = rewrite(bundle, tmp_path / "crafted.zip", {MANIFEST: manifest})
    assert main(["bundle", "verify", str(crafted)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_extract_exits_2_when_the_destination_is_a_file(capsys, bundle: Path, tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    assert main(["bundle", "verify", str(bundle), "--extract", str(afile)]) == 2
    assert f"{afile}: is a file, not a folder to extract into" in capsys.readouterr().err
    assert afile.read_text() == "mine\n"
