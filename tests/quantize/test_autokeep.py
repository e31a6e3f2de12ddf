"""keep_float = "auto": the fewest layers, most sensitive first, kept in float for the variant's
accuracy gates to pass on the calibration samples; the search itself, and each quantizer with it."""
from __future__ import annotations

import numpy as np
import pytest

from edgeship import metrics
from edgeship.calibration import Dataset
from edgeship.quantize.autokeep import AutoKeep, search


class SqnrBudget:
    """A budget of one gate: the SQNR of every output against float at least ``min_db``."""

    def __init__(self, min_db: float) -> None:
        self.min_db, self.judged = min_db, 0

    def failures(self, samples: Dataset, reference: list, outputs: list) -> list[str]:
        self.judged += 1
        value = metrics.sqnr_db(np.concatenate([r.ravel() for r in reference]),
                                np.concatenate([o.ravel() for o in outputs]))
        return [] if value is None or value >= self.min_db else [f"sqnr_db {value:.3g} < {self.min_db:g}"]

    def described(self) -> str:
        return f"min_sqnr_db {self.min_db:g}"


def outputs_with(kept: list[str], error_of: dict[str, float]) -> list[list[np.ndarray]]:
    """One batch, one output: ones plus the error of every layer not kept."""
    return [[np.ones((4, 8)) + sum(e for name, e in error_of.items() if name not in kept)]]


SAMPLES = Dataset({"x": np.zeros((4, 2), np.float32)}, None, "four samples")
ERRORS = {f"layer{i}": 0.3 if i < 2 else 0.001 for i in range(8)}  # two layers carry the error


def test_auto_keep_searches_on_the_emulation_and_confirms_on_the_real_model() -> None:
    real = []
    auto = AutoKeep(SqnrBudget(30.0), lambda kept: real.append(list(kept)) or outputs_with(kept, ERRORS))
    emulated = lambda kept: outputs_with(kept, ERRORS)  # noqa: E731
    choice = search(list(ERRORS), outputs_with(list(ERRORS), {}), SAMPLES, auto, emulated)
    assert choice.kept == ["layer0", "layer1"] and choice.failures == [] and choice.cap == 2
    assert real == [[], ["layer0", "layer1"]]  # the full model first, then only the choice
    assert [(t["kept"], t["run"]) for t in choice.tried] == [(0, "real"), (1, "emulated"), (2, "real")]  # the cap


def test_auto_keep_adds_layers_while_the_real_model_still_fails_and_stops_at_a_quarter() -> None:
    optimistic = {name: 0.0 for name in ERRORS}  # the emulation sees no error at all
    auto = AutoKeep(SqnrBudget(30.0), lambda kept: outputs_with(kept, ERRORS))
    choice = search(list(ERRORS), outputs_with(list(ERRORS), {}), SAMPLES, auto,
                    lambda kept: outputs_with(kept, optimistic))
    assert choice.kept == ["layer0", "layer1"] and not choice.failures
    hopeless = AutoKeep(SqnrBudget(200.0), lambda kept: outputs_with(kept, ERRORS))
    capped = search(list(ERRORS), outputs_with(list(ERRORS), {}), SAMPLES, hopeless, None)
    assert len(capped.kept) == capped.cap == 2 and capped.failures[0].startswith("sqnr_db")
    assert "still fail: sqnr_db" in capped.note(hopeless.budget, 4)


