"""Bundle signatures: Ed25519 over a bundle's ``manifest.json``, in a detached file beside the zip.

The manifest lists every other file of the bundle with its sha256 and size, and a check refuses
any file that differs from it or is not listed, so a signature over the manifest's bytes vouches
for the whole bundle. The signature sits in its own file (``<bundle>.zip.sig``), so the zip keeps
the same bytes for the same inputs and a bundle can be signed after it was made. A web bundle's
unpacked folder holds the zip's manifest.json byte for byte, so the zip's signature covers it too.
Ed25519 is deterministic: the same key and manifest give the same signature file.

Keys: PEM (PKCS#8, e.g. ``openssl genpkey -algorithm ed25519``, or ``edgeship bundle keygen``) or
OpenSSH (``ssh-keygen -t ed25519``); an encrypted private key takes its password from
``EDGESHIP_SIGNING_KEY_PASSWORD``. Key ids are OpenSSH's fingerprints (``ssh-keygen -lf``).

``cryptography`` is imported only here and only when a key is used: checking a bundle's
integrity needs nothing of it.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgeship.config import read_bytes
from edgeship.errors import BundleError, OutputError

FORMAT = "edgeship-bundle-signature"
FORMAT_VERSION = 1
ALGORITHM = "ed25519"
SIGNED_FILE = "manifest.json"
SUFFIX = ".sig"
# What is signed: this context, then the manifest's bytes as stored in the zip. The context keeps
# a bundle signature from being valid as anything else signed with the same key.
CONTEXT = b"edgeship bundle manifest.json, signature format 1\n"
PASSWORD_ENV = "EDGESHIP_SIGNING_KEY_PASSWORD"
MAX_KEY_FILE_BYTES = 64 << 10
MAX_SIGNATURE_FILE_BYTES = 64 << 10
KEYGEN_HINT = "make one with: edgeship bundle keygen KEY, or ssh-keygen -t ed25519"


@dataclass(frozen=True)
class Signed:
    """A signature that was written or checked: its file and the key that made it."""

    path: Path
    key_id: str


def default_signature_path(bundle: Path) -> Path:
    """``model-android.zip`` -> ``model-android.zip.sig``; a web bundle's unpacked folder ``model-web``
    -> ``model-web.zip.sig``, its zip's (both hold the same manifest.json, so one signature covers both)."""
    if bundle.is_dir():
        return bundle.with_name(bundle.name + ".zip" + SUFFIX)
    return bundle.with_name(bundle.name + SUFFIX)


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives import serialization
    except ImportError:
        raise BundleError("signing and checking signatures needs the 'cryptography' package: "
                          "pip install 'cryptography>=42'") from None
    return serialization


