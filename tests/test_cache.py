"""The content-addressed cache: equal key parts hit, a failed compute leaves no entry."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from edgeship.cache import HOST, MARKER, Cache, CacheEntry, EntryDamaged, cache_key, entry_damage, file_hashes
from edgeship.errors import OutputError
from edgeship.machinekey import MachineKey, machine_key


def _writer(calls: list[str], text: str = "ranges"):
    def compute(folder: Path) -> None:
        calls.append(text)
        (folder / "data.txt").write_text(text)
    return compute


def test_cache_second_lookup_hits_without_computing(tmp_path: Path) -> None:
    cache, calls = Cache(tmp_path), []
    first = cache.get_or_compute("ns", {"sha": "a", "method": "minmax"}, _writer(calls))
    second = cache.get_or_compute("ns", {"method": "minmax", "sha": "a"}, _writer(calls))
    assert (first.hit, second.hit) == (False, True) and calls == ["ranges"]
    assert second.path == first.path and (second.path / "data.txt").read_text() == "ranges"


def test_cache_any_changed_part_misses(tmp_path: Path) -> None:
    cache, calls = Cache(tmp_path), []
    cache.get_or_compute("ns", {"sha": "a", "method": "minmax"}, _writer(calls))
    entry = cache.get_or_compute("ns", {"sha": "a", "method": "entropy"}, _writer(calls))
    assert not entry.hit and len(calls) == 2
    assert cache_key({"x": 1}) != cache_key({"x": 2})


def test_cache_failed_compute_leaves_no_entry(tmp_path: Path) -> None:
    cache = Cache(tmp_path)

    def broken(folder: Path) -> None:
        (folder / "half.txt").write_text("half")
        raise RuntimeError("calibration crashed")

    with pytest.raises(RuntimeError):
        cache.get_or_compute("ns", {"k": 1}, broken)
    assert not [p for p in (tmp_path / "ns").iterdir()]
    assert not cache.get_or_compute("ns", {"k": 1}, _writer([])).hit


def test_cache_keeps_the_entry_a_racing_writer_published_first(tmp_path: Path) -> None:
    cache = Cache(tmp_path)

    def slow(folder: Path) -> None:  # another process publishes the same key meanwhile
        Cache(tmp_path).get_or_compute("ns", {"k": 1}, _writer([], "theirs"))
        (folder / "data.txt").write_text("ours")

    entry = cache.get_or_compute("ns", {"k": 1}, slow)
    assert (entry.path / "data.txt").read_text() == "theirs"
    assert len(list((tmp_path / "ns").iterdir())) == 1


def test_cache_damaged_entry_is_discarded_and_computed_again_with_a_notice(tmp_path: Path) -> None:
    cache, calls = Cache(tmp_path), []
    first = cache.get_or_compute("ns", {"k": 1}, _writer(calls))
    (first.path / "data.txt").write_text("rang")  # truncated behind the cache's back
    again = cache.get_or_compute("ns", {"k": 1}, _writer(calls))
    assert not again.hit and calls == ["ranges", "ranges"] and (again.path / "data.txt").read_text() == "ranges"
    assert cache.notices == [f"stage cache entry ns/{first.path.name} is damaged (data.txt: sha256 differs from the "
                             "one stored with it); discarded, computing it again"]


def forge(entry: Path, name: str, text: str) -> None:
    """Edit a file of an entry and recompute its sha256 list, as anyone who can write the cache can."""
    (entry / name).write_text(text)
    doc = json.loads((entry / "key.json").read_text())
    doc["files"] = file_hashes(entry)
    (entry / "key.json").write_text(json.dumps(doc, sort_keys=True, indent=1))


def test_cache_entry_edited_and_its_sha256_list_recomputed_is_discarded_and_computed_again(tmp_path: Path) -> None:
    cache, calls = Cache(tmp_path), []
    first = cache.get_or_compute("ns", {"k": 1}, _writer(calls))
    forge(first.path, "data.txt", "forged")
    again = cache.get_or_compute("ns", {"k": 1}, _writer(calls))
    assert not again.hit and calls == ["ranges", "ranges"] and (again.path / "data.txt").read_text() == "ranges"
    assert len(cache.notices) == 1
    assert cache.notices[0].startswith(f"stage cache entry ns/{first.path.name} is damaged (key.json does not verify "
                                       "with this machine's key: changed since edgeship wrote it")
    assert cache.get("ns", {"k": 1}).files == {"data.txt": again.files["data.txt"]}


def test_cache_entries_of_another_key_are_neither_taken_nor_deleted(tmp_path: Path) -> None:
    """Two machines with different keys sharing one cache folder (or a process on a key of its own):
    each keeps its own entries; neither finds, reports or deletes the other's."""
    theirs = Cache(tmp_path, signer=MachineKey(b"another machine" * 3))
    their_entry = theirs.get_or_compute("ns", {"k": 1}, _writer([], "theirs"))
    ours, calls = Cache(tmp_path), []
    assert ours.get("ns", {"k": 1}) is None and their_entry.path.is_dir() and not ours.notices
    entry = ours.get_or_compute("ns", {"k": 1}, _writer(calls))
    assert not entry.hit and calls == ["ranges"] and (entry.path / "data.txt").read_text() == "ranges"
    again = theirs.get("ns", {"k": 1})
    assert again is not None and (again.path / "data.txt").read_text() == "theirs" and not theirs.notices
    assert ours.get("ns", {"k": 1}).path == entry.path != again.path
    assert ours.info().entries == 2 and ours.clear().entries == 2 and not tmp_path.exists()


