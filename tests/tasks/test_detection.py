"""Detection metrics on hand-made detections whose answers are known."""
from __future__ import annotations

import numpy as np
import pytest

from edgeship.tasks.detection import (
    Detections,
    average_precision,
    detection_metrics,
    detections,
    iou_matrix,
    match,
    to_xyxy,
)


def dets(boxes: list[list[float]], labels: list[int], scores: list[float] | None = None) -> Detections:
    return detections(np.array(boxes, np.float32).reshape(-1, 4), np.array(labels), scores)


def test_iou_matrix_of_two_known_boxes() -> None:
    # intersection [1,1,2,2] = 1, union 4 + 4 - 1 = 7
    got = iou_matrix(np.array([[0, 0, 2, 2], [0, 0, 2, 2]]), np.array([[1, 1, 3, 3], [0, 0, 2, 2], [5, 5, 6, 6]]))
    assert got == pytest.approx(np.array([[1 / 7, 1.0, 0.0], [1 / 7, 1.0, 0.0]]))


def test_iou_matrix_of_an_inverted_box_is_zero() -> None:
    assert iou_matrix(np.array([[2, 2, 0, 0]]), np.array([[0, 0, 2, 2]]))[0, 0] == 0.0


def test_to_xyxy_converts_each_format() -> None:
    box = np.array([[1.0, 1.0, 2.0, 2.0]])
    assert to_xyxy(box, "xyxy").tolist() == [[1, 1, 2, 2]]
    assert to_xyxy(box, "cxcywh").tolist() == [[0, 0, 2, 2]]
    assert to_xyxy(box, "xywh").tolist() == [[1, 1, 3, 3]]
    with pytest.raises(ValueError, match="'yxyx' is not one of xyxy, cxcywh, xywh"):
        to_xyxy(box, "yxyx")


def test_detections_refuses_non_finite_boxes_naming_them() -> None:
    with pytest.raises(ValueError, match="candidate boxes contains 1 non-finite"):
        detections(np.array([[0, 0, np.nan, 1]]), np.array([0]), np.array([0.5]), name="candidate")


def test_detections_refuses_mismatched_lengths_and_fractional_labels() -> None:
    with pytest.raises(ValueError, match="1 boxes, 2 scores and 1 labels"):
        detections(np.zeros((1, 4)), np.array([0]), np.array([0.5, 0.4]))
    with pytest.raises(ValueError, match="labels are not whole numbers"):
        detections(np.zeros((1, 4)), np.array([0.5]))


def test_detection_metrics_recall_precision_mean_iou_of_a_known_case() -> None:
    reference = dets([[0, 0, 10, 10], [20, 20, 30, 30], [50, 50, 60, 60]], [0, 1, 0], [0.9, 0.8, 0.7])
    # A: IoU 80/100 = 0.8 with the first; B: identical to the second (1.0); the third is missed;
    # the last candidate overlaps nothing (a false positive).
    candidate = dets([[0, 0, 10, 8], [20, 20, 30, 30], [100, 100, 110, 110]], [0, 1, 0], [0.9, 0.8, 0.7])
    v = detection_metrics([reference], [candidate]).values
    assert v["recall_vs_float"] == pytest.approx(2 / 3)
    assert v["precision_vs_float"] == pytest.approx(2 / 3)
    assert v["mean_iou_vs_float"] == pytest.approx(0.9)


def test_detection_metrics_candidate_with_a_wrong_label_is_not_matched() -> None:
    reference = dets([[0, 0, 10, 10]], [0], [0.9])
    candidate = dets([[0, 0, 10, 10]], [1], [0.9])
    m = detection_metrics([reference], [candidate])
    assert m.values["recall_vs_float"] == 0.0 and m.values["precision_vs_float"] == 0.0
    assert m.values["map50_vs_float"] == 0.0
    assert m.values["mean_iou_vs_float"] is None and m.notes["mean_iou_vs_float"] == "no detection matched"


def test_match_is_greedy_by_descending_score() -> None:
    truth = dets([[0, 0, 10, 10]], [0])
    # the first candidate overlaps better (1.0) but scores lower: the second (IoU 0.6) takes the box
    candidate = dets([[0, 0, 10, 10], [0, 0, 10, 6]], [0, 0], [0.3, 0.9])
    matched, ious = match(truth, candidate)
    assert matched.tolist() == [-1, 0] and ious.tolist() == pytest.approx([0.0, 0.6])


