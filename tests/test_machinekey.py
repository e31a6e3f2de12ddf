"""This machine's key for the stage cache: made on first use, private to the user, refused otherwise."""
from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest

from edgeship.errors import OutputError
from edgeship.machinekey import MachineKey, key_path, machine_key


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config" / "edgeship"


def test_machine_key_is_made_on_first_use_readable_by_the_user_alone(config: Path) -> None:
    first = machine_key()
    assert first.path == config / "cache.key" == key_path() and first.problem is None
    assert stat.S_IMODE(os.stat(config).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(config / "cache.key").st_mode) == 0o600
    again = machine_key()
    assert again.secret == first.secret and again.sign(b"entry") == first.sign(b"entry")
    assert again.verifies(b"entry", first.sign(b"entry")) and not again.verifies(b"other", first.sign(b"entry"))


def test_machine_key_honours_home_when_xdg_config_home_is_unset(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert machine_key().path == tmp_path / ".config" / "edgeship" / "cache.key"


@pytest.mark.parametrize(("target", "mode"), [("file", 0o644), ("folder", 0o775)])
def test_machine_key_refuses_a_key_or_folder_open_to_others(config: Path, target: str, mode: int) -> None:
    secret = machine_key().secret
    path = config / "cache.key" if target == "file" else config
    path.chmod(mode)
    said = (f"{path}: the key that signs edgeship's stage cache is open to group or others (mode 644); "
            if target == "file" else
            f"the folder of the key that signs edgeship's stage cache {path}: is writable by its group (mode 0775)")
    with pytest.raises(OutputError, match=re.escape(said)) as e:
        machine_key()
    assert e.value.exit_code == 2 and (config / "cache.key").read_text().strip() == secret.hex()


@pytest.mark.parametrize("target", ["file", "folder"])
def test_machine_key_refuses_a_link(config: Path, tmp_path: Path, target: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    if target == "folder":
        config.parent.mkdir(parents=True)
        config.symlink_to(elsewhere)
    else:
        config.mkdir(parents=True, mode=0o700)
        (elsewhere / "cache.key").write_text("ab" * 32)
        (elsewhere / "cache.key").chmod(0o600)
        (config / "cache.key").symlink_to(elsewhere / "cache.key")
    with pytest.raises(OutputError, match="is a link|is a symbolic link"):
        machine_key()


def test_machine_key_refuses_a_key_of_another_user(config: Path, monkeypatch) -> None:
    machine_key()
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(config).st_uid + 1)
    with pytest.raises(OutputError, match=r"belongs to another user"):
        machine_key()


def test_machine_key_refuses_a_file_without_a_key(config: Path) -> None:
    config.mkdir(parents=True, mode=0o700)
    (config / "cache.key").write_text("not a key\n")
    (config / "cache.key").chmod(0o600)
    with pytest.raises(OutputError, match=r"does not hold a key"):
        machine_key()


def test_machine_key_is_the_processes_own_when_none_can_be_kept(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "a-file" / "config"))
    first, second = machine_key(), machine_key()
    assert first.path is None and "no machine key could be kept" in first.problem
    assert first.secret == second.secret and first.verifies(b"x", second.sign(b"x"))


def test_machine_key_signs_a_document_whatever_its_layout_and_names_itself_without_the_secret() -> None:
    key, other = MachineKey(b"k" * 32), MachineKey(b"o" * 32)
    signature = key.sign_document({"b": [1, 2], "a": {"y": 1, "x": "z"}})
    assert key.verifies_document(json.loads('{"a": {"x": "z", "y": 1},\n "b": [1, 2]}'), signature)
    assert not key.verifies_document({"a": {"x": "z", "y": 2}, "b": [1, 2]}, signature)
    assert not other.verifies_document({"b": [1, 2], "a": {"y": 1, "x": "z"}}, signature)
    assert re.fullmatch(r"[0-9a-f]{16}", key.key_id) and key.key_id == MachineKey(b"k" * 32).key_id != other.key_id
    assert key.key_id not in (b"k" * 32).hex()


def test_machine_key_document_signature_is_the_one_the_stage_cache_and_the_unrecorded_build_carry(
        tmp_path: Path, config: Path) -> None:
    """One signing of JSON documents (``MachineKey.sign_document``) for every signed file edgeship keeps."""
    from edgeship.cache import Cache
    from edgeship.pipeline.output import UNRECORDED, BuildFolder
    from edgeship.results import ModelInfo, Results

    key = machine_key()
    entry = Cache(tmp_path / "cache", key).get_or_compute("ns", {"k": 1}, lambda f: (f / "a.txt").write_text("a"))
    listing = json.loads((entry.path / "key.json").read_text())
    signature = listing.pop("hmac")
    assert signature == key.sign_document({"entry": f"ns/{entry.path.name}", "listing": listing})
    folder = BuildFolder(tmp_path / "out")
    folder.staged.mkdir(parents=True)
    model = ModelInfo(name="m", entry="m:b", inputs=[], params=1)
    results = Results(target="t", created="2026-01-01T00:00:00Z", model=model, toolchain={}, variants=[])
    folder.stage_pending("b1", "sqlite://", results)
    kept = json.loads((folder.staged / UNRECORDED).read_text())
    assert kept.pop("hmac") == key.sign_document(kept)