def key_id(public_key: Any) -> str:
    """OpenSSH's fingerprint of a public key (``SHA256:...``, as ``ssh-keygen -lf`` prints it)."""
    serialization = _crypto()
    line = public_key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    blob = base64.b64decode(line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def _read_key_file(path: Path, what: str) -> bytes:
    return read_bytes(path, BundleError, what, MAX_KEY_FILE_BYTES)


def _is_public(data: bytes) -> bool:
    return data.lstrip().startswith(b"ssh-") or b"-----BEGIN PUBLIC KEY-----" in data


def _is_private(data: bytes) -> bool:
    return b"PRIVATE KEY-----" in data


def _require_ed25519(path: Path, key: Any, private: bool) -> None:
    from cryptography.hazmat.primitives.asymmetric import ed25519

    wanted = ed25519.Ed25519PrivateKey if private else ed25519.Ed25519PublicKey
    if not isinstance(key, wanted):
        kind = type(key).__name__.removeprefix("_").replace("PrivateKey", "").replace("PublicKey", "")
        raise BundleError(f"{path}: key type {kind}; bundles are signed with Ed25519 keys only ({KEYGEN_HINT})")


def load_private_key(path: Path) -> Any:
    """An Ed25519 private key from a PEM or OpenSSH file (BundleError naming the file otherwise)."""
    path = Path(path)
    serialization = _crypto()
    from cryptography.exceptions import UnsupportedAlgorithm

    data = _read_key_file(path, "private key")
    if not _is_private(data):
        if _is_public(data):
            raise BundleError(f"{path}: a public key; --key needs the private key (the public one is for verify "
                              "--public-key)")
        raise BundleError(f"{path}: not a PEM or OpenSSH private key ({KEYGEN_HINT})")
    load = (serialization.load_ssh_private_key if b"BEGIN OPENSSH PRIVATE KEY" in data
            else serialization.load_pem_private_key)
    password = os.environ.get(PASSWORD_ENV)
    try:
        try:
            key = load(data, None)
        except TypeError:  # encrypted: the password is needed
            if not password:
                raise BundleError(f"{path}: the private key is encrypted; put its password in {PASSWORD_ENV}") \
                    from None
            key = load(data, password.encode())
    except ValueError as e:
        reason = "wrong password" if password and "password" in str(e).lower() else str(e).split(". ")[0]
        raise BundleError(f"{path}: cannot load the private key ({reason})") from None
    except UnsupportedAlgorithm as e:
        hint = "; an encrypted OpenSSH key needs: pip install bcrypt" if "bcrypt" in str(e) else ""
        raise BundleError(f"{path}: cannot load the private key ({e}){hint}") from None
    _require_ed25519(path, key, private=True)
    return key


def load_public_key(path: Path) -> Any:
    """An Ed25519 public key from a PEM or OpenSSH (``ssh-ed25519 AAAA...``) file."""
    path = Path(path)
    serialization = _crypto()
    from cryptography.exceptions import UnsupportedAlgorithm

    data = _read_key_file(path, "public key")
    if _is_private(data):
        raise BundleError(f"{path}: a private key; --public-key needs the public key (e.g. {path.name}.pub), "
                          "which can be shared")
    try:
        if data.lstrip().startswith(b"ssh-"):
            key = serialization.load_ssh_public_key(data.strip().splitlines()[0])
        elif b"-----BEGIN PUBLIC KEY-----" in data:
            key = serialization.load_pem_public_key(data)
        else:
            raise BundleError(f"{path}: not a PEM or OpenSSH public key")
    except (ValueError, UnsupportedAlgorithm) as e:
        raise BundleError(f"{path}: cannot load the public key ({str(e).split('. ')[0]})") from None
    _require_ed25519(path, key, private=False)
    return key


def signature_document(private_key: Any, manifest: bytes) -> str:
    """The signature file's text for ``manifest`` (the bytes of manifest.json as stored)."""
    public = private_key.public_key()
    doc = {"format": FORMAT, "format_version": FORMAT_VERSION, "algorithm": ALGORITHM, "signed": SIGNED_FILE,
           "manifest_sha256": hashlib.sha256(manifest).hexdigest(), "key_id": key_id(public),
           "signature": base64.b64encode(private_key.sign(CONTEXT + manifest)).decode()}
    return json.dumps(doc, indent=2) + "\n"


def read_signature(path: Path) -> dict[str, Any]:
    """A signature file's fields (BundleError naming the file when it is missing or not one)."""
    try:
        size = path.stat().st_size
        if size > MAX_SIGNATURE_FILE_BYTES:
            raise BundleError(f"{path}: {size:,} bytes: too large for a bundle signature; not one")
        doc = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise BundleError(f"{path}: no signature file: the bundle is not signed (or give --signature FILE); "
                          "sign it with: edgeship bundle sign BUNDLE.zip --key KEY") from None
    except (OSError, ValueError) as e:
        raise BundleError(f"{path}: not a bundle signature file ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BundleError(f"{path}: not an edgeship bundle signature (no \"format\": \"{FORMAT}\")")
    if doc.get("format_version") != FORMAT_VERSION or doc.get("algorithm") != ALGORITHM:
        raise BundleError(f"{path}: signature format_version {doc.get('format_version')!r}, algorithm "
                          f"{doc.get('algorithm')!r}; this edgeship reads format_version {FORMAT_VERSION}, "
                          f"{ALGORITHM}")
    try:
        raw = base64.b64decode(str(doc.get("signature")), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 64:
        raise BundleError(f"{path}: \"signature\" is not a base64 Ed25519 signature (64 bytes); the file is damaged")
    return {**doc, "signature": raw}


def check_signature(path: Path, public_key_path: Path, manifest: bytes) -> Signed:
    """Check the signature file at ``path`` over ``manifest`` with the given public key.

    BundleError (exit 2) naming the signature file when it is missing, not a signature, made for
    another manifest (the bundle changed after signing) or by another key, or does not verify.
    """
    from cryptography.exceptions import InvalidSignature

    public = load_public_key(public_key_path)
    doc = read_signature(path)
    given = key_id(public)
    try:
        public.verify(doc["signature"], CONTEXT + manifest)
        return Signed(path, given)
    except InvalidSignature:
        pass
    actual = hashlib.sha256(manifest).hexdigest()
    if doc.get("manifest_sha256") != actual:
        why = (f"it was made over another manifest.json (sha256 {str(doc.get('manifest_sha256'))[:16]}…, this "
               f"bundle's is {actual[:16]}…): the bundle was changed or re-made after it was signed, or the "
               "signature belongs to another bundle")
    elif doc.get("key_id") != given:
        why = f"it was made by another key ({doc.get('key_id')}), not by {public_key_path} ({given})"
    else:
        why = "it does not verify: the signature file is damaged or was altered"
    raise BundleError(f"{path}: bad signature: {why}; refused")


def write_new(dest: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``dest`` with ``mode``, atomically, never replacing an existing file."""
    dest = Path(dest)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{dest.name}.tmp-", dir=dest.parent)  # created 0600
    except OSError as e:
        raise OutputError(f"{dest}: cannot write here ({e.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.link(name, dest)  # fails when dest exists: the only way in, so nothing is overwritten
    except FileExistsError:
        raise OutputError(f"{dest}: already exists; refused to overwrite it (choose another name)") from None
    except OSError as e:
        raise OutputError(f"{dest}: cannot write ({e.strerror})") from None
    finally:
        os.unlink(name)


def generate_keypair(out: Path) -> tuple[Path, Path, str]:
    """A new Ed25519 key: ``out`` (private, PEM PKCS#8, mode 0600) and ``out.pub`` (public, PEM).

    Refuses (OutputError) when either file exists. Returns both paths and the key id.
    """
    serialization = _crypto()
    from cryptography.hazmat.primitives.asymmetric import ed25519

    out = Path(out)
    pub = out.with_name(out.name + ".pub")
    for path in (out, pub):
        if path.exists() or path.is_symlink():
            raise OutputError(f"{path}: already exists; refused to overwrite it (choose another name)")
    key = ed25519.Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    public_pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)
    write_new(out, private_pem, 0o600)
    write_new(pub, public_pem, 0o644)
    return out, pub, key_id(key.public_key())
