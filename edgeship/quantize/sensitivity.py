"""Per-layer sensitivity: each layer's quantized output against the float model's, the report
written beside the artifact, and the ``keep_float`` fallback that keeps the worst layers in float."""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from edgeship.calibration.dataset import Dataset
from edgeship.fsutil import atomic_write_text

SENSITIVITY_FILE = "sensitivity.json"
SENSITIVITY_IN_DETAILS = 10   # worst layers copied into results.json; the file has them all
SENSITIVITY_SAMPLES = 16      # calibration samples the sensitivity pass runs


@dataclass
class LayerSensitivity:
    """One layer's output in the quantized model against the same layer in the float model."""

    layer: str            # the name the backend's fallback takes (module path or ONNX node name)
    op: str               # operator or module type
    sqnr_db: float | None  # None: identical outputs (infinite SQNR)


def sqnr_of(ref: Any, out: Any) -> float | None:
    """SQNR (dB) over paired lists of numpy arrays; None when they are identical."""
    import numpy as np

    from edgeship import metrics

    flat = [(np.asarray(r, np.float64).ravel(), np.asarray(o, np.float64).ravel()) for r, o in zip(ref, out)]
    value = metrics.sqnr_db(np.concatenate([r for r, _ in flat]), np.concatenate([o for _, o in flat]))
    return None if value is None or not math.isfinite(value) else value


def worst_first(layers: list[LayerSensitivity]) -> list[LayerSensitivity]:
    """Lowest SQNR first; identical layers (None) last."""
    return sorted(layers, key=lambda s: math.inf if s.sqnr_db is None else s.sqnr_db)


def sensitivity_summary(layers: list[LayerSensitivity], folder: Path, samples: int) -> dict[str, Any]:
    """Write the full report beside the artifact; return the worst layers for results.json."""
    ranked = worst_first(layers)
    rows = [asdict(s) | {"sqnr_db": None if s.sqnr_db is None else round(s.sqnr_db, 2)} for s in ranked]
    atomic_write_text(folder / SENSITIVITY_FILE, json.dumps(
        {"measure": "each layer's output in the quantized model against the float model's, SQNR dB, "
                    "worst first", "samples": samples, "layers": rows}, indent=1) + "\n")
    return {"file": SENSITIVITY_FILE, "samples": samples, "layers": len(rows),
            "worst": rows[:SENSITIVITY_IN_DETAILS]}


def sensitivity_and_fallback(wanted: bool, keep_float: int, data: Dataset, batch: tuple[int, bool], folder: Path,
                             measure: Callable[[Dataset, int], list[LayerSensitivity]],
                             ) -> tuple[dict[str, Any] | None, list[str]]:
    """The sensitivity report (when ``wanted``, or needed by ``keep_float``) and the ``keep_float``
    worst layers. ``measure(samples, batch)`` compares the layers; ``batch`` is (size, any size works)."""
    if not (wanted or keep_float):
        return None, []
    sample = data.take(SENSITIVITY_SAMPLES, seed=0)
    layers = measure(sample, min(batch[0], len(sample)) if batch[1] else batch[0])
    return sensitivity_summary(layers, folder, len(sample)), [s.layer for s in worst_first(layers)[:keep_float]]
