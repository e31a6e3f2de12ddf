"""Gate judging (``pipeline/gates.py``) from a row's figures alone: every gate kind is judged at its
threshold when its figure is there, and fails, saying it was not measured, when its figure is not;
a gate the task does not check is noted, not failed."""
from __future__ import annotations

from pathlib import Path

import pytest

from edgeship.errors import GateFailure
from edgeship.pipeline.gates import check_device_gates, check_gates, judge_row, results_or_gate_failure
from edgeship.profile import Gates
from edgeship.results import Accuracy, Latency, ModelInfo, OutputAccuracy, Results, TaskAccuracy, VariantResult
from edgeship.spec import ModelSpec

HOST_RUNTIME = "onnxruntime 1.22.0"


def lat(device: str = "host", p50: float | None = 1.0, mean: float | None = 1.0, accuracy: Accuracy | None = None,
        **fields) -> Latency:
    return Latency(device=device, runtime=HOST_RUNTIME, warmup=1, iterations=4, p50_ms=p50, mean_ms=mean,
                   accuracy=accuracy, **fields)


def element(**figures) -> Accuracy:
    """A classification (or generic) accuracy block whose figures all pass the gates below, but those given."""
    base = {"samples": 8, "top1": 0.5, "top1_drop": 0.0, "agreement": 1.0, "sqnr_db": 40.0, "cosine": 0.9999,
            "max_abs_err": 0.01, "non_finite": 0, "output": "logits"}
    return Accuracy(**{**base, **figures})


def task_block(task: str, values: dict, notes: dict | None = None) -> Accuracy:
    return Accuracy(samples=8, non_finite=0, task=TaskAccuracy(task=task, values=values, notes=notes or {}))


def spec(task: str = "classification") -> ModelSpec:
    return ModelSpec(name="m", entry="m:build", inputs=[{"name": "x", "shape": [1, 2]}], task=task)


# --- element-wise gates (classification, generic) --------------------------------------------------------------

@pytest.mark.parametrize(("gates", "figures", "failure"), [
    (Gates(min_sqnr_db=20.0), {"sqnr_db": None}, "sqnr_db not measured (gate min 20.0)"),
    (Gates(min_cosine=0.99), {"cosine": None}, "cosine not measured (gate min 0.99)"),
    (Gates(min_agreement=0.9), {"agreement": None}, "agreement not measured (gate min 0.9)"),
    (Gates(max_top1_drop=1.0), {"top1_drop": None, "top1": None, "agreement": None},
     "top1_drop not measured (gate max 1)"),
])
def test_an_element_gate_whose_figure_is_missing_fails_saying_so(gates, figures, failure) -> None:
    result = check_gates(gates, element(**figures), [])
    assert not result.passed and failure in result.failures


def test_max_top1_drop_fails_when_the_primary_output_gave_no_top1_at_all() -> None:
    """A classifier whose primary output has no element-wise figures (its length varies, or it is an
    integer output): no top-1 class was compared, labels or not; the top-1 gate must not pass."""
    ragged = Accuracy(samples=8, non_finite=0, output="logits", outputs=[
        OutputAccuracy(name="logits", non_finite=0, note="the length varies by sample: no element-wise figures")])
    result = check_device_gates(Gates(max_top1_drop=1.0), ragged, [lat(accuracy=ragged)])
    assert result.failures == ["top1_drop not measured (gate max 1)"]


def test_max_top1_drop_is_skipped_without_labels_where_top1_classes_were_compared() -> None:
    """The documented exception: no labels to score top-1 by (the row's notes say "top1 is null")."""
    unlabelled = element(top1=None, top1_drop=None, agreement=0.5)
    assert check_gates(Gates(max_top1_drop=1.0), unlabelled, []).passed


def test_sqnr_of_identical_outputs_is_infinite_not_missing() -> None:
    assert check_gates(Gates(min_sqnr_db=20.0), element(sqnr_db=None, max_abs_err=0.0), []).passed


