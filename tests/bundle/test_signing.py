"""Bundle signatures: Ed25519 over manifest.json in a detached file. A bundle whose files were
changed and whose manifest was rehashed passes the integrity check but not the signature; a
signature by another key, a missing or damaged one exits 2 naming the signature file."""
from __future__ import annotations

import json
import shutil
import stat
import subprocess
import zipfile
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from edgeship import api
from edgeship.bundle.signing import PASSWORD_ENV
from edgeship.cli import main
from edgeship.errors import BundleError, OutputError
from tests import system
from tests.bundle.forge import forge, local_record, small_bundle, splice


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return small_bundle(tmp_path / "m-jetson.zip")


@pytest.fixture
def key(tmp_path: Path) -> Path:
    private, _, _ = api.bundle_keygen(tmp_path / "keys" / "signing.pem")
    return private


def pub(key: Path) -> Path:
    return key.with_name(key.name + ".pub")


def test_bundle_keygen_writes_a_private_key_readable_only_by_its_owner_and_a_public_key(capsys,
                                                                                     tmp_path: Path) -> None:
    out = tmp_path / "k" / "release.pem"
    assert main(["bundle", "keygen", str(out)]) == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600 and stat.S_IMODE(pub(out).stat().st_mode) == 0o644
    loaded = serialization.load_pem_private_key(out.read_bytes(), None)
    assert isinstance(loaded, ed25519.Ed25519PrivateKey)
    assert serialization.load_pem_public_key(pub(out).read_bytes()) == loaded.public_key()
    assert "(public key SHA256:" in capsys.readouterr().out
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temporary left behind


def test_bundle_keygen_refuses_to_overwrite_either_file(capsys, tmp_path: Path) -> None:
    out = tmp_path / "release.pem"
    pub(out).write_text("someone's public key\n")
    assert main(["bundle", "keygen", str(out)]) == 2
    assert f"{pub(out)}: already exists; refused to overwrite it" in capsys.readouterr().err
    assert not out.exists() and pub(out).read_text() == "someone's public key\n"
    api.bundle_keygen(tmp_path / "other.pem")
    before = (tmp_path / "other.pem").read_bytes()
    with pytest.raises(OutputError, match="other.pem: already exists"):
        api.bundle_keygen(tmp_path / "other.pem")
    assert (tmp_path / "other.pem").read_bytes() == before


def test_bundle_sign_then_verify_with_the_public_key_passes(capsys, bundle: Path, key: Path) -> None:
    zip_bytes = bundle.read_bytes()
    assert main(["bundle", "sign", str(bundle), "--key", str(key)]) == 0
    signature = bundle.with_name("m-jetson.zip.sig")
    assert f"wrote {signature} (Ed25519, key SHA256:" in capsys.readouterr().out
    assert bundle.read_bytes() == zip_bytes  # detached: the zip keeps its bytes
    assert main(["bundle", "verify", str(bundle), "--public-key", str(pub(key))]) == 0
    out = capsys.readouterr().out
    assert "4 files" in out and f"signature {signature} good, signed by SHA256:" in out
    first = signature.read_bytes()
    api.sign_bundle(bundle, key)
    assert signature.read_bytes() == first  # Ed25519 is deterministic: same key and manifest, same file


def test_bundle_verify_exits_2_naming_the_signature_when_runner_py_was_changed_and_the_manifest_rehashed(
        capsys, bundle: Path, key: Path, tmp_path: Path) -> None:
    api.sign_bundle(bundle, key)
    tampered = forge(bundle, tmp_path / "tampered.zip", {"runner/runner.py": b"import os\nos.system('evil')\n"})
    shutil.copyfile(bundle.with_name(bundle.name + ".sig"), tampered.with_name("tampered.zip.sig"))
    # Integrity alone cannot tell: the manifest was rehashed. It says so.
    assert main(["bundle", "verify", str(tampered)]) == 0
    assert "integrity only: signature" in capsys.readouterr().out
    assert main(["bundle", "verify", str(tampered), "--public-key", str(pub(key))]) == 2
    err = capsys.readouterr().err
    assert f"{tampered}.sig: bad signature: it was made over another manifest.json" in err
    assert "changed or re-made after it was signed" in err and "Traceback" not in err
    dest = tmp_path / "dest"
    assert main(["bundle", "verify", str(tampered), "--public-key", str(pub(key)), "--extract", str(dest)]) == 2
    assert not dest.exists()


