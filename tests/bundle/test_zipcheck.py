"""A bundle zip is read only when its bytes hold exactly its entries and every header agrees with
the others (edgeship/bundle/zipcheck.py): each forged zip here passes Python's zipfile, and with it
the manifest check (and the signature, which covers the manifest), yet would show a streaming
reader other bytes than those checked. Each is refused naming the offset; an honest bundle passes."""
from __future__ import annotations

import shutil
import struct
import subprocess
import zipfile
from pathlib import Path

import pytest

from edgeship import api
from edgeship.bundle.archive import MANIFEST, write_zip
from edgeship.cli import main
from edgeship.errors import BundleError
from tests import system
from tests.bundle.forge import forge, local_record, rewrite_entries, set_field, small_bundle, splice

MODEL = "models/m/model.onnx"
EVIL = b"not the signed model " * 500


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return small_bundle(tmp_path / "m-jetson.zip")


@pytest.mark.parametrize(("forgery", "message"), [
    pytest.param({"after": {MODEL: local_record(MODEL, EVIL)}},
                 rf"a local entry '{MODEL}' at offset [\d,]+ \(after {MODEL}\) that the central directory does not",
                 id="hidden-after-the-model"),
    pytest.param({"after": {MANIFEST: local_record(MODEL, EVIL)}},
                 rf"a local entry '{MODEL}' at offset [\d,]+ \(after {MANIFEST}\) that the central directory does",
                 id="hidden-before-the-directory"),
    pytest.param({"prefix": local_record(MODEL, EVIL)},
                 rf"a local entry '{MODEL}' at offset 0 \(before the first entry\) that the central directory",
                 id="hidden-first"),
    pytest.param({"prefix": b"#!/bin/sh\nexit 0\n"}, r"17 bytes of prefix data at offset 0 \(before the first entry\)",
                 id="prefix"),
    pytest.param({"prefix": b"MZ" + bytes(98), "shift": False},
                 r"the end record puts the central directory at offset [\d,]+ .* 100 bytes of prefix data",
                 id="prefix-self-extracting"),
    pytest.param({"after": {"labels.txt": bytes(64)}},
                 r"64 bytes of data that belongs to no entry at offset 46 \(after labels.txt\)", id="gap"),
    pytest.param({"trailing": b"PK\x03\x04 and more"},
                 r"13 bytes of trailing data .*after the end of central directory record", id="trailing"),
    pytest.param({"inside": {MODEL: local_record(MODEL, EVIL)}},
                 rf"{MODEL}: cannot be read \(its deflate stream ends at offset [\d,]+, [\d,]+ bytes before its",
                 id="hidden-inside-an-entry"),
])
def test_verify_refuses_bytes_that_no_central_directory_entry_covers(bundle: Path, tmp_path: Path, forgery: dict,
                                                                     message: str) -> None:
    forged = splice(bundle, tmp_path / "forged.zip", **forgery)
    with zipfile.ZipFile(forged) as zf:  # a directory reader sees the honest bundle
        assert zf.read(MODEL) == zipfile.ZipFile(bundle).read(MODEL)
    with pytest.raises(BundleError, match=f"forged.zip: {message}"):
        api.verify_bundle(forged)


def test_verify_refuses_a_zip_comment(bundle: Path, tmp_path: Path) -> None:
    commented = tmp_path / "commented.zip"
    shutil.copyfile(bundle, commented)
    with zipfile.ZipFile(commented, "a") as zf:
        zf.comment = b"signed by the release team"
    with pytest.raises(BundleError, match="commented.zip: a zip comment of 26 bytes after the end of central "
                                          "directory record .* edgeship writes none"):
        api.verify_bundle(commented)


@pytest.mark.parametrize(("field", "value"), [("crc", 0), ("size", 1), ("compressed", 1), ("method", 0),
                                              ("flags", 0x8)])