def test_sqnr_of_a_second_output_missing_fails_naming_the_output() -> None:
    acc = element(outputs=[OutputAccuracy(name="logits", sqnr_db=40.0, cosine=1.0, max_abs_err=0.01),
                           OutputAccuracy(name="aux", sqnr_db=None, cosine=1.0, max_abs_err=0.5)])
    assert check_gates(Gates(min_sqnr_db=20.0), acc, []).failures == [
        "sqnr_db of output aux not measured (gate min 20.0)"]


@pytest.mark.parametrize(("gates", "passing", "failing", "failure"), [
    (Gates(min_sqnr_db=20.0), {"sqnr_db": 20.0}, {"sqnr_db": 19.99}, "sqnr_db 19.99 < 20"),
    (Gates(min_cosine=0.99), {"cosine": 0.99}, {"cosine": 0.9899}, "cosine 0.9899 < 0.99"),
    (Gates(min_agreement=0.9), {"agreement": 0.9}, {"agreement": 0.875}, "agreement 0.875 < 0.9"),
    (Gates(max_top1_drop=1.0), {"top1_drop": 1.0}, {"top1_drop": 1.5}, "top1_drop 1.5 points > 1"),
    (Gates(min_sqnr_db=20.0), {"sqnr_db": 20.0}, {"sqnr_db": float("nan")}, "sqnr_db nan < 20"),
])
def test_a_present_element_figure_is_judged_at_the_threshold(gates, passing, failing, failure) -> None:
    assert check_gates(gates, element(**passing), []).passed
    assert check_gates(gates, element(**failing), []).failures == [failure]


def test_generic_task_checks_sqnr_and_cosine_only() -> None:
    acc = element(agreement=None, top1_drop=None)
    assert check_gates(Gates(min_sqnr_db=20.0, min_agreement=0.9, max_top1_drop=1.0), acc, [], "generic").passed
    assert check_gates(Gates(min_cosine=0.99), element(cosine=None), [], "generic").failures == [
        "cosine not measured (gate min 0.99)"]


# --- task gates ------------------------------------------------------------------------------------------------

TASK_GATE_CASES = [  # gate, task, the metric it reads
    ("min_map50_vs_float", "detection", "map50_vs_float"),
    ("min_recall_vs_float", "detection", "recall_vs_float"),
    ("min_miou_vs_float", "segmentation", "miou_vs_float"),
    ("min_pixel_agreement", "segmentation", "pixel_agreement"),
    ("min_cosine", "embedding", "cosine_mean"),
    ("min_cosine_worst", "embedding", "cosine_worst"),
    ("min_recall_at_1_vs_float", "embedding", "recall_at_1_vs_float"),
    ("min_spearman_vs_float", "embedding", "spearman_vs_float"),
]


@pytest.mark.parametrize(("gate", "task", "metric"), TASK_GATE_CASES)
def test_a_task_gate_whose_metric_is_missing_fails_saying_why(gate, task, metric) -> None:
    gates = Gates(**{gate: 0.9})
    assert check_gates(gates, task_block(task, {}), [], task).failures == [
        f"{metric} not measured (gate min 0.9): not computed"]
    why = {metric: "no detections in the float model's outputs"}
    assert check_gates(gates, task_block(task, {metric: None}, why), [], task).failures == [
        f"{metric} not measured (gate min 0.9): no detections in the float model's outputs"]
    no_task = Accuracy(samples=8, non_finite=0)  # the task's metrics could not be computed at all
    assert check_gates(gates, no_task, [], task).failures == [f"{metric} not measured (gate min 0.9): no task metrics"]


@pytest.mark.parametrize(("gate", "task", "metric"), TASK_GATE_CASES)
def test_a_present_task_metric_is_judged_at_the_threshold(gate, task, metric) -> None:
    gates = Gates(**{gate: 0.9})
    assert check_gates(gates, task_block(task, {metric: 0.9}), [], task).passed
    assert check_gates(gates, task_block(task, {metric: 0.875}), [], task).failures == [f"{metric} 0.875 < 0.9"]


