"""Labelled boxes of a detection data set (y [N, M, 5]) as the ground truth of the ``*_vs_labels``
metrics: hand-made detections and labels whose answers are known."""
from __future__ import annotations

import numpy as np
import pytest

from edgeship.spec import ModelSpec
from edgeship.tasks.evaluate import TaskJudge, labelled_boxes

PAD = [-1, -1, -1, -1, -1]
NAMES = ["boxes", "scores", "labels"]


def judge(box_format: str = "xyxy") -> TaskJudge:
    """A detection model that post-processes itself: boxes, scores, labels per image."""
    spec = ModelSpec(name="m", entry="m:build", inputs=[{"name": "image", "shape": [1, 3, 64, 64]}],
                     task="detection", detection={"box_format": box_format})
    return TaskJudge(spec, NAMES)


def outputs(*samples: list[list[float]]) -> list[list[np.ndarray]]:
    """Per-sample detections, each row (x1, y1, x2, y2, class), as the model's three outputs (one
    array per sample); scores fall with the row so the order is known."""
    rows = [np.asarray(s, np.float32).reshape(-1, 5) for s in samples]
    return [[r[:, :4] for r in rows], [np.linspace(0.9, 0.5, len(r)).astype(np.float32) for r in rows],
            [r[:, 4].astype(np.int64) for r in rows]]


# Two samples, four labelled boxes: sample 0 has three, sample 1 one (then two padding rows).
LABELS = np.array([[[0, 0, 10, 10, 0], [20, 20, 30, 30, 1], [40, 40, 50, 50, 1]],
                   [[5, 5, 15, 15, 0], PAD, [-3, 7, -9, 2, -1]]], np.float64)


def test_labels_give_recall_075_when_the_float_model_misses_one_of_four_boxes() -> None:
    found = outputs(LABELS[0, :2], LABELS[1, :1])  # the third box of sample 0 (class 1) is missed
    v = judge().metrics(found, found, LABELS).values
    assert v["recall_vs_labels"] == 0.75 and v["precision_vs_labels"] == 1.0 and v["mean_iou_vs_labels"] == 1.0
    assert v["map50_vs_labels"] == pytest.approx(0.75)  # class 0: AP 1 (2 of 2); class 1: AP 0.5 (1 of 2)
    assert v["recall_vs_float"] == 1.0 and v["map50_vs_float"] == 1.0


def test_padding_rows_are_not_boxes_whatever_their_corners() -> None:
    found = outputs(LABELS[0], LABELS[1, :1])
    v = judge().metrics(found, found, LABELS).values  # the inverted padding row would refuse if read as a box
    assert v["recall_vs_labels"] == 1.0 and v["precision_vs_labels"] == 1.0
    truth = labelled_boxes(LABELS, 2)
    assert [len(t) for t in truth] == [3, 1] and truth[1].labels.tolist() == [0]
    assert truth[0].scores.tolist() == [1.0, 1.0, 1.0]  # labelled boxes have no scores


def test_a_sample_without_labelled_boxes_makes_its_detections_false_positives() -> None:
    labels = np.array([[[0, 0, 10, 10, 2]], [PAD]], np.float64)
    found = outputs([[0, 0, 10, 10, 2]], [[30, 30, 40, 40, 2]])
    v = judge().metrics(found, found, labels).values
    assert v["recall_vs_labels"] == 1.0 and v["precision_vs_labels"] == 0.5
    assert [len(t) for t in labelled_boxes(np.zeros((3, 0, 5)), 3)] == [0, 0, 0]  # M = 0: no boxes at all


def test_labels_without_any_box_leave_recall_and_map_undefined_with_the_reason() -> None:
    found = outputs([[0, 0, 10, 10, 2]])
    got = judge().metrics(found, found, np.full((1, 2, 5), -1.0))
    assert got.values["recall_vs_labels"] is None and got.values["map50_vs_labels"] is None
    assert got.notes["recall_vs_labels"].startswith("the labels has no detections")
    assert got.values["precision_vs_labels"] == 0.0