def test_match_takes_the_best_unmatched_truth_box() -> None:
    truth = dets([[0, 0, 10, 10], [0, 0, 10, 9]], [0, 0])
    candidate = dets([[0, 0, 10, 9], [0, 0, 10, 10]], [0, 0], [0.9, 0.8])
    assert match(truth, candidate)[0].tolist() == [1, 0]


def test_detection_metrics_map_of_a_hand_computed_pr_curve() -> None:
    # 3 reference boxes of class 0 (spread over two samples); candidates by descending score:
    #   0.9 TP -> P 1/1, R 1/3;  0.8 FP -> P 1/2, R 1/3;  0.7 TP -> P 2/3, R 2/3;  0.6 TP -> P 3/4, R 1
    # all-point envelope: R in (0, 1/3] -> 1, (1/3, 2/3] -> max(2/3, 3/4) = 3/4, (2/3, 1] -> 3/4
    # AP = 1/3 * 1 + 1/3 * 3/4 + 1/3 * 3/4 = 5/6 = 0.8333...
    # (11-point VOC2007 would give (4 * 1 + 7 * 0.75) / 11 = 0.8409; no interpolation 0.8056.)
    reference = [dets([[0, 0, 10, 10], [20, 20, 30, 30]], [0, 0], [0.9, 0.9]), dets([[0, 0, 10, 10]], [0], [0.9])]
    candidate = [dets([[0, 0, 10, 10], [100, 100, 110, 110], [20, 20, 30, 30]], [0, 0, 0], [0.9, 0.8, 0.7]),
                 dets([[0, 0, 10, 10]], [0], [0.6])]
    assert detection_metrics(reference, candidate).values["map50_vs_float"] == pytest.approx(5 / 6)


def test_detection_metrics_identical_detections_give_map_one() -> None:
    reference = [dets([[0, 0, 10, 10], [20, 20, 30, 30]], [0, 3], [0.9, 0.4]), dets([[5, 5, 9, 9]], [1], [0.7])]
    m = detection_metrics(reference, reference)
    assert m.values == {"recall_vs_float": 1.0, "precision_vs_float": 1.0, "mean_iou_vs_float": 1.0,
                        "map50_vs_float": 1.0}
    assert m.notes == {}


def test_detection_metrics_is_none_with_a_reason_when_the_reference_has_no_detections() -> None:
    reference = [dets([], []), dets([], [])]
    candidate = [dets([[0, 0, 1, 1]], [0], [0.9]), dets([], [])]
    m = detection_metrics(reference, candidate)
    assert m.values["map50_vs_float"] is None and m.values["recall_vs_float"] is None
    assert "the float model has no detections" in m.notes["map50_vs_float"]
    assert m.values["precision_vs_float"] == 0.0
    both_empty = detection_metrics(reference, reference)
    assert all(v is None for v in both_empty.values.values()), both_empty.values


def test_detection_metrics_score_threshold_drops_low_scores_from_both() -> None:
    reference = [dets([[0, 0, 10, 10], [20, 20, 30, 30]], [0, 0], [0.9, 0.2])]
    candidate = [dets([[0, 0, 10, 10], [50, 50, 60, 60]], [0, 0], [0.9, 0.1])]
    assert detection_metrics(reference, candidate).values["recall_vs_float"] == 0.5
    v = detection_metrics(reference, candidate, score_threshold=0.3).values
    assert v["recall_vs_float"] == 1.0 and v["precision_vs_float"] == 1.0


def test_detection_metrics_against_labelled_boxes() -> None:
    reference = [dets([[0, 0, 10, 10]], [0], [0.9])]
    candidate = [dets([[0, 0, 10, 10]], [0], [0.9])]
    truth = [dets([[0, 0, 10, 10], [20, 20, 30, 30]], [0, 1])]  # no scores: labelled boxes
    v = detection_metrics(reference, candidate, truth).values
    assert v["map50_vs_float"] == 1.0
    assert v["recall_vs_labels"] == 0.5 and v["precision_vs_labels"] == 1.0
    assert v["map50_vs_labels"] == pytest.approx(0.5)  # class 0: AP 1, class 1: AP 0