def test_verify_refuses_a_local_header_that_differs_from_its_directory_entry(bundle: Path, tmp_path: Path,
                                                                            field: str, value: int) -> None:
    # A streaming reader reads the local header; Python's zipfile only the directory's copy.
    forged = set_field(bundle, tmp_path / "forged.zip", MODEL, field, value, central=False)
    with pytest.raises(BundleError, match=rf"forged.zip: {MODEL}: local header at offset [\d,]+: .* the central "
                                          "directory's .* a streaming reader and a directory reader would read"):
        api.verify_bundle(forged)


@pytest.mark.parametrize(("forge_it", "message"), [
    (lambda b, d: rewrite_entries(b, d, streamed=True), "a data descriptor after its data; edgeship writes no such"),
    (lambda b, d: set_field(b, d, MODEL, "flags", 0x1), "encrypted; edgeship writes no such entry"),
    (lambda b, d: rewrite_entries(b, d, edit={MODEL: {"extra": struct.pack("<HHB", 0x7075, 1, 1)}}),
     "extra field 0x7075 .* some readers take names or sizes from others"),
    (lambda b, d: rewrite_entries(b, d, edit={MODEL: {"comment": b"approved"}}), "a file comment; edgeship writes"),
])
def test_verify_refuses_entries_in_forms_edgeship_never_writes(bundle: Path, tmp_path: Path, forge_it,
                                                               message: str) -> None:
    forged = forge_it(bundle, tmp_path / "forged.zip")
    with pytest.raises(BundleError, match=f"forged.zip: .*{message}"):
        api.verify_bundle(forged)


def test_verify_reads_zip64_records_only_when_they_agree_with_the_end_record(monkeypatch, tmp_path: Path) -> None:
    # Python's zipfile writes the zip64 forms from ZIP64_LIMIT bytes (2 GiB) on: lowered here, a
    # small bundle takes them all (zip64 local and directory fields, zip64 end record and locator).
    monkeypatch.setattr(zipfile, "ZIP64_LIMIT", 100)
    honest = small_bundle(tmp_path / "z64.zip")
    assert honest.read_bytes()[-42:-38] == b"PK\x06\x07"
    assert api.verify_bundle(honest).files == 4
    offset = struct.unpack_from("<I", honest.read_bytes(), honest.stat().st_size - 6)[0]
    forged = set_field(honest, tmp_path / "forged.zip", "", "end_offset", offset - 30)
    with pytest.raises(BundleError, match=f"forged.zip: the end of central directory record gives directory offset "
                                          f"{offset - 30:,}, its zip64 record {offset:,}: readers would disagree"):
        api.verify_bundle(forged)


@pytest.mark.parametrize(("extra", "message"), [
    ({"models/m/./model.onnx": EVIL}, "entry 'models/m/./model.onnx' has an empty or '.' part"),
    ({"models//m/model.onnx": EVIL}, "entry 'models//m/model.onnx' has an empty or '.' part"),
    ({"LABELS.txt": b"z\n"}, "entry 'labels.txt' and 'LABELS.txt' differ only in case"),
])
def test_verify_refuses_names_that_extract_to_the_same_file(bundle: Path, tmp_path: Path, extra: dict,
                                                            message: str) -> None:
    forged = forge(bundle, tmp_path / "forged.zip", extra)  # listed in a rehashed manifest
    with pytest.raises(BundleError, match=f"forged.zip: {message}"):
        api.verify_bundle(forged)


def test_sign_and_extract_refuse_a_bundle_with_a_hidden_local_entry(bundle: Path, tmp_path: Path) -> None:
    forged = splice(bundle, tmp_path / "forged.zip", after={MODEL: local_record(MODEL, EVIL)})
    key, _, _ = api.bundle_keygen(tmp_path / "key.pem")
    with pytest.raises(BundleError, match="that the central directory does not list"):
        api.sign_bundle(forged, key)
    assert not (tmp_path / "forged.zip.sig").exists()
    dest = tmp_path / "dest"
    with pytest.raises(BundleError, match="that the central directory does not list"):
        api.extract_bundle(forged, dest)
    assert not dest.exists()