def test_without_labels_there_are_only_metrics_against_the_float_model() -> None:
    found = outputs([[0, 0, 10, 10, 2]])
    assert not [k for k in judge().metrics(found, found, None).values if k.endswith("_vs_labels")]


def test_labels_are_read_in_the_models_box_format() -> None:
    labels = np.array([[[10, 10, 4, 4, 0], [30, 30, 2, 6, 1]]], np.float64)  # cx, cy, w, h
    found = outputs(labels[0])
    v = judge("cxcywh").metrics(found, found, labels).values
    assert v["recall_vs_labels"] == 1.0 and v["mean_iou_vs_labels"] == 1.0
    assert labelled_boxes(labels, 1, "cxcywh")[0].boxes.tolist() == [[8, 8, 12, 12], [29, 27, 31, 33]]


def test_ground_truth_of_host_decoding_is_xyxy_and_knows_the_class_count() -> None:
    spec = ModelSpec(name="m", entry="m:build", inputs=[{"name": "image", "shape": [1, 3, 64, 64]}],
                     task="detection", detection={"postprocess": "host", "box_format": "cxcywh", "decode": {
                         "boxes": "regression", "scores": "logits", "anchors": "m:anchors"}})
    host = TaskJudge(spec, ["regression", "logits"])
    reference = [np.zeros((2, 6, 4), np.float32), np.zeros((2, 6, 4), np.float32)]  # 4 classes
    labels = np.array([[[1, 2, 3, 4, 3]], [PAD]], np.float64)
    assert host.ground_truth(labels, reference)[0].boxes.tolist() == [[1, 2, 3, 4]]  # box_format is the model's
    labels[0, 0, 4] = 4
    with pytest.raises(ValueError, match=r"sample 0 has class 4; the model's scores output has 4 classes, so classes "
                                         r"are in \[0, 4\)"):
        host.ground_truth(labels, reference)


@pytest.mark.parametrize(("labels", "message"), [
    (np.array([[[0, 0, 1, 1, 0]], [[0, 0, 1, np.nan, 0]]]), r"detection labels \(y\) contains 1 non-finite value"),
    (np.array([[[0, 0, 1, 1, 0]], [[0, 0, 1, 1, 1.5]]]), r"sample 1 has fractional class 1.5 \(1 row\(s\)\)"),
    (np.array([[[5, 0, 1, 1, 0]], [PAD]]), r"sample 0 has 1 box\(es\) with x2 < x1 or y2 < y1 .* the first "
                                           r"\[5.0, 0.0, 1.0, 1.0\]"),
    (np.array([[[0, 5, 1, 1, 0]], [PAD]]), r"sample 0 has 1 box\(es\) with x2 < x1 or y2 < y1"),
    (np.zeros((3, 1, 5)), r"have shape \[3, 1, 5\]; expected boxes \[2, M, 5\] for the 2 samples"),
    (np.zeros((2, 1, 4)), r"have shape \[2, 1, 4\]; expected boxes \[2, M, 5\]"),
    (np.array([0, 1]), r"have shape \[2\]; expected boxes \[2, M, 5\]"),
])
def test_labelled_boxes_refuses_labels_that_are_not_boxes(labels: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        labelled_boxes(labels, 2)


def test_labelled_boxes_checks_box_order_after_conversion() -> None:
    with pytest.raises(ValueError, match=r"sample 0 has 1 box\(es\) .*from box format xywh\), the first "
                                         r"\[0.0, 0.0, -2.0, 3.0\]"):
        labelled_boxes(np.array([[[0, 0, -2, 3, 1]]]), 1, "xywh")
    assert labelled_boxes(np.array([[[0, 0, 2, 3, 1]]]), 1, "xywh")[0].boxes.tolist() == [[0, 0, 2, 3]]