def test_detection_metrics_ignores_classes_only_the_candidate_has_in_map() -> None:
    reference = [dets([[0, 0, 10, 10]], [0], [0.9])]
    candidate = [dets([[0, 0, 10, 10], [20, 20, 30, 30]], [0, 7], [0.9, 0.95])]
    v = detection_metrics(reference, candidate).values
    assert v["map50_vs_float"] == 1.0 and v["precision_vs_float"] == 0.5


def test_detection_metrics_refuses_different_sample_counts() -> None:
    with pytest.raises(ValueError, match="1 candidate samples but 2 truth samples"):
        detection_metrics([dets([], []), dets([], [])], [dets([], [])])


def test_detection_metrics_refuses_thresholds_out_of_range() -> None:
    with pytest.raises(ValueError, match=r"iou_threshold 0.0 is outside \(0, 1\]"):
        detection_metrics([], [], iou_threshold=0.0)
    with pytest.raises(ValueError, match="score_threshold nan is not a finite number"):
        detection_metrics([], [], score_threshold=float("nan"))


def brute_force_ap(flags_by_score: list[bool], truth_count: int) -> float:
    """AP as the mean, over the recall levels k/n, of the best precision at recall >= k/n."""
    points, hits = [], 0
    for rank, hit in enumerate(flags_by_score, start=1):
        hits += hit
        points.append((hits / truth_count, hits / rank))
    return sum(max([p for r, p in points if r >= k / truth_count - 1e-12], default=0.0)
               for k in range(1, truth_count + 1)) / truth_count


def test_detection_metrics_map_matches_a_brute_force_on_a_random_case() -> None:
    rng = np.random.default_rng(7)
    reference, candidate, by_class = [], [], {}
    for _ in range(6):
        n = int(rng.integers(0, 6))
        ref_boxes = [[20.0 * i, 0, 20.0 * i + 10, 10] for i in range(n)]  # apart: IoU 0 with each other
        ref_labels = rng.integers(0, 3, n).tolist()
        boxes, labels, scores, hit = [], [], [], []
        for box, label in zip(ref_boxes, ref_labels):
            by_class.setdefault(label, [0, []])[0] += 1
            copies = int(rng.choice([0, 1, 1, 2]))  # missed, found, or found twice (the lower-scored copy is FP)
            copy_scores = sorted(rng.random(copies), reverse=True)
            for j, s in enumerate(copy_scores):
                boxes.append([box[0] + 1, box[1], box[2] + 1, box[3]])  # IoU 9/11 with its box
                labels.append(label), scores.append(s), hit.append(j == 0)
        for _ in range(int(rng.integers(0, 3))):  # false positives, far from every box
            boxes.append([500.0, 500, 510, 510]), labels.append(int(rng.integers(0, 3)))
            scores.append(rng.random()), hit.append(False)
        for label, s, h in zip(labels, scores, hit):
            by_class.setdefault(label, [0, []])[1].append((s, h))
        reference.append(dets(ref_boxes, ref_labels, [1.0] * n))
        candidate.append(dets(boxes, labels, scores))
    expected = np.mean([brute_force_ap([h for _, h in sorted(c, key=lambda x: -x[0])], n)
                        for n, c in by_class.values() if n])
    got = detection_metrics(reference, candidate).values["map50_vs_float"]
    assert got == pytest.approx(expected) and 0.0 < got < 1.0


def test_average_precision_of_no_candidates_is_zero() -> None:
    assert average_precision(np.zeros(0, bool), np.zeros(0), 3) == 0.0


def test_detection_metrics_keep_negative_scores_by_default() -> None:
    """Logit-scaled scores are below zero: no default threshold may drop them all."""
    reference = [dets([[0, 0, 10, 10]], [0], [-2.0])]
    candidate = [dets([[0, 0, 10, 10]], [0], [-2.5])]
    assert detection_metrics(reference, candidate).values["map50_vs_float"] == 1.0


def test_zero_area_boxes_match_themselves_and_nothing_else() -> None:
    """SSD keeps boxes clipped flat at the image edge: identical outputs must still score 1."""
    flat = detections([[318.0, 10.0, 320.0, 10.0], [0.0, 5.0, 0.0, 9.0], [10.0, 10.0, 50.0, 40.0]], [1, 2, 1],
                      [0.9, 0.5, 0.7])
    assert detection_metrics([flat], [flat]).values["map50_vs_float"] == 1.0
    assert iou_matrix(np.array([[318.0, 10.0, 320.0, 10.0]]), np.array([[318.0, 20.0, 320.0, 20.0]]))[0, 0] == 0.0
