"""Per-layer sensitivity by two measures, the report written beside the artifact, and the
``keep_float`` fallback that keeps the most sensitive layers in float.

- **own** (``own_sqnr_db``): the model's outputs with only this layer quantized, every other layer
  float, against the float model's (every fixed-shape float output, flattened together). This is
  the layer's own contribution, the measure vendors' layer-sensitivity tools rank layers by, and the one
  ``keep_float`` uses: keeping a layer in float removes what it adds, not what it inherits.
- **accumulated** (``sqnr_db``): the layer's output in the fully quantized model against the same
  layer in the float model. Error from every quantized layer upstream counts too, so it puts late
  layers first even where an early one causes the error.

Where the own measure cannot be taken (no float output of fixed shape, as a detector whose
outputs vary in length), ``keep_float`` uses the accumulated ranking and the report says why.
"""
from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from edgeship.calibration.dataset import Dataset
from edgeship.errors import LoweringError
from edgeship.fsutil import atomic_write_text
from edgeship.quantize.autokeep import AutoKeep, Outputs, search

if TYPE_CHECKING:
    import numpy as np

SENSITIVITY_FILE = "sensitivity.json"
SENSITIVITY_IN_DETAILS = 10   # worst layers copied into results.json; the file has them all
SENSITIVITY_SAMPLES = 16      # calibration samples the sensitivity pass runs
PROGRESS_EVERY = 10           # layers between two progress lines of the own-contribution pass
MEASURES = {
    "own_sqnr_db": "own contribution: the model's outputs with only this layer quantized (every other layer "
                   "float) against the float model's, SQNR dB over every fixed-shape float output flattened "
                   "together; null: quantizing this layer alone changes no output",
    "sqnr_db": "accumulated: this layer's output in the fully quantized model against the same layer in the "
               "float model, SQNR dB; error from every quantized layer upstream counts too; null: identical",
}

@dataclass
class LayerSensitivity:
    """One layer's output in the quantized model against the same layer in the float model."""

    layer: str            # the name the backend's fallback takes (module path or graph node name)
    op: str               # operator or module type
    sqnr_db: float | None  # None: identical outputs (infinite SQNR)


@dataclass
class OneLayerRuns:
    """What the own-contribution measure asks of a backend: the float model's outputs on the
    sensitivity samples, and ``only(layer)``, the outputs with only that layer quantized."""

    reference: Outputs
    only: Callable[[str], Outputs]
    # every layer quantized but these, emulated on the calibrated graph (keep_float = "auto" searches
    # on it); None: the backend has no emulation cheaper than quantizing again
    without: Callable[[list[str]], Outputs] | None = None


class NotMeasurable(Exception):
    """Why the own-contribution measure cannot be taken for this model (the message says)."""


class SensitivityRow(TypedDict, total=False):
    """One layer of the sensitivity report (own_* only when the own contribution was measured)."""

    layer: str
    op: str
    own_sqnr_db: float | None
    own_rank: int
    sqnr_db: float | None
    accumulated_rank: int


class SensitivityReport(TypedDict, total=False):
    """``lowering.details.quantization.sensitivity``: the report file, the worst layers, and what
    keep_float = "auto" chose (``auto``, ``auto_note``)."""

    file: str
    samples: int
    layers: int
    keep_float_ranking: str
    own_seconds: float
    own_not_measured: str
    worst: list[SensitivityRow]
    auto: dict[str, object]
    auto_note: str


@dataclass
class OwnContribution:
    """Each layer's own-contribution SQNR, or why none was measured; how long the pass took."""

    sqnr_db: dict[str, float | None] = field(default_factory=dict)
    not_measured: str | None = None
    seconds: float = 0.0


def sqnr_of(ref: Sequence[np.ndarray], out: Sequence[np.ndarray]) -> float | None:
    """SQNR (dB) over paired lists of numpy arrays; None when they are identical."""
    import numpy as np

    from edgeship import metrics

    flat = [(np.asarray(r, np.float64).ravel(), np.asarray(o, np.float64).ravel()) for r, o in zip(ref, out)]
    value = metrics.sqnr_db(np.concatenate([r for r, _ in flat]), np.concatenate([o for _, o in flat]))
    return None if value is None or not math.isfinite(value) else value