def test_auto_keep_tries_the_cap_after_two_real_failures_and_stops_there_when_it_fails_too() -> None:
    errors = {f"layer{i}": 0.3 if i < 3 else 0.001 for i in range(16)}  # three layers carry the error; cap 4
    real = []
    auto = AutoKeep(SqnrBudget(30.0), lambda kept: real.append(len(kept)) or outputs_with(kept, errors))
    choice = search(list(errors), outputs_with(list(errors), {}), SAMPLES, auto, None)
    assert choice.kept == ["layer0", "layer1", "layer2"] and not choice.failures and choice.cap == 4
    assert real == [0, 1, 4, 2, 3]  # the cap passes: the walk goes on and finds the fewest, as before
    hopeless = AutoKeep(SqnrBudget(200.0), lambda kept: real.append(len(kept)) or outputs_with(kept, errors))
    real.clear()
    capped = search(list(errors), outputs_with(list(errors), {}), SAMPLES, hopeless, None)
    assert real == [0, 1, 4] and len(capped.kept) == 4 and capped.failures[0].startswith("sqnr_db")
    assert [t["kept"] for t in capped.tried] == [0, 1, 4]
    real.clear()  # the same on the emulation: 1, then the cap, emulated; the real run at the cap confirms
    emulated = search(list(errors), outputs_with(list(errors), {}), SAMPLES, hopeless,
                      lambda kept: outputs_with(kept, errors))
    assert [(t["kept"], t["run"]) for t in emulated.tried] == [(0, "real"), (1, "emulated"), (4, "emulated"),
                                                              (4, "real")]
    assert len(emulated.kept) == 4 and emulated.failures and real == [0, 4]


def test_auto_keep_keeps_nothing_when_the_full_model_is_within_the_budget() -> None:
    auto = AutoKeep(SqnrBudget(3.0), lambda kept: outputs_with(kept, ERRORS))  # the full model: 4.4 dB
    choice = search(list(ERRORS), outputs_with(list(ERRORS), {}), SAMPLES, auto, None)
    assert choice.kept == [] and len(choice.tried) == 1
    assert choice.note(auto.budget, 4) == ("keep_float auto: 0 layer(s) kept in float, the fewest by which the "
                                           "variant's gates (min_sqnr_db 3) on 4 calibration samples pass")


@pytest.mark.parametrize(("backend", "method", "options"), [
    ("onnx", "export", {}), ("openvino", "export", {}),
    pytest.param("executorch", "export", {"partitioner": "xnnpack"}, marks=pytest.mark.slow)])
def test_quantizer_keep_float_auto_keeps_the_culprit_layer_for_the_budget(lower_culprit, culprit_model, backend,
                                                                          method, options) -> None:
    """The culprit model's first layer costs most; a budget between the all-int8 and the culprit-float
    SQNR keeps exactly it, one met by the full model keeps nothing."""
    from tests.quantize.conftest import sqnr_vs_eager
    from tests.quantize.culprit import samples

    _, all_int8 = lower_culprit(backend, method, {"method": "minmax"}, name="all", **options)
    full = sqnr_vs_eager(culprit_model, all_int8, samples(8, seed=1), n=8)
    budget = SqnrBudget(full + 6)
    kept, predict = lower_culprit(backend, method, {"method": "minmax", "keep_float": "auto"}, name="auto",
                                  budget=budget, **options)
    details = kept.details["quantization"]
    assert len(details["kept_float"]) == 1 and details["kept_float"][0] == details["sensitivity"]["worst"][0]["layer"]
    assert details["sensitivity"]["auto"]["failures_on_calibration"] == []
    assert sqnr_vs_eager(culprit_model, predict, samples(8, seed=1), n=8) > full + 6
    easy, _ = lower_culprit(backend, method, {"method": "minmax", "keep_float": "auto"}, name="easy",
                            budget=SqnrBudget(full - 10), **options)
    assert easy.details["quantization"]["kept_float"] == []
    assert any(n.startswith("keep_float auto: 0 layer(s)") for n in easy.notes)


def test_quantizer_keep_float_auto_without_gates_is_a_lowering_error(lower_culprit) -> None:
    from edgeship.errors import LoweringError

    with pytest.raises(LoweringError, match="keep_float = \"auto\" needs the variant's accuracy gates"):
        lower_culprit("onnx", "export", {"method": "minmax", "keep_float": "auto"}, name="none")
