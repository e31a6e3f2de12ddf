"""The stage cache's float reference is read through its entry, each file checked as it is read: a file
swapped after ``Cache.get`` checked the entry (float outputs, labels, evaluation inputs, anchors, facts,
a dynamic model's sizes) is refused where it is read (issue 51, review of case 4)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from edgeship.cache import Cache, CacheEntry, EntryDamaged
from edgeship.devices.runner import encode_outputs
from edgeship.pipeline.validate import KeptReference

LABELS = np.arange(4, dtype=np.int64)


def _fill(folder: Path) -> None:
    np.savez(folder / "reference.npz", **encode_outputs([np.ones((4, 3), np.float32)]), labels=LABELS)
    np.savez(folder / "eval_inputs.npz", x=np.zeros((4, 2), np.float32))
    np.save(folder / "anchors.npy", np.zeros(2))
    (folder / "min").mkdir()
    np.savez(folder / "min" / "reference.npz", **encode_outputs([np.ones((1, 3), np.float32)]))
    np.savez(folder / "min" / "eval_inputs.npz", x=np.zeros((1, 2), np.float32))
    (folder / "facts.json").write_text(json.dumps({"params": 1, "flops": 2, "source": "eval.npz", "names": ["out"],
                                                   "sizes": {"min": "random"}}))


def _entry(tmp_path: Path) -> CacheEntry:
    return Cache(tmp_path / "cache").get_or_compute("reference", {"k": 1}, _fill)


def test_kept_reference_reads_every_file_of_the_entry(tmp_path: Path) -> None:
    kept = KeptReference.read(_entry(tmp_path), tmp_path / "work")
    assert kept.facts["names"] == ["out"] and np.array_equal(kept.labels, LABELS) and kept.anchors.shape == (2,)
    assert kept.inputs["x"].shape == (4, 2) and kept.outputs[0].shape == (4, 3)
    assert kept.sizes["min"][0]["x"].shape == (1, 2) and kept.sizes["min"][1][0].shape == (1, 3)
    assert all((tmp_path / "work" / name).is_file() for name in ("eval_inputs.npz", "min/eval_inputs.npz"))


@pytest.mark.parametrize("name", ["facts.json", "eval_inputs.npz", "reference.npz", "anchors.npy",
                                  "min/eval_inputs.npz", "min/reference.npz"])
def test_kept_reference_refuses_a_file_swapped_after_the_entry_was_checked(tmp_path: Path, name: str) -> None:
    entry = _entry(tmp_path)
    with open(entry.path / name, "ab") as f:   # another process changes it after Cache.get checked the entry
        f.write(b"\0")
    with pytest.raises(EntryDamaged, match=f"{name}: not the file its signed sha256 list holds"):
        KeptReference.read(entry, tmp_path / "work")
