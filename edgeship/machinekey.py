"""This machine's secret: it signs (HMAC-SHA256) what edgeship keeps for later builds, so that what a
later build reuses is known to be what edgeship wrote here, not only self-consistent.

A sha256 list proves an entry whole, not genuine: whoever edits a measurement in the stage cache can
recompute the list too. An HMAC under a key kept outside the cache cannot be recomputed without the key.

The key is 32 random bytes (``secrets``), as hex, in ``$XDG_CONFIG_HOME/edgeship/cache.key`` (else
``~/.config/edgeship/cache.key``), made on first use: the folder mode 0700 (``fsutil.private_folder``:
refused when another user could write there), the file 0600. A key file there already is used only when
it is the user's own, not a link and not open to group or others (OutputError, exit 2, naming it,
otherwise): anyone who can read the key can sign.
Where no key file can be kept (no home folder, a read-only one), the process uses a key of its own: it
signs what this process keeps, so nothing from earlier builds is reused, and ``problem`` says why.

Documents (a stage-cache entry's listing, a build kept as unrecorded) are signed over one canonical
form (``sign_document``: JSON with sorted keys, no whitespace). ``key_id`` names a key without telling
anything of it: the stage cache keeps each key's entries apart by it.
"""
from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import hmac
import json
import os
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgeship.errors import OutputError
from edgeship.fsutil import private_folder

KEY_NAME = "cache.key"
KEY_BYTES = 32
KEY_ID_CHARS = 16   # of the key id, in hex: 64 bits
CONFIG_ENV = "XDG_CONFIG_HOME"


@dataclass(frozen=True)
class MachineKey:
    """A signing key: this machine's (``path``), or this process's own when none can be kept (``problem``)."""

    secret: bytes = field(repr=False)
    path: Path | None = None
    problem: str | None = None

    def sign(self, message: bytes) -> str:
        """The HMAC-SHA256 of ``message``, as hex."""
        return hmac.new(self.secret, message, hashlib.sha256).hexdigest()

    def verifies(self, message: bytes, signature: object) -> bool:
        """Whether ``signature`` is this key's for ``message`` (compared in constant time)."""
        return isinstance(signature, str) and hmac.compare_digest(self.sign(message), signature)

    def sign_document(self, doc: Mapping[str, Any]) -> str:
        """The signature of a JSON document (a dict of JSON values), over its canonical form: sorted
        keys, no whitespace, so the same document signs the same however it was laid out on disk."""
        return self.sign(canonical(doc))

    def verifies_document(self, doc: Mapping[str, Any], signature: object) -> bool:
        """Whether ``signature`` is this key's for the JSON document ``doc`` (:meth:`sign_document`)."""
        return self.verifies(canonical(doc), signature)

    @functools.cached_property
    def key_id(self) -> str:
        """A short name for this key, the same for every process holding it and telling nothing of the
        secret (an HMAC of a fixed label): the stage cache keeps each key's entries under it."""
        return self.sign(b"edgeship: the name of this key")[:KEY_ID_CHARS]


def canonical(doc: Mapping[str, Any]) -> bytes:
    """The bytes a document's signature covers: its JSON with sorted keys and no whitespace."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")


def key_path() -> Path:
    """``$XDG_CONFIG_HOME/edgeship/cache.key``, else ``~/.config/edgeship/cache.key`` (RuntimeError
    when there is no home folder to find)."""
    base = os.environ.get(CONFIG_ENV, "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".config"  # the XDG spec ignores a relative path
    return root / "edgeship" / KEY_NAME


def machine_key() -> MachineKey:
    """This machine's key, made on first use; this process's own when none can be kept (OutputError
    when the key file or its folder is not safe to use)."""
    try:
        path = key_path()
    except RuntimeError as e:
        return process_key(f"no home folder to keep a key in ({e})")
    try:
        private_folder(path.parent, "the folder of the key that signs edgeship's stage cache")
        secret = read_key(path)
        if secret is None:
            make_key(path)
            secret = read_key(path)
    except OSError as e:
        return process_key(f"{e.filename or path}: {e.strerror or e}")
    if secret is None:
        return process_key(f"{path}: it could not be made")
    return MachineKey(secret, path)


def process_key(problem: str) -> MachineKey:
    """This process's own key (the same for every cache of the process), and why it is used."""
    return MachineKey(_process_secret(), None, f"no machine key could be kept: {problem}")


@functools.cache
def _process_secret() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


def read_key(path: Path) -> bytes | None:
    """The key in ``path`` (None when there is none yet); OutputError when the file is not safe to use
    or holds no key."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            _refuse(path, "is a link", "remove it")
        raise
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            _refuse(path, "is not a regular file", "remove it")
        _check_owner_and_mode(path, info, "chmod 600")
        text = f.read(4 * KEY_BYTES)
    try:
        secret = bytes.fromhex(text.decode("ascii").strip())
    except ValueError:
        secret = b""
    if len(secret) < KEY_BYTES:
        _refuse(path, f"does not hold a key ({KEY_BYTES} bytes as hex)", "remove it")
    return secret


def make_key(path: Path) -> None:
    """Write a new key to ``path`` (mode 0600) unless another process made one first: written aside,
    then linked into place, so no reader sees half a key and the first one made is the one kept."""
    aside = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(KEY_BYTES) + "\n")
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(aside, path)
    finally:
        aside.unlink(missing_ok=True)


def _check_owner_and_mode(path: Path, info: os.stat_result, fix: str) -> None:
    if info.st_uid != os.geteuid():
        _refuse(path, f"belongs to another user (uid {info.st_uid})", "remove it")
    if info.st_mode & 0o077:
        _refuse(path, f"is open to group or others (mode {stat.S_IMODE(info.st_mode):o})",
                f"`{fix} {path}` (the key may have been read: remove it to make a new one)")


def _refuse(path: Path, what: str, fix: str) -> None:
    subject = "the key" if path.name == KEY_NAME else "the folder of the key"
    raise OutputError(f"{path}: {subject} that signs edgeship's stage cache {what}; edgeship uses it only when it "
                      f"is the user's own, not a link, and open to the user alone. Fix: {fix}, or set "
                      f"${CONFIG_ENV} to another folder (entries signed with another key are made again)")
