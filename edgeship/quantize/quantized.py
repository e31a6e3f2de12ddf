"""What every backend's quantizer hands back (``Quantized``: the facts for
``lowering.details["quantization"]`` and the note) and the cached calibration step they share."""
from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgeship.cache import Cache, CacheEntry
from edgeship.quantize.sensitivity import sensitivity_note


@dataclass
class Quantized:
    """What a quantizer did: ``details`` for results.json and one line for the notes."""

    details: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    @classmethod
    def describe(cls, scheme: str, engine: str, **facts: Any) -> Quantized:
        """Details plus the standard note (scheme, engine, method, samples, weights, cache), and a
        second one when the sensitivity report fell back to the accumulated ranking."""
        details = {"scheme": scheme, "engine": engine, **facts}
        parts = [f"int8 {scheme}: {engine}"]
        calibration = facts.get("calibration") or {}
        if facts.get("method"):
            source = f" ({calibration['data']})" if calibration.get("data") else ""
            parts.append(f"{facts['method']} calibration on {facts.get('samples')} samples{source}")
        if "per_channel" in facts:
            parts.append(("per-channel" if facts["per_channel"] else "per-tensor")
                         + (" 7-bit weights" if facts.get("reduce_range") else " weights"))
        if calibration.get("cache"):
            parts.append(f"calibration cache {calibration['cache']}")
        if facts.get("kept_float"):
            parts.append("kept in float: " + ", ".join(facts["kept_float"]))
        return cls(details, ["; ".join(parts), *sensitivity_note(facts.get("sensitivity"))])


@contextlib.contextmanager
def calibrated(cache: Cache | None, namespace: str, key_parts: Mapping[str, object],
               compute: Callable[[Path], None]) -> Iterator[tuple[CacheEntry, dict[str, object]]]:
    """The calibration result for ``key_parts``: from the cache, or computed (and cached when a
    cache is given; without one it lives in a temporary folder for the duration of the block)."""
    with contextlib.ExitStack() as stack:
        store = cache or Cache(Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="edgeship-calib-"))))
        start = time.perf_counter()
        entry = store.get_or_compute(namespace, key_parts, compute)
        facts: dict[str, object] = {"cache": ("hit" if entry.hit else "miss") if cache else "off",
                                    "key": entry.key, "seconds": round(time.perf_counter() - start, 3)}
        yield entry, facts