def test_write_zip_refuses_names_that_differ_only_in_case_and_writes_utf8_names_its_check_reads(
        tmp_path: Path) -> None:
    entries: dict[str, bytes | Path] = {"labels-é.txt": b"a\n", "models/m/model.onnx": bytes(10)}
    written = write_zip(tmp_path / "b.zip", entries, {"platform": "jetson"})
    assert api.verify_bundle(written).files == 2
    clash = tmp_path / "upper.zip"
    with pytest.raises(BundleError, match="differ only in case .* the bundle would fail its own check, so it was not "
                                          "written"):
        write_zip(clash, {**entries, "LABELS-é.txt": b"b\n"}, {"platform": "jetson"})
    assert not clash.exists()


JAVA_LISTER = """\
import java.io.FileInputStream;
import java.security.MessageDigest;
import java.util.HexFormat;
import java.util.zip.ZipEntry;
import java.util.zip.ZipInputStream;

/** Each entry a streaming reader finds (as an Android app unpacks a bundle): name, sha256. */
public class ZipLister {
    public static void main(String[] args) throws Exception {
        try (ZipInputStream in = new ZipInputStream(new FileInputStream(args[0]))) {
            for (ZipEntry e; (e = in.getNextEntry()) != null; ) {
                System.out.println(e.getName() + " " + HexFormat.of().formatHex(
                        MessageDigest.getInstance("SHA-256").digest(in.readAllBytes())));
            }
        }
    }
}
"""


def java_entries(lister: Path, bundle: Path) -> list[tuple[str, str]]:
    done = subprocess.run(["java", str(lister), str(bundle)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [tuple(line.split()) for line in done.stdout.splitlines()]  # type: ignore[misc]


def test_java_zip_input_stream_reads_exactly_the_checked_files_of_a_bundle_verify_accepts(capsys, bundle: Path,
                                                                                        tmp_path: Path) -> None:
    if system.java():
        pytest.skip(system.java())
    lister = tmp_path / "ZipLister.java"
    lister.write_text(JAVA_LISTER)
    key, public, _ = api.bundle_keygen(tmp_path / "key.pem")
    api.sign_bundle(bundle, key)
    listed = {(f["path"], f["sha256"]) for f in api.verify_bundle(bundle, public_key=public).manifest["files"]}
    honest = java_entries(lister, bundle)
    assert {e for e in honest if e[0] != MANIFEST} == listed and len(honest) == len(listed) + 1
    forged = splice(bundle, tmp_path / "forged.zip", after={MODEL: local_record(MODEL, EVIL)})
    shutil.copyfile(f"{bundle}.sig", f"{forged}.sig")
    seen = java_entries(lister, forged)
    assert [name for name, _ in seen].count(MODEL) == 2  # the app would unpack the hidden model last
    assert main(["bundle", "verify", str(forged), "--public-key", str(public)]) == 2
    err = capsys.readouterr().err
    assert f"forged.zip: a local entry '{MODEL}' at offset " in err and "Traceback" not in err



def test_verify_refuses_a_folder_entry_that_holds_data(bundle: Path, tmp_path: Path) -> None:
    """A folder's data is read by no check (nothing is extracted from it), so none may be there."""
    forged = tmp_path / "forged.zip"
    shutil.copy(bundle, forged)
    with zipfile.ZipFile(forged) as zin:
        entries = {n: zin.read(n) for n in zin.namelist()}
    with zipfile.ZipFile(forged, "w", zipfile.ZIP_DEFLATED) as zout:
        for name, data in entries.items():
            zout.writestr(name, data)
        zout.writestr(zipfile.ZipInfo("models/m/extra/"), EVIL)  # listed, and its bytes never read
    with pytest.raises(BundleError, match="forged.zip: .*'models/m/extra/': a folder entry holding .* bytes; a folder "
                                          "holds none"):
        api.verify_bundle(forged)