def worst_first(layers: list[LayerSensitivity]) -> list[LayerSensitivity]:
    """Lowest accumulated SQNR first; identical layers (None) last."""
    return sorted(layers, key=lambda s: _db_key(s.sqnr_db))


def _db_key(value: float | None) -> float:
    return math.inf if value is None else value


def fixed_float_outputs(reference: Outputs) -> list[int]:
    """The outputs the own measure compares: float, with the same shape in every batch. None of
    them (a detector whose boxes vary in number) makes the measure impossible: NotMeasurable."""
    import numpy as np

    first = reference[0]
    kept = [i for i, out in enumerate(first) if np.issubdtype(np.asarray(out).dtype, np.floating)
            and all(np.shape(batch[i]) == np.shape(out) for batch in reference)]
    if not kept:
        shapes = ", ".join(f"{np.asarray(o).dtype} {list(np.shape(o))}" for o in first)
        raise NotMeasurable(f"no float output keeps one shape over the sensitivity samples (outputs: {shapes})")
    return kept


def outputs_sqnr(reference: Outputs, runs: Outputs, kept: list[int], layer: str) -> float | None:
    """SQNR (dB) of the ``kept`` outputs of ``runs`` against ``reference``, all flattened together."""
    import numpy as np

    pairs = [(ref[i], out[i]) for ref, out in zip(reference, runs) for i in kept]
    changed = [i for ref, out in zip(reference, runs) for i in kept if np.shape(ref[i]) != np.shape(out[i])]
    if changed or len(runs) != len(reference):
        what = f"output {changed[0]} changes shape" if changed else "the model answers another number of batches"
        raise NotMeasurable(f"with only {layer} quantized, {what}")
    return sqnr_of([r for r, _ in pairs], [o for _, o in pairs])


def own_contribution(make_runs: Callable[[Dataset, int], OneLayerRuns], sample: Dataset, batch: int,
                     layers: list[str]) -> OwnContribution:
    """Each layer's own contribution, quantized alone (NotMeasurable turns into the reason)."""
    start = time.perf_counter()
    found = OwnContribution()
    try:
        runs = make_runs(sample, batch)
        kept = fixed_float_outputs(runs.reference)
        names = list(dict.fromkeys(layers))
        for done, name in enumerate(names, 1):
            found.sqnr_db[name] = outputs_sqnr(runs.reference, runs.only(name), kept, name)
            _progress(done, len(names), start)
    except NotMeasurable as e:
        found = OwnContribution(not_measured=str(e))
    found.seconds = round(time.perf_counter() - start, 2)
    return found


def _progress(done: int, total: int, start: float) -> None:
    """One line every PROGRESS_EVERY layers on the build's progress console (stderr)."""
    if total >= PROGRESS_EVERY and (done % PROGRESS_EVERY == 0 or done == total):
        from edgeship.progress import detail

        detail(f"  per-layer sensitivity: {done}/{total} layers quantized one at a time "
               f"({time.perf_counter() - start:.0f} s)")


def ranked(layers: list[LayerSensitivity], own: OwnContribution) -> list[LayerSensitivity]:
    """Worst first by the own contribution (the accumulated SQNR breaks ties), or by the
    accumulated SQNR where the own one was not measured."""
    if own.not_measured is not None:
        return worst_first(layers)
    return sorted(layers, key=lambda s: (_db_key(own.sqnr_db.get(s.layer)), _db_key(s.sqnr_db)))


