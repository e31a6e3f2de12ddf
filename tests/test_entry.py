"""module:callable entries: imported from their folder, which does not stay on sys.path."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from edgeship.entry import entry_source, import_entry, importable
from edgeship.errors import DataError, ModelSpecError


def test_import_entry_returns_the_named_object_and_restores_sys_path(tmp_path: Path) -> None:
    (tmp_path / "entry_ok.py").write_text("class Outer:\n    class Inner:\n        value = 7\n")
    assert import_entry("entry_ok:Outer.Inner", tmp_path, ModelSpecError).value == 7
    assert str(tmp_path) not in sys.path


def test_import_entry_failure_names_entry_module_and_first_line(tmp_path: Path) -> None:
    (tmp_path / "entry_broken.py").write_text("raise RuntimeError('\\nno GPU here\\nmore detail')\n")
    with pytest.raises(DataError) as e:
        import_entry("entry_broken:make", tmp_path, DataError, "data source")
    assert str(e.value) == (f"data source entry_broken:make: cannot import 'entry_broken' from {tmp_path}: "
                            "RuntimeError: no GPU here")
    assert str(tmp_path) not in sys.path


def test_import_entry_missing_attribute_names_it(tmp_path: Path) -> None:
    (tmp_path / "entry_empty.py").write_text("")
    with pytest.raises(ModelSpecError, match="entry entry_empty:build: module 'entry_empty' has no attribute 'build'"):
        import_entry("entry_empty:build", tmp_path, ModelSpecError)


def test_importable_leaves_a_folder_already_on_sys_path_in_place(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    with importable(tmp_path):
        pass
    assert sys.path.count(str(tmp_path)) == 1


def test_entry_source_finds_the_module_file_without_running_it(tmp_path: Path) -> None:
    (tmp_path / "entry_unrun.py").write_text("raise SystemExit('must not run')\n")
    assert entry_source("entry_unrun:build", tmp_path) == tmp_path / "entry_unrun.py"
    assert entry_source("sys", None) is None
    assert entry_source("entry_nowhere:build", tmp_path) is None
    assert str(tmp_path) not in sys.path


def test_import_entry_same_module_name_in_two_folders_gives_each_its_own(tmp_path: Path) -> None:
    """Python caches modules by name: the second folder's model.py was shadowed by the first's."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "zoo_entry_model.py").write_text(f"WHICH = {name!r}\n")
    try:
        assert import_entry("zoo_entry_model:WHICH", tmp_path / "a", ModelSpecError) == "a"
        assert import_entry("zoo_entry_model:WHICH", tmp_path / "b", ModelSpecError) == "b"
        assert entry_source("zoo_entry_model:WHICH", tmp_path / "a") == tmp_path / "a" / "zoo_entry_model.py"
        assert import_entry("zoo_entry_model:WHICH", tmp_path / "a", ModelSpecError) == "a"
        assert import_entry("zoo_entry_model:WHICH", None, ModelSpecError) == "a"   # no folder: the cached one
    finally:
        sys.modules.pop("zoo_entry_model", None)


def test_import_entry_never_reimports_an_installed_package(tmp_path: Path) -> None:
    import numpy

    (tmp_path / "numpy.py").write_text("raise RuntimeError('the user file was imported')\n")
    assert import_entry("numpy:ndarray", tmp_path, ModelSpecError) is numpy.ndarray
