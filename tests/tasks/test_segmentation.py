"""Segmentation metrics on a 4x4 mask whose per-class IoUs are known by hand."""
from __future__ import annotations

import numpy as np
import pytest

from edgeship.tasks.segmentation import per_class_iou, segmentation_metrics

REFERENCE = np.array([[0, 0, 1, 1],
                      [0, 0, 1, 1],
                      [2, 2, 2, 2],
                      [2, 2, 2, 2]])
CANDIDATE = np.array([[0, 0, 0, 1],
                      [0, 0, 1, 1],
                      [2, 2, 2, 2],
                      [2, 2, 1, 1]])
# class 0: ref 4 px, candidate 5, both 4 -> 4/5;  class 1: ref 4, candidate 5, both 3 -> 3/6;
# class 2: ref 8, candidate 6, both 6 -> 6/8;  mIoU (0.8 + 0.5 + 0.75) / 3; 3 of 16 pixels differ.
MIOU = (0.8 + 0.5 + 0.75) / 3


def one_hot_logits(mask: np.ndarray, classes: int) -> np.ndarray:
    return np.eye(classes, dtype=np.float32)[mask].transpose(2, 0, 1)[None] * 3.0 - 1.0


def test_per_class_iou_of_a_known_mask() -> None:
    assert per_class_iou(REFERENCE, CANDIDATE) == pytest.approx({0: 0.8, 1: 0.5, 2: 0.75})


def test_segmentation_metrics_miou_and_agreement_from_logits() -> None:
    # 4 classes in the logits; class 3 is in neither mask, so it stays out of the mean
    m = segmentation_metrics(one_hot_logits(REFERENCE, 4), one_hot_logits(CANDIDATE, 4))
    assert m.values["miou_vs_float"] == pytest.approx(MIOU)
    assert m.values["pixel_agreement"] == pytest.approx(13 / 16)


def test_segmentation_metrics_takes_masks_as_well() -> None:
    m = segmentation_metrics(REFERENCE[None], CANDIDATE[None])
    assert m.values["miou_vs_float"] == pytest.approx(MIOU)
    same = segmentation_metrics(REFERENCE[None], REFERENCE[None])
    assert same.values["miou_vs_float"] == 1.0 and same.values["pixel_agreement"] == 1.0


def test_segmentation_metrics_against_labels_leaves_out_ignore_index() -> None:
    labels = REFERENCE.copy()
    labels[0, 2] = labels[3, 3] = 255
    # kept 14 pixels: class 0 -> 4/4; class 1: labels 3, candidate 4, both 3 -> 3/4;
    # class 2: labels 7, candidate 6, both 6 -> 6/7; only (3, 2) is wrong -> 13/14
    v = segmentation_metrics(REFERENCE[None], CANDIDATE[None], labels[None]).values
    assert v["miou_vs_labels"] == pytest.approx((1 + 0.75 + 6 / 7) / 3)
    assert v["pixel_accuracy_vs_labels"] == pytest.approx(13 / 14)
    unignored = segmentation_metrics(REFERENCE[None], CANDIDATE[None], labels[None], ignore_index=None).values
    assert unignored["pixel_accuracy_vs_labels"] == pytest.approx(13 / 16)  # the same 3 pixels wrong, of 16


def test_segmentation_metrics_is_none_with_a_reason_when_every_label_is_ignored() -> None:
    m = segmentation_metrics(REFERENCE[None], CANDIDATE[None], np.full((1, 4, 4), 255))
    assert m.values["miou_vs_labels"] is None and "every pixel of the labels is ignored" in m.notes["miou_vs_labels"]


def test_segmentation_metrics_notes_a_single_class_reference() -> None:
    m = segmentation_metrics(np.zeros((1, 4, 4), np.int64), np.zeros((1, 4, 4), np.int64))
    assert m.values["miou_vs_float"] == 1.0 and "one class only" in m.notes["miou_vs_float"]


def test_segmentation_metrics_refuses_non_finite_and_mismatched_outputs() -> None:
    logits = one_hot_logits(REFERENCE, 3)
    bad = logits.copy()
    bad[0, 0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="candidate outputs contains 1 non-finite"):
        segmentation_metrics(logits, bad)
    with pytest.raises(ValueError, match=r"candidate masks has shape \[1, 4, 3\]"):
        segmentation_metrics(logits, logits[..., :3])
    with pytest.raises(ValueError, match="not whole numbers"):
        segmentation_metrics(REFERENCE[None] + 0.5, CANDIDATE[None])
