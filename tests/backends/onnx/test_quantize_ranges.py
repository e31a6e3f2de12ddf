"""ONNX Runtime's calibration ranges kept in the stage cache are used only as their entry signed them: a
ranges file swapped after the entry was checked is not what quantize_static reads; calibration runs
again (issue 51, review of case 4)."""
from __future__ import annotations

import json

from edgeship.backends.onnx import quantize as qonnx
from edgeship.cache import Cache


def _widened(value: object) -> object:
    """Every number of a ranges file times 100: a well-formed file with other ranges."""
    if isinstance(value, dict):
        return {k: _widened(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_widened(v) for v in value]
    return value * 100 if isinstance(value, float) else value


def test_quantize_qdq_does_not_read_ranges_swapped_after_the_entry_was_checked(tiny_onnx, calib_data, tmp_path,
                                                                               monkeypatch) -> None:
    cache = Cache(tmp_path / "cache")
    qonnx.quantize_qdq(tiny_onnx, tmp_path / "a.onnx", calib_data, cache=cache, sensitivity=False)
    real = Cache.get_or_compute

    def racing(self, namespace, key_parts, compute, redo="computing it again"):
        entry = real(self, namespace, key_parts, compute, redo)
        if entry.hit:   # checked; now another process swaps the ranges for well-formed ones of its own
            ranges = entry.path / qonnx.RANGES
            ranges.write_text(json.dumps(_widened(json.loads(ranges.read_text()))))
        return entry

    monkeypatch.setattr(Cache, "get_or_compute", racing)
    done = qonnx.quantize_qdq(tiny_onnx, tmp_path / "b.onnx", calib_data, cache=cache, sensitivity=False)
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()
    assert done.details["calibration"]["cache"] == "miss" and len(cache.notices) == 1
    assert cache.notices[0].endswith(f"({qonnx.RANGES}: not the file its signed sha256 list holds); discarded, "
                                     "calibrating again")