def test_a_gate_the_task_does_not_check_is_noted_not_failed() -> None:
    row = VariantResult(name="v", backend="onnx", precision="int8", accuracy=task_block("detection", {}),
                        latency=[lat(accuracy=task_block("detection", {}))])
    row.accuracy = row.latency[0].accuracy
    judge_row(row, Gates(min_sqnr_db=20.0), "detection", ["boxes"], spec("detection"))
    assert row.gates.passed and row.gates.failures == []
    assert ("gates not checked for task detection: min_sqnr_db (the task is judged by min_map50_vs_float, "
            "min_recall_vs_float)") in row.notes


# --- no outputs, no timing -------------------------------------------------------------------------------------

NO_OUTPUTS = "accuracy not computed: no device returned outputs to compare with the float model's (accuracy gates " \
             "not checked)"


@pytest.mark.parametrize("gates", [Gates(min_sqnr_db=20.0), Gates(min_cosine=0.99), Gates(min_agreement=0.9),
                                   Gates(max_top1_drop=1.0)])
def test_accuracy_gates_fail_when_a_device_timed_it_but_returned_no_outputs(gates) -> None:
    """Timed with percentiles (a benchmark binary), or with a mean only (an adb program that prints
    only its total): either way no device returned outputs, and no accuracy gate passes."""
    assert check_device_gates(gates, None, [lat("phone", p50=1.5)]).failures == [NO_OUTPUTS]
    assert check_device_gates(gates, None, [lat("phone", p50=None, mean=1.5)]).failures == [NO_OUTPUTS]


def test_accuracy_gates_fail_when_no_device_ran_the_artifact() -> None:
    """Every device of the build skipped the job (each says why in the row's notes): no figure at all."""
    assert check_device_gates(Gates(min_sqnr_db=20.0), None, []).failures == [NO_OUTPUTS]
    for gate, task, _metric in TASK_GATE_CASES:
        assert check_device_gates(Gates(**{gate: 0.9}), None, [], task).failures == [NO_OUTPUTS]
    assert check_device_gates(Gates(), None, []).passed  # no gate: nothing to pass on missing figures


def test_no_outputs_is_said_once_where_every_device_already_failed_as_not_measured() -> None:
    lost = lat("board", p50=None, mean=None, notes=["not measured: ssh refused"])
    assert check_device_gates(Gates(min_sqnr_db=20.0), None, [lost]).failures == ["not measured on board: ssh refused"]


def test_p50_gate_fails_where_a_device_gave_no_p50() -> None:
    result = check_device_gates(Gates(max_p50_ms=5.0), None, [lat("phone", p50=None, mean=1.5)])
    assert result.failures == ["p50 not measured on phone (gate max 5 ms)"]


def test_p50_gate_fails_when_only_emulators_timed_it() -> None:
    emulated = lat("old-pc", p50=1.0, emulated="qemu-x86_64 7.2 -cpu Haswell (TCG)", accuracy=element())
    result = check_device_gates(Gates(max_p50_ms=5.0), emulated.accuracy, [emulated])
    assert result.failures == ["p50 not measured on any device (gate max 5 ms): only emulated devices timed it (an "
                               "emulator's time is not the CPU's)"]
    real = lat("host", p50=1.0, accuracy=emulated.accuracy)
    assert check_device_gates(Gates(max_p50_ms=5.0), emulated.accuracy, [real, emulated]).passed


def test_p50_gate_fails_when_no_device_ran_the_artifact() -> None:
    assert check_device_gates(Gates(max_p50_ms=5.0), None, []).failures == [
        "p50 not measured on any device (gate max 5 ms): no device of the build ran the artifact"]


