"""The two sensitivity measures side by side: the ranking keep_float takes, the report, and the
fall back to the accumulated ranking where the own contribution cannot be measured."""
from __future__ import annotations

import json

import numpy as np

from edgeship.calibration import Dataset
from edgeship.quantize.quantized import Quantized
from edgeship.quantize.sensitivity import (
    LayerSensitivity,
    OneLayerRuns,
    fixed_float_outputs,
    sensitivity_and_fallback,
)

DATA = Dataset({"x": np.arange(32, dtype=np.float32).reshape(32, 1)}, None, "test")
# accumulated: c worst (error from a piles up); own: a worst
ACCUMULATED = [LayerSensitivity("a", "Conv", 20.0), LayerSensitivity("b", "Conv", 15.0),
               LayerSensitivity("c", "Conv", 10.0)]
NOISE = {"a": 0.3, "b": 0.01, "c": 0.03}  # relative error each layer adds when quantized alone


def _fixed_outputs(sample: Dataset, batch: int) -> OneLayerRuns:
    reference = [[np.ones((batch, 4), np.float32), np.zeros(batch, np.int64)] for _ in range(2)]
    return OneLayerRuns(reference, lambda layer: [[r[0] * (1 + NOISE[layer]), r[1]] for r in reference])


def _ragged_outputs(sample: Dataset, batch: int) -> OneLayerRuns:
    reference = [[np.ones((n, 4), np.float32)] for n in (3, 5)]  # boxes after NMS: a count per batch
    return OneLayerRuns(reference, lambda layer: reference)


def test_sensitivity_keep_float_takes_the_worst_own_contribution(tmp_path) -> None:
    report, kept = sensitivity_and_fallback(False, 1, DATA, (8, False), tmp_path, lambda s, b: ACCUMULATED,
                                            _fixed_outputs)
    assert kept == ["a"] and report["keep_float_ranking"] == "own" and "own_not_measured" not in report
    written = json.loads((tmp_path / "sensitivity.json").read_text())
    assert set(written["measures"]) == {"own_sqnr_db", "sqnr_db"}
    assert [(r["layer"], r["own_rank"], r["accumulated_rank"]) for r in written["layers"]] == [
        ("a", 1, 3), ("c", 2, 1), ("b", 3, 2)]
    assert written["layers"][0]["own_sqnr_db"] == round(-20 * np.log10(0.3), 2)
    assert written["layers"][0]["sqnr_db"] == 20.0 and report["worst"] == written["layers"]


def test_sensitivity_falls_back_to_the_accumulated_ranking_and_says_so_when_outputs_vary_in_length(tmp_path) -> None:
    report, kept = sensitivity_and_fallback(True, 1, DATA, (8, False), tmp_path, lambda s, b: ACCUMULATED,
                                            _ragged_outputs)
    assert kept == ["c"] and report["keep_float_ranking"] == "accumulated"
    assert "no float output keeps one shape" in report["own_not_measured"]
    written = json.loads((tmp_path / "sensitivity.json").read_text())
    assert written["own_not_measured"] == report["own_not_measured"]
    assert "accumulated" in written["order"] and all("own_sqnr_db" not in r for r in written["layers"])
    note = Quantized.describe("static", "x", sensitivity=report).notes[1]
    assert note.startswith("per-layer sensitivity: each layer's own contribution not measured (no float output")


def test_fixed_float_outputs_leaves_out_integer_and_ragged_outputs() -> None:
    batches = [[np.zeros((1, 4), np.float32), np.zeros(1, np.int64), np.zeros((n, 4), np.float32)] for n in (2, 3)]
    assert fixed_float_outputs(batches) == [0]


def test_the_per_layer_progress_lines_follow_the_builds_quiet(capsys) -> None:
    from edgeship.progress import Progress
    from edgeship.quantize.sensitivity import PROGRESS_EVERY, _progress

    Progress(quiet=False)
    _progress(PROGRESS_EVERY, PROGRESS_EVERY, 0.0)
    assert f"{PROGRESS_EVERY}/{PROGRESS_EVERY} layers quantized one at a time" in capsys.readouterr().err
    Progress(quiet=True)
    _progress(PROGRESS_EVERY, PROGRESS_EVERY, 0.0)
    assert capsys.readouterr().err == ""
    Progress(quiet=False)