def sensitivity_summary(layers: list[LayerSensitivity], own: OwnContribution, folder: Path,
                        samples: int) -> SensitivityReport:
    """Write the full report beside the artifact (both measures, rows in keep_float's order);
    return the worst layers for results.json and which ranking keep_float takes."""
    rows = _rows(layers, own)
    ranking = "accumulated" if own.not_measured is not None else "own"
    summary: SensitivityReport = {"file": SENSITIVITY_FILE, "samples": samples, "layers": len(rows),
                                  "keep_float_ranking": ranking, "own_seconds": own.seconds}
    if own.not_measured is not None:
        summary["own_not_measured"] = own.not_measured
    facts = {k: v for k, v in summary.items() if k not in ("file", "samples", "layers")}
    atomic_write_text(folder / SENSITIVITY_FILE, json.dumps(
        {"measures": MEASURES, "samples": samples, **facts,
         "order": f"worst first by the {ranking} measure, the ranking keep_float takes its layers from",
         "layers": rows}, indent=1) + "\n")
    summary["worst"] = rows[:SENSITIVITY_IN_DETAILS]
    return summary


def _rows(layers: list[LayerSensitivity], own: OwnContribution) -> list[SensitivityRow]:
    """One row per layer, both figures (own only when measured), in keep_float's order."""
    accumulated_rank = {id(s): i for i, s in enumerate(worst_first(layers), 1)}
    rows = []
    for rank, s in enumerate(ranked(layers, own), 1):
        row: SensitivityRow = {"layer": s.layer, "op": s.op}
        if own.not_measured is None:
            row |= {"own_sqnr_db": _round(own.sqnr_db.get(s.layer)), "own_rank": rank}
        rows.append(row | {"sqnr_db": _round(s.sqnr_db), "accumulated_rank": accumulated_rank[id(s)]})
    return rows


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def sensitivity_sample(data: Dataset) -> Dataset:
    """The calibration samples the sensitivity pass (and keep_float = "auto") runs: seeded, the same
    for every backend."""
    return data.take(SENSITIVITY_SAMPLES, seed=0)


def sensitivity_and_fallback(wanted: bool, keep_float: int | str, data: Dataset, batch: tuple[int, bool],
                             folder: Path, measure: Callable[[Dataset, int], list[LayerSensitivity]],
                             one_layer: Callable[[Dataset, int], OneLayerRuns], auto: AutoKeep | None = None,
                             ) -> tuple[SensitivityReport | None, list[str]]:
    """The sensitivity report (when ``wanted``, or needed by ``keep_float``) and the ``keep_float``
    most sensitive layers (``"auto"``: as many as the variant's gates on the calibration samples
    need, ``quantize/autokeep.py``, with ``auto``, whose ``real`` runs every one of ``data``).
    ``measure(samples, batch)`` compares the layers (accumulated); ``one_layer(samples, batch)``
    runs the model with one layer quantized at a time (own); ``batch`` is (size, any size works)."""
    if not (wanted or keep_float):
        return None, []
    sample = sensitivity_sample(data)
    size = min(batch[0], len(sample)) if batch[1] else batch[0]
    layers = measure(sample, size)
    own = own_contribution(one_layer, sample, size, [s.layer for s in layers])
    report = sensitivity_summary(layers, own, folder, len(sample))
    ranking = [s.layer for s in ranked(layers, own)]
    if isinstance(keep_float, int):  # else "auto" (the settings allow no other string)
        return report, ranking[:keep_float]
    if auto is None or auto.budget is None:
        raise LoweringError("keep_float = \"auto\" needs the variant's accuracy gates; this quantizer was called "
                            "without them")
    runs = one_layer(data, min(batch[0], len(data)) if batch[1] else batch[0])  # judged on every calibration sample
    choice = search(ranking, runs.reference, data, auto, runs.without)
    report["auto"] = choice.details(auto.budget)
    report["auto_note"] = choice.note(auto.budget, len(data))
    return report, choice.kept


def sensitivity_note(report: SensitivityReport | None) -> list[str]:
    """The variant's notes: what keep_float = "auto" kept, and why the own contribution could not
    be measured (where it could not)."""
    notes = [report["auto_note"]] if report and "auto_note" in report else []
    if not report or "own_not_measured" not in report:
        return notes
    return notes + ["per-layer sensitivity: each layer's own contribution not measured (" + report["own_not_measured"]
            + "); keep_float ranks layers by their output in the quantized model (error accumulated upstream "
              "counts too)"]