def test_bundle_verify_exits_2_naming_the_offset_of_a_local_entry_hidden_beside_a_good_signature(
        capsys, bundle: Path, key: Path, tmp_path: Path) -> None:
    # Case 9 of issue 51: a second models/m/model.onnx local entry that the central directory does
    # not list. The manifest and its signature are the honest ones; a streaming extractor (Java's
    # ZipInputStream, as an Android app uses) would unpack the hidden model over the signed one.
    api.sign_bundle(bundle, key)
    hidden = local_record("models/m/model.onnx", b"not the signed model\n" * 100)
    forged = splice(bundle, tmp_path / "forged.zip", after={"models/m/model.onnx": hidden})
    shutil.copyfile(f"{bundle}.sig", f"{forged}.sig")
    for extra in (["--public-key", str(pub(key))], []):
        assert main(["bundle", "verify", str(forged), *extra]) == 2
        err = capsys.readouterr().err
        assert (f"{forged}: a local entry 'models/m/model.onnx' at offset 40,167 (after models/m/model.onnx) that "
                "the central directory does not list: a streaming reader (Java's ZipInputStream") in err
        assert "Traceback" not in err


def test_bundle_verify_exits_2_when_the_signature_was_made_by_another_key(capsys, bundle: Path, key: Path,
                                                                         tmp_path: Path) -> None:
    other, _, other_id = api.bundle_keygen(tmp_path / "other.pem")
    api.sign_bundle(bundle, other)
    assert main(["bundle", "verify", str(bundle), "--public-key", str(pub(key))]) == 2
    err = capsys.readouterr().err
    assert f"bad signature: it was made by another key ({other_id}), not by {pub(key)}" in err


def test_bundle_verify_exits_2_when_a_public_key_is_given_and_the_signature_is_missing(capsys, bundle: Path,
                                                                                      key: Path) -> None:
    assert main(["bundle", "verify", str(bundle), "--public-key", str(pub(key))]) == 2
    assert f"{bundle}.sig: no signature file: the bundle is not signed" in capsys.readouterr().err


def test_bundle_verify_without_a_public_key_says_integrity_only(capsys, bundle: Path, key: Path) -> None:
    assert main(["bundle", "verify", str(bundle)]) == 0
    assert capsys.readouterr().out.rstrip().endswith("match manifest.json; integrity only: not signed")
    api.sign_bundle(bundle, key)
    assert main(["bundle", "verify", str(bundle)]) == 0
    assert f"integrity only: signature {bundle}.sig not checked (give --public-key)" in capsys.readouterr().out


def test_bundle_verify_exits_2_on_a_damaged_or_foreign_signature_file(bundle: Path, key: Path) -> None:
    signed = api.sign_bundle(bundle, key)
    doc = json.loads(signed.path.read_text())
    raw = bytearray(__import__("base64").b64decode(doc["signature"]))
    raw[10] ^= 1
    doc["signature"] = __import__("base64").b64encode(bytes(raw)).decode()
    signed.path.write_text(json.dumps(doc))
    with pytest.raises(BundleError, match=r"\.sig: bad signature: it does not verify: the signature file is damaged"):
        api.verify_bundle(bundle, public_key=pub(key))
    cases = {"not json {": "not a bundle signature file", '{"format": "x"}': "not an edgeship bundle signature",
             json.dumps({**doc, "signature": "AAAA"}): "not a base64 Ed25519 signature",
             json.dumps({**doc, "format_version": 2}): "this edgeship reads format_version 1"}
    for text, message in cases.items():
        signed.path.write_text(text)
        with pytest.raises(BundleError, match=message):
            api.verify_bundle(bundle, public_key=pub(key))


def test_bundle_signature_of_another_bundle_does_not_verify(bundle: Path, key: Path, tmp_path: Path) -> None:
    other = small_bundle(tmp_path / "other.zip")  # another random model
    api.sign_bundle(other, key)
    with pytest.raises(BundleError, match="made over another manifest.json"):
        api.verify_bundle(bundle, public_key=pub(key), signature=tmp_path / "other.zip.sig")


def test_bundle_sign_and_verify_take_openssh_keys(bundle: Path, tmp_path: Path) -> None:
    if system.ssh_keygen():
        pytest.skip(system.ssh_keygen())
    ssh_key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(ssh_key)], check=True)
    signed = api.sign_bundle(bundle, ssh_key)
    fingerprint = subprocess.run(["ssh-keygen", "-lf", f"{ssh_key}.pub"], check=True, capture_output=True,
                                 text=True).stdout.split()[1]
    assert signed.key_id == fingerprint
    assert api.verify_bundle(bundle, public_key=f"{ssh_key}.pub").signed_by == fingerprint


