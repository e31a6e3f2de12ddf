"""Segmentation metrics: an artifact's masks against the float model's, and against labels.

Outputs are logits [N, C, H, W] (the mask is their arg-max over C) or masks [N, H, W] of whole
class numbers. ``miou`` averages the per-class IoU over the classes present in either mask (a
class absent from both says nothing and is left out); pixel agreement is the share of pixels
whose class equals the other mask's. Against labels, pixels labelled ``ignore_index`` (default
255, as in VOC and Cityscapes) are left out of both figures.
"""
from __future__ import annotations

import numpy as np

from edgeship.tasks.common import TaskMetrics, checked, same_shape

DEFAULT_IGNORE_INDEX = 255


def masks_of(name: str, outputs: object) -> np.ndarray:
    """Class masks [N, H, W] from logits [N, C, H, W] (arg-max over C) or from masks [N, H, W]."""
    a = checked(name, outputs, ndim=(3, 4))
    if a.size == 0:
        raise ValueError(f"{name} has shape {list(a.shape)}: no pixels to compare")
    if a.ndim == 4:
        return a.argmax(axis=1)
    if np.issubdtype(a.dtype, np.inexact) and not np.array_equal(a, np.round(a)):
        raise ValueError(f"{name} has 3 dimensions, so it is read as class masks [N, H, W], but its values are "
                         "not whole numbers; pass logits as [N, C, H, W]")
    return a.astype(np.int64)


def per_class_iou(truth: np.ndarray, pred: np.ndarray, ignore: np.ndarray | None = None) -> dict[int, float]:
    """IoU of each class present in ``truth`` or ``pred`` (pixels where ``ignore`` is True left out)."""
    keep = np.ones(truth.shape, bool) if ignore is None else ~ignore
    t, p = truth[keep], pred[keep]
    result = {}
    for k in np.union1d(np.unique(t), np.unique(p)):
        inter = np.count_nonzero((t == k) & (p == k))
        union = np.count_nonzero((t == k) | (p == k))
        result[int(k)] = inter / union
    return result


def _compare(truth: np.ndarray, pred: np.ndarray, ignore: np.ndarray | None,
             truth_name: str) -> tuple[float | None, float | None, str | None]:
    """mIoU, pixel agreement, and the reason when they are None."""
    ious = per_class_iou(truth, pred, ignore)
    if not ious:
        return None, None, f"every pixel of {truth_name} is ignored"
    keep = np.ones(truth.shape, bool) if ignore is None else ~ignore
    return float(np.mean(list(ious.values()))), float(np.mean(truth[keep] == pred[keep])), None


def segmentation_metrics(reference: object, candidate: object, labels: object | None = None, *,
                         ignore_index: int | None = DEFAULT_IGNORE_INDEX) -> TaskMetrics:
    """``miou_vs_float`` and ``pixel_agreement`` of the candidate's masks against the float model's,
    and, when ``labels`` [N, H, W] are given, ``miou_vs_labels`` and ``pixel_accuracy_vs_labels``
    (pixels labelled ``ignore_index`` left out; None ignores nothing)."""
    ref, out = masks_of("reference outputs", reference), masks_of("candidate outputs", candidate)
    same_shape("the reference masks", ref, "the candidate masks", out)
    values: dict[str, float | None] = {}
    notes: dict[str, str] = {}
    values["miou_vs_float"], values["pixel_agreement"], _ = _compare(ref, out, None, "the float model's masks")
    if np.unique(ref).size == 1:
        notes["miou_vs_float"] = f"the float model's masks hold one class only ({int(ref.flat[0])})"
    if labels is not None:
        lab = checked("labels", labels, ndim=3)
        same_shape("the candidate masks", out, "labels", lab)
        ignore = None if ignore_index is None else lab == ignore_index
        miou, accuracy, why = _compare(lab.astype(np.int64), out, ignore, "the labels")
        values["miou_vs_labels"], values["pixel_accuracy_vs_labels"] = miou, accuracy
        if why:
            notes["miou_vs_labels"] = notes["pixel_accuracy_vs_labels"] = why
    return TaskMetrics("segmentation", values, notes)
