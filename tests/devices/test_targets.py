"""A remote device's cached CPU facts are taken only as their entry signed them: facts swapped after the
stage cache checked the entry are not taken; the device is probed again (issue 51, review of case 4)."""
from __future__ import annotations

import json
from pathlib import Path

from edgeship.cache import Cache
from edgeship.devices.cpu import parse_cpuinfo
from edgeship.devices.targets import FACTS_FILE, device_cpu
from tests.devices.test_cpu import RPI4_AARCH64, _Remote


def test_device_cpu_does_not_take_facts_swapped_after_the_entry_was_checked(tmp_path: Path, monkeypatch) -> None:
    cache, honest = Cache(tmp_path / "cache"), parse_cpuinfo(RPI4_AARCH64)
    device_cpu(_Remote("pi", honest), cache)
    real = Cache.get

    def racing(self, namespace, key_parts, redo="computing it again"):
        entry = real(self, namespace, key_parts, redo)
        if entry is not None:   # checked; now another process swaps the facts (a CPU with VNNI, say)
            (entry.path / FACTS_FILE).write_text(json.dumps({**honest, "flags": ["avx512_vnni"]}))
        return entry

    monkeypatch.setattr(Cache, "get", racing)
    again = _Remote("pi", honest)
    assert device_cpu(again, cache) == honest and again.probes == 1
    assert len(cache.notices) == 1 and cache.notices[0].endswith(
        f"({FACTS_FILE}: not the file its signed sha256 list holds); discarded, probing the device again")