def test_cache_entries_from_before_signing_are_misses_that_clear_removes(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    entry = cache.get_or_compute("ns", {"k": 1}, _writer([]))
    old = entry.path.parent / entry.key   # an entry as an edgeship before signed entries named it
    shutil.copytree(entry.path, old)
    (old / "key.json").write_text(json.dumps({"key": {"k": 1}, "files": file_hashes(old)}))
    cache.discard(entry.path)
    calls: list[str] = []
    assert not cache.get_or_compute("ns", {"k": 1}, _writer(calls)).hit and calls == ["ranges"]
    assert old.is_dir() and not cache.notices   # not reported as damaged: it is not looked at
    assert cache.info().entries == 2 and cache.clear().entries == 2 and not old.exists()


def test_cache_entry_copied_under_another_key_is_not_taken(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    one = cache.get_or_compute("ns", {"k": 1}, _writer([], "one"))
    shutil.copytree(one.path, cache.entry_path("ns", cache_key({"k": 2})))
    assert cache.get("ns", {"k": 2}) is None and cache.get("ns", {"k": 1}) is not None


def test_cache_racing_entry_that_does_not_verify_is_replaced_by_ours(tmp_path: Path) -> None:
    cache = Cache(tmp_path)

    def slow(folder: Path) -> None:  # meanwhile someone puts an entry of their own where ours goes
        forged = Cache(tmp_path, signer=MachineKey(b"forger" * 6)).get_or_compute("ns", {"k": 1}, _writer([], "x"))
        os.rename(forged.path, cache.entry_path("ns", forged.key))
        (folder / "data.txt").write_text("ours")

    entry = cache.get_or_compute("ns", {"k": 1}, slow)
    assert (entry.path / "data.txt").read_text() == "ours" and cache.get("ns", {"k": 1}) is not None
    assert len(list((tmp_path / "ns").iterdir())) == 1


def test_cache_without_a_machine_key_reuses_nothing_and_says_so_once(tmp_path: Path, monkeypatch) -> None:
    for k in (1, 2):
        Cache(tmp_path / "cache").get_or_compute("ns", {"k": k}, _writer([]))
    kept, key = sorted((tmp_path / "cache" / "ns").iterdir()), machine_key()
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "a-file" / "config"))   # no key can be kept there
    cache, calls = Cache(tmp_path / "cache"), []
    for k in (1, 2, 1):
        cache.get_or_compute("ns", {"k": k}, _writer(calls))
    assert calls == ["ranges", "ranges"] and len(cache.notices) == 1
    assert "no machine key could be kept" in cache.notices[0] and "nothing is reused" in cache.notices[0]
    # the machine's entries are neither deleted nor joined by the process's own (kept in a folder of its own)
    assert sorted((tmp_path / "cache" / "ns").iterdir()) == kept and len(kept) == 2
    assert all(entry_damage(entry, key) is None for entry in kept)


def _swapped(entry: CacheEntry, name: str = "data.txt") -> None:
    """What another process does to an entry after ``Cache.get`` checked it: replaces a file."""
    (entry.path / name).write_text("swapped")


