"""The content-addressed cache: equal key parts hit, a failed compute leaves no entry."""
from __future__ import annotations

from pathlib import Path

import pytest

from edgeship.cache import Cache, cache_key


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
