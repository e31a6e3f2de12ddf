"""measure(): bounded retries with backoff for dropped connections, failure records, the cv flag,
and per-device accuracy gates. The devices here are scripted stand-ins (what fails, and when, is
the point); the ssh tests run the same paths through a real sshd."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeship.calibration import Dataset
from edgeship.devices.base import Device, Job, JobResult, MeasurementError, TransportError
from edgeship.errors import DataError
from edgeship.pipeline.gates import check_device_gates, check_gates
from edgeship.pipeline.validate import (
    Reference,
    accuracy_of,
    check_labels,
    flag_unsteady,
    measure,
    reference_gates,
)
from edgeship.profile import Gates, LatencySettings
from edgeship.results import Accuracy, Latency
from edgeship.spec import ModelSpec
from edgeship.tasks.evaluate import TaskJudge


class ScriptedDevice(Device):
    """Raises the given errors in turn, then returns a result with these timings."""

    transport = "ssh"

    def __init__(self, errors: list[Exception], timings: list[float] | None = None, retries: int = 2) -> None:
        super().__init__("board")
        self.errors, self.timings, self.retries, self.backoff_s, self.runs = list(errors), timings, retries, 0.5, 0

    @property
    def address(self) -> str:
        return "scripted"

    def check(self):
        raise NotImplementedError

    def run_job(self, job: Job, workdir: Path) -> JobResult:
        self.runs += 1
        if self.errors:
            raise self.errors.pop(0)
        return JobResult({"ok": True, "runtime_version": "onnxruntime 1.32.0", "timings_ms": self.timings,
                          "threads": 1, "load_ms": 3.0, "peak_rss_mb": 80.0}, [], notes=["copied 3 files"])


def job() -> Job:
    return Job(runtime="onnxruntime", artifact=None, sha256=None, inputs=Path("x.npz"), input_names=["x"],
               batch=1, warmup=1, iterations=4, threads=1, timeout_s=10)


def test_measure_retries_a_dropped_connection_with_doubling_backoff(tmp_path) -> None:
    device = ScriptedDevice([TransportError("link down"), TransportError("link down")], [1.0, 1.0, 1.0, 1.0])
    delays: list[float] = []
    lat = measure(device, job(), LatencySettings(), tmp_path, sleep=delays.append).latency
    assert delays == [0.5, 1.0] and device.runs == 3 and lat.attempts == 3
    assert lat.p50_ms == 1.0 and lat.runtime == "onnxruntime 1.32.0"
    assert lat.notes[:2] == ["attempt 1 failed: link down; retried after 0.5 s",
                             "attempt 2 failed: link down; retried after 1 s"] and "copied 3 files" in lat.notes


def test_measure_gives_up_after_the_retries_with_a_row_without_numbers(tmp_path) -> None:
    device = ScriptedDevice([TransportError("link down")] * 5, retries=1)
    delays: list[float] = []
    m = measure(device, job(), LatencySettings(), tmp_path, sleep=delays.append)
    assert device.runs == 2 and delays == [0.5] and m.outputs is None
    assert m.latency.notes[-1] == "not measured: link down (gave up after 2 attempts)"
    assert all(getattr(m.latency, k) is None for k in ("p50_ms", "p90_ms", "p99_ms", "mean_ms", "cv", "load_ms"))


def test_measure_does_not_retry_a_runner_failure(tmp_path) -> None:
    device = ScriptedDevice([MeasurementError("artifact sha256 does not match")])
    lat = measure(device, job(), LatencySettings(), tmp_path, sleep=pytest.fail).latency
    assert device.runs == 1 and lat.notes == ["not measured: artifact sha256 does not match"]


def test_measure_flags_a_measurement_whose_cv_is_above_the_profiles_max(tmp_path) -> None:
    steady = measure(ScriptedDevice([], [1.0, 1.01, 0.99, 1.0]), job(), LatencySettings(max_cv=0.1), tmp_path)
    noisy = measure(ScriptedDevice([], [1.0, 3.0, 1.0, 5.0]), job(), LatencySettings(max_cv=0.1), tmp_path)
    assert steady.latency.cv_above_max is False and not any("unsteady" in n for n in steady.latency.notes)
    assert noisy.latency.cv_above_max is True and noisy.latency.notes[-1].startswith("unsteady: cv 0.")


def test_flag_unsteady_leaves_rows_without_cv_or_threshold_alone() -> None:
    mean_only = Latency(device="pixel8", runtime="executorch", warmup=0, iterations=1, mean_ms=3.0)
    flag_unsteady(mean_only, 0.1)
    with_cv = Latency(device="host", runtime="x", warmup=0, iterations=2, cv=0.5)
    flag_unsteady(with_cv, None)
    assert mean_only.cv_above_max is None and with_cv.cv_above_max is None


def test_device_gates_fail_a_variant_whose_outputs_differ_on_another_device() -> None:
    good = Accuracy(samples=8, agreement=1.0, sqnr_db=90.0, cosine=1.0, max_abs_err=1e-6)
    bad = Accuracy(samples=8, agreement=0.5, sqnr_db=12.0, cosine=0.9, max_abs_err=0.5)
    rows = [Latency(device="host", runtime="x", warmup=0, iterations=1, accuracy=good),
            Latency(device="board", runtime="x", warmup=0, iterations=1, accuracy=bad)]
    result = check_device_gates(Gates(min_sqnr_db=60.0), good, rows)
    assert not result.passed and result.failures == ["sqnr_db 12 < 60 (host: 90) on board"]
    assert check_device_gates(Gates(min_sqnr_db=60.0), good, rows[:1]).passed


def test_check_gates_fails_non_finite_outputs_even_without_gates() -> None:
    nan = Accuracy(samples=8, non_finite=3)
    assert check_gates(Gates(), nan, []).failures == ["outputs contain 3 non-finite values (NaN or inf)"]
    assert check_gates(Gates(min_sqnr_db=60.0), nan, []).failures == [
        "outputs contain 3 non-finite values (NaN or inf)"]


def test_check_gates_fails_a_nan_value_instead_of_passing_it() -> None:
    odd = Accuracy(samples=8, agreement=float("nan"), sqnr_db=float("nan"), top1_drop=float("nan"), max_abs_err=1.0)
    failures = check_gates(Gates(min_sqnr_db=60.0, min_agreement=0.9, max_top1_drop=1.0), odd, []).failures
    assert failures == ["sqnr_db nan < 60", "agreement nan < 0.9", "top1_drop nan points > 1"]


def test_check_gates_fails_accuracy_gates_when_the_reference_is_not_informative() -> None:
    vacuous = Accuracy(samples=8, agreement=1.0, max_abs_err=0.0, informative=False,
                       uninformative_reason="the float model's outputs are all zero")
    rows = [Latency(device="host", runtime="x", warmup=0, iterations=1, accuracy=vacuous),
            Latency(device="board", runtime="x", warmup=0, iterations=1, accuracy=vacuous.model_copy())]
    result = check_device_gates(Gates(min_sqnr_db=60.0), vacuous, rows)
    assert not result.passed and result.failures == [  # said once, not once per device
        "accuracy not informative: the float model's outputs are all zero (accuracy gates not checked)"]
    assert check_gates(Gates(max_p50_ms=5.0), vacuous, []).passed  # no accuracy gate: nothing claimed


def reference(outputs: np.ndarray, inputs: np.ndarray | None = None, labels=None, source="eval.npz") -> Reference:
    """A one-output classification reference."""
    inputs = np.arange(len(outputs) * 2, dtype=np.float32).reshape(len(outputs), 2) if inputs is None else inputs
    spec = ModelSpec(name="m", entry="m:build", inputs=[{"name": "x", "shape": [1, 2]}])
    return Reference(Dataset({"x": inputs}, None if labels is None else np.asarray(labels), source),
                     [outputs.astype(np.float32)], ["output"], Path("eval_inputs.npz"), TaskJudge(spec, ["output"]))


def test_accuracy_of_marks_every_figure_not_informative_when_the_float_outputs_are_zero() -> None:
    ref = reference(np.zeros((4, 3)))
    accuracy, notes = accuracy_of(ref, [np.zeros((4, 3))])
    assert accuracy.informative is False and accuracy.uninformative_reason == "the float model's outputs are all zero"
    assert "accuracy not informative: the float model's outputs are all zero; the figures prove nothing" in notes
    assert accuracy_of(reference(np.eye(4, 3)), [np.eye(4, 3)])[0].informative is True


def test_reference_gates_fail_the_eager_row_on_nan_or_a_float_model_that_does_not_reproduce() -> None:
    good = reference(np.eye(4, 3))
    assert reference_gates(good, accuracy_of(good, [np.eye(4, 3)])[0]).passed
    other_init = accuracy_of(good, [np.eye(4, 3)[::-1].copy()])[0]  # a differently initialised float model
    (failure,) = reference_gates(good, other_init).failures
    assert failure.startswith("the float model built again in the eager runner does not reproduce")
    nan = reference(np.array([[np.nan, 1.0], [1.0, 2.0]]))
    assert reference_gates(nan, None).failures == ["the float model's outputs contain 1 non-finite values (NaN or inf)"]


@pytest.mark.parametrize("labels", [[0, 1, 99, 2], [0, -1, 1, 2]])
def test_check_labels_refuses_a_label_that_is_not_a_class_of_the_outputs(labels) -> None:
    with pytest.raises(DataError, match=r"^eval\.npz \(4 sampled\): labels \(y\) must be class indices in \[0, 3\)"):
        check_labels(reference(np.zeros((4, 3)), labels=labels, source="eval.npz (4 sampled)"))
    check_labels(reference(np.zeros((4, 3)), labels=[0, 1, 2, 2]))


@pytest.mark.parametrize(("p50", "passed"), [(2.0, True), (9.0, False), (float("nan"), False), (None, False)])
def test_check_gates_p50_passes_only_a_measured_value_within_the_limit(p50, passed) -> None:
    row = Latency(device="pixel8", runtime="executorch", warmup=0, iterations=1, mean_ms=3.0, p50_ms=p50)
    result = check_gates(Gates(max_p50_ms=5.0), Accuracy(samples=4), [row])
    assert result.passed is passed
    if p50 is None:
        assert result.failures == ["p50 not measured on pixel8 (gate max 5 ms)"]


def test_outputs_of_another_signature_fail_the_variant_naming_both_sides() -> None:
    from edgeship.pipeline.schedule import ReuseKey, Task, record_measurements
    from edgeship.pipeline.validate import Measurement
    from edgeship.results import VariantResult

    ref = reference(np.eye(4, 3))
    row = VariantResult(name="v", backend="onnx", precision="fp32")
    lat = Latency(device="host", runtime="onnxruntime", warmup=0, iterations=1, p50_ms=1.0)
    wrong = Measurement(lat, [np.eye(4, 3).astype(np.float32), np.zeros((4, 2), np.float32)])
    job = Job(runtime="onnxruntime", artifact=None, sha256=None, inputs=Path("i.npz"), input_names=["x"], batch=1,
              warmup=0, iterations=1, threads=1, timeout_s=60)
    record_measurements(row, [Task(row, job, None, Path("w"), result=wrong)], ref, ReuseKey((), "sha", "ref"))
    assert row.accuracy is None and lat.output_mismatch == [
        "the artifact returns 2 output(s), the float model 1 (output)"]
    gates = check_device_gates(Gates(min_sqnr_db=60.0), row.accuracy, row.latency)
    assert not gates.passed and "output signature on host: the artifact returns 2 output(s)" in gates.failures[0]


def test_an_artifact_that_failed_to_run_on_a_device_or_size_fails_the_variant() -> None:
    opt = Latency(device="host", runtime="onnxruntime", warmup=0, iterations=1, p50_ms=1.0, mean_ms=1.0,
                  accuracy=Accuracy(samples=4, sqnr_db=90.0))
    error = "RuntimeError: input ids dimension 1 is 64, at most 16"
    at_max = Latency(device="host", runtime="onnxruntime", warmup=0, iterations=0, size="max",
                     notes=[f"not measured: {error}"], run_error=error)
    unreachable = Latency(device="pi", runtime="onnxruntime", warmup=0, iterations=1,
                          notes=["not measured: ssh to pi failed (gave up after 3 attempts)"])
    result = check_device_gates(Gates(min_sqnr_db=60.0, max_p50_ms=5.0), opt.accuracy, [opt, at_max])
    assert result.failures == [f"did not run on host at the max size: {error}"]
    assert check_device_gates(Gates(), opt.accuracy, [opt, unreachable]).failures == [
        "not measured on pi: ssh to pi failed (gave up after 3 attempts)"]  # unmeasured never passes


def test_a_runner_failure_is_recorded_as_the_artifacts_own_error(tmp_path) -> None:
    from edgeship.devices.base import RunnerError

    device = ScriptedDevice([RunnerError("RuntimeError: Following ops cannot be found: [torchvision::nms]")], [1.0])
    m = measure(device, job(), LatencySettings(), tmp_path, sleep=lambda s: None)
    assert m.latency.run_error == "RuntimeError: Following ops cannot be found: [torchvision::nms]"
    assert not check_device_gates(Gates(), None, [m.latency]).passed


def detection_reference(labels) -> Reference:
    """A two-sample reference of a detection model that post-processes itself (per-sample outputs)."""
    spec = ModelSpec(name="m", entry="m:build", inputs=[{"name": "x", "shape": [1, 2]}], task="detection")
    outputs = [[np.array([[0, 0, 10, 10]], np.float32)] * 2, [np.array([0.9], np.float32)] * 2, [np.array([0])] * 2]
    names = ["boxes", "scores", "labels"]
    return Reference(Dataset({"x": np.zeros((2, 2), np.float32)}, np.asarray(labels), "eval.npz"), outputs, names,
                     Path("eval_inputs.npz"), TaskJudge(spec, names))


PAD = [-1.0] * 5


@pytest.mark.parametrize(("labels", "message"), [
    ([[[0, 0, 10, 10, 0]], [[0, np.nan, 10, 10, 0]]], r"detection labels \(y\) contains 1 non-finite value"),
    ([[[0, 0, 10, 10, 0]], [[0, 0, 10, 10, 1.5]]], r"detection labels \(y\): sample 1 has fractional class 1.5"),
    ([[PAD], [[10, 0, 0, 10, 0]]], r"detection labels \(y\): sample 1 has 1 box\(es\) with x2 < x1 or y2 < y1"),
    ([[[0, 0, 10, 10, 0]]] * 3, r"detection labels \(y\) have shape \[3, 1, 5\]; expected boxes \[2, M, 5\] for the "
                                r"2 samples: per sample M rows of \(x1, y1, x2, y2, class\) in box format xyxy"),
    ([0, 1], r"detection labels \(y\) have shape \[2\]; expected boxes \[2, M, 5\]"),
])
def test_check_labels_refuses_detection_labels_that_are_not_boxes(labels, message: str) -> None:
    with pytest.raises(DataError, match=rf"^eval\.npz: {message}"):
        check_labels(detection_reference(labels))


def test_check_labels_takes_padded_detection_labels() -> None:
    check_labels(detection_reference([[[0, 0, 10, 10, 0], PAD], [PAD, PAD]]))
    check_labels(detection_reference(np.zeros((2, 0, 5))))


def test_check_labels_refuses_fractional_segmentation_masks() -> None:
    spec = ModelSpec(name="m", entry="m:build", inputs=[{"name": "x", "shape": [1, 2]}], task="segmentation")
    masks = np.zeros((2, 4, 5))

    def ref(labels: np.ndarray) -> Reference:
        return Reference(Dataset({"x": np.zeros((2, 2), np.float32)}, labels, "eval.npz"),
                         [np.zeros((2, 3, 4, 5), np.float32)], ["output"], Path("e.npz"), TaskJudge(spec, ["output"]))

    check_labels(ref(masks + 2.0))  # whole numbers in a float array (boxes-shaped [N, H, 5]) are classes
    masks[1, 2, 3] = 0.5
    with pytest.raises(DataError, match=r"^eval\.npz: segmentation labels \(y\) hold fractional values"):
        check_labels(ref(masks))


def test_reference_stage_keeps_float_box_labels_and_every_row_is_judged_against_them(tmp_path) -> None:
    """Through the cached reference stage: float labels round-trip reference.npz, pass check_labels,
    and give *_vs_labels: the float model finds 3 of the 4 labelled boxes."""
    from types import SimpleNamespace

    import torch

    from edgeship.cache import Cache
    from edgeship.pipeline.validate import reference_stage

    class InputBoxes(torch.nn.Module):
        """Finds the boxes its input holds: x [1, 10] is two (x1, y1, x2, y2, class) rows; class < 0: none."""

        def forward(self, x):
            rows = x.reshape(2, 5)[x.reshape(2, 5)[:, 4] >= 0]
            return {"boxes": rows[:, :4], "scores": torch.ones(len(rows)), "labels": rows[:, 4].long()}

    spec = ModelSpec(name="m", entry="m:build", inputs=[{"name": "x", "shape": [1, 10]}], task="detection")
    inputs = np.array([[0, 0, 10, 10, 0, 20, 20, 30.5, 30, 1], [5, 5, 15, 15, 0] + PAD], np.float32)
    labels = np.array([[[0, 0, 10, 10, 0], [20, 20, 30.5, 30, 1], [40, 40, 50, 50, 1]],
                       [[5, 5, 15, 15, 0], PAD, PAD]])
    model = SimpleNamespace(spec=spec, module=InputBoxes(), params=0, flops=0, state_sha256=None, counts={},
                            expect_state=lambda sha: None)
    ref = reference_stage(model, lambda plan: Dataset({"x": inputs}, labels, "boxsrc:evaluation"), None, {"k": 1},
                          Cache(tmp_path / "c"), tmp_path / "w")
    assert isinstance(ref.outputs[0], list) and ref.data.labels.dtype == np.float64
    assert ref.data.labels.tolist() == labels.tolist()
    values = accuracy_of(ref, ref.outputs)[0].task.values  # the eager row: the float outputs themselves
    assert values["recall_vs_labels"] == 0.75 and values["precision_vs_labels"] == 1.0
    assert values["mean_iou_vs_labels"] == 1.0 and values["recall_vs_float"] == 1.0

    def unread(plan) -> Dataset:
        raise AssertionError("a cache hit reads the labels back from reference.npz, not from the data source")

    again = reference_stage(model, unread, None, {"k": 1}, Cache(tmp_path / "c"), tmp_path / "w")
    assert again.data.labels.tolist() == labels.tolist() and again.sha256 == ref.sha256
    assert accuracy_of(again, again.outputs)[0].task.values == values


def embedding_reference(outputs: np.ndarray, labels=None) -> Reference:
    spec = ModelSpec(name="m", entry="m:build", inputs=[{"name": "x", "shape": [1, 2]}], task="embedding")
    x = np.arange(len(outputs) * 2, dtype=np.float32).reshape(len(outputs), 2)
    return Reference(Dataset({"x": x}, None if labels is None else np.asarray(labels), "eval.npz"),
                     [outputs.astype(np.float32)], ["output"], Path("e.npz"), TaskJudge(spec, ["output"]))


def test_check_labels_takes_embedding_groups_and_refuses_other_labels() -> None:
    out = np.random.default_rng(0).normal(size=(20, 8))
    check_labels(embedding_reference(out, np.repeat(np.arange(10), 2)))
    for bad in (np.zeros((20, 2), np.int64), np.linspace(0, 1, 20)):
        with pytest.raises(DataError, match=r"^eval\.npz: embedding labels \(y\) must be integer group ids \[N\]"):
            check_labels(embedding_reference(out, bad))


def test_embedding_accuracy_holds_the_set_metrics_and_the_group_recall() -> None:
    rng = np.random.default_rng(1)
    centres = rng.normal(size=(10, 8))
    out = np.repeat(centres, 2, axis=0) + 0.01 * rng.normal(size=(20, 8))
    accuracy, _ = accuracy_of(embedding_reference(out, np.repeat(np.arange(10), 2)), [out.astype(np.float32)])
    assert accuracy.task.values["recall_at_1_vs_float"] == 1.0 and accuracy.task.values["recall_at_1_vs_labels"] == 1.0
    assert accuracy.task.values["spearman_vs_float"] == pytest.approx(1.0)


def test_set_gates_are_judged_on_the_evaluation_set_not_at_the_min_and_max_sizes() -> None:
    from edgeship.results import TaskAccuracy

    def acc(recall: float | None) -> Accuracy:
        values = {"cosine_mean": 0.999, "cosine_worst": 0.995, "recall_at_1_vs_float": recall,
                  "spearman_vs_float": 0.99}
        notes = {} if recall is not None else {"recall_at_1_vs_float": "needs at least 16 samples; 8 here"}
        return Accuracy(samples=8, sqnr_db=30.0, cosine=0.999, max_abs_err=0.1, non_finite=0,
                        task=TaskAccuracy(task="embedding", values=values, notes=notes))

    gates = Gates(min_cosine_worst=0.99, min_recall_at_1_vs_float=0.95)
    main = acc(0.97)
    rows = [Latency(device="host", runtime="x", warmup=0, iterations=1, accuracy=main),
            Latency(device="host", runtime="x", warmup=0, iterations=0, size="min", accuracy=acc(None))]
    assert check_device_gates(gates, main, rows, "embedding").passed
    rows.append(Latency(device="board", runtime="x", warmup=0, iterations=1, accuracy=acc(0.90)))
    assert check_device_gates(gates, main, rows, "embedding").failures == [
        "recall_at_1_vs_float 0.9 < 0.95 (host: 0.97) on board"]
    assert check_gates(gates, acc(0.90), [], "embedding").failures == ["recall_at_1_vs_float 0.9 < 0.95"]


def test_size_datasets_take_the_specs_sizes_source_else_seeded_random_inputs(tmp_path) -> None:
    from types import SimpleNamespace

    from edgeship.pipeline.validate import size_datasets
    from edgeship.profile.models import EvaluationSettings
    from tests.test_shapes import sized_spec

    spec = sized_spec(tmp_path, "sized:at_size")
    plan = SimpleNamespace(sizes_source=spec.data.sizes, profile=SimpleNamespace(evaluation=EvaluationSettings()))
    sized = size_datasets(plan, spec)
    assert sized["min"].source == "sized:at_size('min')" and sized["max"].inputs["input_ids"].shape == (3, 512)
    plan.sizes_source = None
    assert size_datasets(plan, spec)["min"].source.startswith("8 seeded random inputs at the min size")