def test_cache_read_of_a_file_swapped_after_the_check_misses_and_discards_the_entry(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    entry = cache.get_or_compute("ns", {"k": 1}, _writer([]))

    def read(entry: CacheEntry) -> str:
        _swapped(entry)
        return entry.read_bytes("data.txt").decode()

    assert cache.read("ns", {"k": 1}, read) is None and cache.get("ns", {"k": 1}) is None
    assert cache.notices == [f"stage cache entry ns/{entry.path.name} is damaged (data.txt: not the file its "
                             "signed sha256 list holds); discarded, computing it again"]


def test_cache_read_or_compute_computes_again_when_a_file_is_swapped_under_the_reader(tmp_path: Path) -> None:
    cache, calls, swaps = Cache(tmp_path), [], [1]
    cache.get_or_compute("ns", {"k": 1}, _writer(calls))

    def read(entry: CacheEntry) -> str:
        if swaps:
            swaps.pop()
            _swapped(entry)
        return entry.read_bytes("data.txt").decode()

    assert cache.read_or_compute("ns", {"k": 1}, _writer(calls), read) == "ranges" and len(calls) == 2
    assert len(cache.notices) == 1 and "data.txt: not the file its signed sha256 list holds" in cache.notices[0]
    always = lambda entry: (_swapped(entry), entry.read_bytes("data.txt"))  # noqa: E731
    with pytest.raises(OutputError, match="changed while this build read it, twice"):
        cache.read_or_compute("ns", {"k": 1}, _writer(calls), always)


def test_cache_entry_copy_file_leaves_the_destination_when_the_file_is_not_the_one_signed(tmp_path: Path) -> None:
    entry = Cache(tmp_path / "cache").get_or_compute("ns", {"k": 1}, _writer([]))
    victim, dest = tmp_path / "victim.txt", tmp_path / "work" / "data.txt"
    victim.write_text("precious")
    dest.parent.mkdir()
    dest.symlink_to(victim)   # planted: a copy is never written through it
    entry.copy_file("data.txt", dest)
    assert dest.read_text() == "ranges" and not dest.is_symlink() and victim.read_text() == "precious"
    _swapped(entry)
    with pytest.raises(EntryDamaged, match="data.txt: not the file its signed sha256 list holds"):
        entry.copy_file("data.txt", dest)
    assert dest.read_text() == "ranges" and sorted(p.name for p in dest.parent.iterdir()) == ["data.txt"]


@pytest.mark.parametrize("damage", ["missing", "extra"])
def test_cache_entry_with_a_file_missing_or_added_is_damaged(tmp_path: Path, damage: str) -> None:
    cache = Cache(tmp_path)
    entry = cache.get_or_compute("ns", {"k": 1}, _writer([]))
    if damage == "missing":
        (entry.path / "data.txt").unlink()
    else:
        (entry.path / "stray.bin").write_bytes(b"x")
    assert entry_damage(entry.path) is not None and cache.get("ns", {"k": 1}) is None
    assert not entry.path.exists()


def test_cache_sweep_removes_temporary_folders_of_dead_builds_only(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    cache.get_or_compute("ns", {"k": 1}, _writer([]))
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        dead_tmp = tmp_path / "ns" / f".{'a' * 12}.{HOST}.{child.pid}.x1y2z3.tmp"
        live_tmp = tmp_path / "ns" / f".{'b' * 12}.{HOST}.{live.pid}.x1y2z3.tmp"
        other = tmp_path / "ns" / ".notes.tmp"
        for folder in (dead_tmp, live_tmp, other):
            folder.mkdir()
        assert cache.sweep() == 1
        assert not dead_tmp.exists() and live_tmp.exists() and other.exists()
    finally:
        live.kill()
        live.wait()


def test_cache_temporary_folder_names_carry_host_and_pid(tmp_path: Path) -> None:
    seen = []
    Cache(tmp_path).get_or_compute("ns", {"k": 1}, lambda folder: seen.append(folder.name))
    assert seen[0].startswith(".") and f".{HOST}.{os.getpid()}." in seen[0] and seen[0].endswith(".tmp")


def _users_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "photos"
    (folder / "2024").mkdir(parents=True)
    (folder / "cat.jpg").write_bytes(b"jpeg")
    (folder / "2024" / "dog.jpg").write_bytes(b"jpeg")
    return folder


@pytest.mark.parametrize("action", ["clear", "info", "get_or_compute"])
def test_cache_refuses_a_folder_that_is_not_an_edgeship_cache(tmp_path: Path, action: str) -> None:
    folder = _users_folder(tmp_path)
    cache = Cache(folder)
    call = {"clear": cache.clear, "info": cache.info,
            "get_or_compute": lambda: cache.get_or_compute("ns", {"k": 1}, _writer([]))}[action]
    with pytest.raises(OutputError, match=rf"{folder}: not an edgeship cache .*cat.jpg"):
        call()
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) == ["2024", "2024/dog.jpg", "cat.jpg"]


def test_cache_adopts_an_empty_folder_and_one_holding_only_its_entries(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert Cache(tmp_path / "empty").get_or_compute("ns", {"k": 1}, _writer([])).path.is_dir()
    old = Cache(tmp_path / "old")  # a cache written before the marker existed
    old.get_or_compute("ns", {"k": 1}, _writer([]))
    (tmp_path / "old" / MARKER).unlink()
    assert old.info().entries == 1 and old.clear().entries == 1 and not (tmp_path / "old").exists()


def test_cache_clear_deletes_its_entries_and_keeps_anything_else(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    cache.get_or_compute("ns", {"k": 1}, _writer([]))
    cache.get_or_compute("other", {"k": 2}, _writer([]))
    (tmp_path / "cache" / "ns" / "notes.txt").write_text("mine")
    (tmp_path / "cache" / "README").write_text("mine")
    summary = cache.clear()
    assert summary.entries == 2 and summary.bytes > 0
    assert sorted(summary.kept) == ["README (not written by edgeship)", "ns/notes.txt (not written by edgeship)"]
    assert (tmp_path / "cache" / "ns" / "notes.txt").exists() and (tmp_path / "cache" / "README").exists()
    assert not (tmp_path / "cache" / "other").exists() and cache.info().entries == 0