def test_bundle_sign_takes_an_encrypted_pem_key_with_its_password(monkeypatch, bundle: Path, tmp_path: Path) -> None:
    encrypted = tmp_path / "enc.pem"
    private = ed25519.Ed25519PrivateKey.generate()
    encrypted.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                serialization.BestAvailableEncryption(b"s3cret")))
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    with pytest.raises(BundleError, match=f"enc.pem: the private key is encrypted; put its password in {PASSWORD_ENV}"):
        api.sign_bundle(bundle, encrypted)
    monkeypatch.setenv(PASSWORD_ENV, "wrong")
    with pytest.raises(BundleError, match=r"enc.pem: cannot load the private key \(wrong password\)"):
        api.sign_bundle(bundle, encrypted)
    monkeypatch.setenv(PASSWORD_ENV, "s3cret")
    assert api.sign_bundle(bundle, encrypted).path.is_file()


def test_bundle_sign_and_verify_exit_2_on_keys_they_cannot_use(capsys, bundle: Path, key: Path,
                                                               tmp_path: Path) -> None:
    ec_key = tmp_path / "ec.pem"
    ec_key.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    sign_cases = {ec_key: "key type EC; bundles are signed with Ed25519 keys only",
                  pub(key): "a public key; --key needs the private key", garbage: "cannot load the private key",
                  text: "not a PEM or OpenSSH private key", tmp_path / "absent.pem": "private key not found",
                  tmp_path: "is a directory, expected a private key"}
    for path, message in sign_cases.items():
        assert main(["bundle", "sign", str(bundle), "--key", str(path)]) == 2, path
        err = capsys.readouterr().err
        assert f"{path}: {message}" in err and "Traceback" not in err
    verify_cases = {key: "a private key; --public-key needs the public key", text: "not a PEM or OpenSSH public key",
                    tmp_path / "absent.pub": "public key not found"}
    api.sign_bundle(bundle, key)
    for path, message in verify_cases.items():
        assert main(["bundle", "verify", str(bundle), "--public-key", str(path)]) == 2, path
        err = capsys.readouterr().err
        assert f"{path}: {message}" in err and "Traceback" not in err


def test_bundle_sign_refuses_a_bundle_that_fails_its_check_and_writes_no_signature(bundle: Path, key: Path,
                                                                                  tmp_path: Path) -> None:
    changed = tmp_path / "changed.zip"
    with zipfile.ZipFile(bundle) as zin, zipfile.ZipFile(changed, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info, b"evil\n" if info.filename == "runner/runner.py" else zin.read(info))
    with pytest.raises(BundleError, match="runner/runner.py: differs from manifest.json"):
        api.sign_bundle(changed, key)
    assert not (tmp_path / "changed.zip.sig").exists()


def test_bundle_sign_refuses_to_overwrite_a_file_that_is_not_a_signature(bundle: Path, key: Path) -> None:
    notes = bundle.with_name(bundle.name + ".sig")
    notes.write_text("my notes\n")
    with pytest.raises(BundleError, match=r"m-jetson.zip.sig: exists and is not an edgeship bundle signature"):
        api.sign_bundle(bundle, key)
    assert notes.read_text() == "my notes\n"
    with pytest.raises(BundleError, match="m-jetson.zip: exists and is not an edgeship bundle signature"):
        api.sign_bundle(bundle, key, signature=bundle)  # the zip itself
    assert api.verify_bundle(bundle).files == 4


@pytest.mark.parametrize(("argv", "message"), [
    (["verify", "B", "--key", "k.pem"], "bundle verify: --key does not apply here (it takes: --extract, --public-key"),
    (["sign", "B", "--public-key", "k.pub"], "bundle sign: --public-key does not apply here"),
    (["sign", "B"], "bundle sign: give --key KEY"),
    (["keygen"], "bundle keygen: give the file"),
    (["keygen", "k.pem", "--signature", "s"], "bundle keygen: --signature does not apply here (it takes: no options)"),
    (["--target", "host", "--key", "k.pem"], "bundle --target: --key does not apply here"),
])
def test_bundle_command_exits_2_on_options_that_do_not_apply(capsys, bundle: Path, argv: list[str],
                                                            message: str) -> None:
    assert main(["bundle", *[str(bundle) if a == "B" else a for a in argv]]) == 2
    assert message in capsys.readouterr().err
