"""The observers' cached state (what calibration saw) is loaded only as its entry signed it: a file swapped
after the stage cache checked the entry is not loaded; the samples are run again (issue 51, review of case 4)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from edgeship.cache import Cache
from edgeship.calibration import Dataset
from edgeship.quantize.observers import OBSERVERS_FILE, calibrate_observers, observers

DATA = Dataset({"x": np.random.default_rng(0).random((8, 4), dtype=np.float32)}, None, "test samples")


def _prepared() -> torch.nn.Module:
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import prepare_fx

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval()
    return prepare_fx(model, get_default_qconfig_mapping("qnnpack"), (torch.zeros(1, 4),))


def _states(prepared: torch.nn.Module) -> dict[str, dict[str, torch.Tensor]]:
    return {name: {k: v.clone() for k, v in m.state_dict().items()} for name, m in observers(prepared).items()}


def test_calibrate_observers_does_not_load_a_state_swapped_after_the_entry_was_checked(tmp_path: Path,
                                                                                       monkeypatch) -> None:
    cache = Cache(tmp_path / "cache")
    first = _prepared()
    assert calibrate_observers(first, DATA, 1, cache, {"k": 1})["cache"] == "miss"
    honest = _states(first)
    forged = {name: {k: v * 100 for k, v in state.items()} for name, state in honest.items()}  # wider ranges
    real = Cache.get_or_compute

    def racing(self, namespace, key_parts, compute, redo="computing it again"):
        entry = real(self, namespace, key_parts, compute, redo)
        if entry.hit:   # checked; now another process swaps the file for a well-formed one of its own
            torch.save(forged, entry.path / OBSERVERS_FILE)
        return entry

    monkeypatch.setattr(Cache, "get_or_compute", racing)
    second = _prepared()
    facts = calibrate_observers(second, DATA, 1, cache, {"k": 1})
    again = _states(second)
    assert again.keys() == honest.keys() and all(
        torch.equal(again[name][k], honest[name][k]) for name in honest for k in honest[name])
    assert facts["cache"] == "miss" and len(cache.notices) == 1
    assert cache.notices[0].endswith(f"({OBSERVERS_FILE}: not the file its signed sha256 list holds); discarded, "
                                     "calibrating again")
