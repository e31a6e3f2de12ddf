"""A detection reference that proves nothing is "not informative", as a fixed-length one is: the
float model's detections all scored alike (their order arbitrary), the same for every sample, or
none at all. And a detector's plain tuple of three outputs is read in torchvision's order."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeship.calibration import Dataset
from edgeship.pipeline.gates import check_gates
from edgeship.pipeline.validate import Reference, accuracy_of
from edgeship.profile import Gates
from edgeship.spec import ModelSpec
from edgeship.tasks.evaluate import TaskJudge

NAMES = ["boxes", "scores", "labels"]


def spec(**detection) -> ModelSpec:
    return ModelSpec(name="m", entry="m:build", inputs=[{"name": "x", "shape": [1, 2]}], task="detection",
                     detection=detection)


def reference(boxes: list, scores: list, names: list[str] = NAMES, **detection) -> Reference:
    """Two samples of a detector that post-processes itself; every box of class 0."""
    outputs = [[np.asarray(b, np.float32).reshape(-1, 4) for b in boxes], [np.asarray(s, np.float32) for s in scores],
               [np.zeros(len(s), np.int64) for s in scores]]
    return Reference(Dataset({"x": np.arange(4, dtype=np.float32).reshape(2, 2)}, None, "eval.npz"), outputs, names,
                     Path("eval_inputs.npz"), TaskJudge(spec(**detection), names))


BOXES = [[[0, 0, 10, 10], [20, 20, 30, 30]], [[5, 5, 15, 15], [40, 40, 60, 60]]]


@pytest.mark.parametrize(("boxes", "scores", "reason"), [
    (BOXES, [[1 / 7, 1 / 7], [1 / 7, 1 / 7]], "every detection of the float model has the same score (0.142857): "
                                              "which one ranks first, and so every match against it, is arbitrary"),
    ([BOXES[0], BOXES[0]], [[0.9, 0.4], [0.9, 0.4]], "the float model gives the same detections for all 2 "
                                                     "evaluation samples"),
    ([[], []], [[], []], "the float model detects nothing in any of the 2 evaluation samples"),
])
def test_a_detection_reference_that_proves_nothing_is_not_informative(boxes, scores, reason) -> None:
    ref = reference(boxes, scores)
    assert ref.problem == reason
    accuracy, notes = accuracy_of(ref, ref.outputs)
    assert not accuracy.informative and accuracy.uninformative_reason == reason
    failures = check_gates(Gates(min_map50_vs_float=0.9), accuracy, [], "detection").failures
    assert failures == [f"accuracy not informative: {reason} (accuracy gates not checked)"]


def test_an_informative_detection_reference_is_judged_on_its_detections() -> None:
    ref = reference(BOXES, [[0.9, 0.4], [0.8, 0.3]])
    assert ref.problem is None
    accuracy, _ = accuracy_of(ref, ref.outputs)
    assert accuracy.informative and accuracy.task.values["map50_vs_float"] == 1.0


def test_a_detectors_unnamed_tuple_is_read_as_boxes_scores_labels_and_the_results_say_so() -> None:
    names = ["output0", "output1", "output2"]
    ref = reference(BOXES, [[0.9, 0.4], [0.8, 0.3]], names)
    accuracy, _ = accuracy_of(ref, ref.outputs)
    assert accuracy.task.values["map50_vs_float"] == 1.0 and accuracy.task.values["recall_vs_float"] == 1.0
    assert ref.judge.reading() == ["detection outputs read as boxes = output0, scores = output1, labels = output2, "
                                   "the order torchvision's detectors return (name them in [detection] boxes, "
                                   "scores and labels otherwise)"]
    assert TaskJudge(spec(), NAMES).reading() == []
    with pytest.raises(ValueError, match=r"\[detection\] boxes names output 'boxes', but the model's outputs are: "
                                         "output0, output1, output2"):
        TaskJudge(spec(scores="scores"), names).check()  # a name given is a name required


def test_the_eager_rerun_of_a_host_decoded_detector_reproduces_by_its_raw_outputs() -> None:
    """Raw head outputs at 112.8 dB (the same model, another thread count) while one decoded
    detection flipped at the threshold: reproduced. Detections alone (post-processed in the model)
    are still judged by their matches."""
    from edgeship.pipeline.validate import reference_gates
    from edgeship.results import Accuracy, OutputAccuracy, TaskAccuracy

    ref = reference(BOXES, [[0.9, 0.4], [0.8, 0.3]])
    flipped = TaskAccuracy(task="detection", values={"recall_vs_float": 0.997, "precision_vs_float": 1.0})
    raw = [OutputAccuracy(name=n, sqnr_db=112.8, max_abs_err=1e-5) for n in ("bbox_regression", "cls_logits")]
    assert reference_gates(ref, Accuracy(samples=2, outputs=raw, task=flipped, non_finite=0)).passed
    ragged = [OutputAccuracy(name=n, note="the length varies by sample") for n in NAMES]
    (failure,) = reference_gates(ref, Accuracy(samples=2, outputs=ragged, task=flipped, non_finite=0)).failures
    assert failure.startswith("the float model built again in the eager runner does not reproduce")