def test_a_present_p50_is_judged_at_the_threshold_and_outputs_only_sizes_are_not_timed() -> None:
    acc = element()
    assert check_device_gates(Gates(max_p50_ms=5.0), acc, [lat(p50=5.0, accuracy=acc)]).passed
    assert check_device_gates(Gates(max_p50_ms=5.0), acc, [lat(p50=5.1, accuracy=acc)]).failures == [
        "p50 5.1 ms on host > 5 ms"]
    at_max = lat(p50=None, mean=None, size="max", accuracy=element())
    assert check_device_gates(Gates(max_p50_ms=5.0), acc, [lat(p50=1.0, accuracy=acc), at_max]).passed


# --- judge_row -------------------------------------------------------------------------------------------------

def test_judge_row_leaves_a_row_no_device_here_can_run_unchecked() -> None:
    row = VariantResult(name="trt", backend="tensorrt", precision="fp16",
                        notes=["host: not measured here: TensorRT needs an NVIDIA GPU"])
    judge_row(row, Gates(min_sqnr_db=20.0), "classification", ["logits"], spec())
    assert row.gates.passed and not row.gates.checked
    assert row.notes[-1] == "gates not checked: no device in this build can run the artifact"


def test_judge_row_leaves_a_row_every_device_skipped_unchecked_not_passed() -> None:
    """An artifact this machine could run, in a build whose devices all skip it (an Android device
    without a program for its runtime): no figure, so not a checked pass; not checked, as README's
    exit codes say ("not measured", never "pass"), and the build does not fail on it."""
    row = VariantResult(name="ort", backend="onnx", precision="int8",
                        notes=["phone: not measured here: no native benchmark program runs onnxruntime"])
    judge_row(row, Gates(min_sqnr_db=20.0, max_p50_ms=5.0), "classification", ["logits"], spec())
    assert not row.gates.checked and row.gates.failures == []
    assert row.notes[-1] == "gates not checked: no device in this build can run the artifact"


def test_judge_row_judges_figures_and_declared_names_and_hints_a_detector_that_failed() -> None:
    acc = element()
    row = VariantResult(name="ort", backend="onnx", precision="int8", accuracy=acc, latency=[lat(accuracy=acc)])
    judge_row(row, Gates(min_sqnr_db=20.0), "classification", ["logits"], spec())
    assert row.gates.passed and row.gates.failures == [] and row.notes == []
    row.lowering.details = {"outputs": [{"name": "output_0"}]}
    judge_row(row, Gates(min_sqnr_db=50.0), "classification", ["logits"], spec())
    assert row.gates.failures == ["sqnr_db 40 < 50", "output names: the artifact declares output_0; the float "
                                                     "model's outputs are logits"]
    found = task_block("detection", {"map50_vs_float": 0.5, "recall_vs_float": 1.0})
    detector = VariantResult(name="ort", backend="onnx", precision="int8", accuracy=found,
                             latency=[lat(accuracy=found)])
    judge_row(detector, Gates(min_map50_vs_float=0.9), "detection", ["boxes"], spec("detection"))
    assert detector.gates.failures == ["map50_vs_float 0.5 < 0.9"]
    assert "[detection] postprocess = \"host\"" in detector.notes[-1]


def test_results_or_gate_failure_raises_exit_3_on_a_failed_row_or_an_unmeasured_device() -> None:
    info = ModelInfo(name="m", entry="m:build", weights_sha256="w", inputs=[], params=1)
    ok = VariantResult(name="ok", backend="onnx", precision="fp32")
    results = Results(target="t", created="2026-01-01T00:00:00Z", toolchain={}, variants=[ok], model=info)
    assert results_or_gate_failure(results, [], Path("out/results.json")) is results
    with pytest.raises(GateFailure, match=r"^requested device phone measured nothing: x; see out/results.json$"):
        results_or_gate_failure(results, ["requested device phone measured nothing: x"], Path("out/results.json"))
    ok.gates.passed = False
    with pytest.raises(GateFailure, match=r"^1 variant\(s\) failed validation: ok; see out/results.json$"):
        results_or_gate_failure(results, [], Path("out/results.json"))
