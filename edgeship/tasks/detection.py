"""Detection metrics: an artifact's detections against the float model's, or against labelled boxes.

Matching (COCO-style, as in pycocotools' ``evaluateImg``): per sample, the candidate detections
are taken in descending score (ties keep their order: a stable sort), and each is matched to the
not-yet-matched truth detection of the **same label** with the highest IoU, provided that IoU is
at least ``iou_threshold`` (ties: the first such truth box). A candidate left without a match is a
false positive; a truth detection left unmatched is missed.

AP is the VOC2010+ **all-point interpolated** average precision: for each class, the candidates
of that label from all samples are swept in descending score (stable, in sample order), the
precision envelope ``p_interp(r) = max_{r' >= r} p(r')`` is taken and integrated exactly over
recall (the area under the step curve). mAP is the mean AP over the classes that have at least
one truth detection; classes that only the candidate has do not enter the mean (they lower the
precision). When the truth has no detections at all, recall and mAP are undefined: None with the
reason, never a perfect score.

Boxes are given as ``xyxy`` (x1, y1, x2, y2), ``cxcywh`` (centre, width, height) or ``xywh``
(top-left corner, width, height) and kept as xyxy. A box with x2 < x1 or y2 < y1 has zero area
and overlaps nothing.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from edgeship.tasks.common import TaskMetrics, checked

BOX_FORMATS = ("xyxy", "cxcywh", "xywh")


@dataclass(frozen=True)
class Detections:
    """One sample's detections: ``boxes`` [N, 4] xyxy float64, ``scores`` [N], ``labels`` [N] int64."""

    boxes: np.ndarray
    scores: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)

    def above(self, score_threshold: float) -> Detections:
        """The detections whose score is at least ``score_threshold``."""
        keep = self.scores >= score_threshold
        return Detections(self.boxes[keep], self.scores[keep], self.labels[keep])


def to_xyxy(boxes: np.ndarray, box_format: str) -> np.ndarray:
    """``boxes`` [N, 4] in ``box_format`` as xyxy float64."""
    if box_format not in BOX_FORMATS:
        raise ValueError(f"box format {box_format!r} is not one of {', '.join(BOX_FORMATS)}")
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    if box_format == "xyxy":
        return b.copy()
    if box_format == "xywh":
        return np.stack([b[:, 0], b[:, 1], b[:, 0] + b[:, 2], b[:, 1] + b[:, 3]], axis=1)
    half_w, half_h = b[:, 2] / 2, b[:, 3] / 2
    return np.stack([b[:, 0] - half_w, b[:, 1] - half_h, b[:, 0] + half_w, b[:, 1] + half_h], axis=1)


def detections(boxes: object, labels: object, scores: object | None = None, *, box_format: str = "xyxy",
               name: str = "detections") -> Detections:
    """Checked :class:`Detections` from arrays; ``scores`` None (labelled ground truth) means all
    1.0. ValueError naming ``name`` for non-finite values, mismatched lengths or labels that are
    not whole numbers."""
    b = checked(f"{name} boxes", boxes)
    if b.size == 0:
        b = b.reshape(0, 4)
    if b.ndim != 2 or b.shape[1] != 4:
        raise ValueError(f"{name} boxes have shape {list(b.shape)}; expected [N, 4]")
    lab = checked(f"{name} labels", labels).reshape(-1)
    if np.issubdtype(lab.dtype, np.inexact) and not np.array_equal(lab, np.round(lab)):
        raise ValueError(f"{name} labels are not whole numbers (first values {lab[:5].tolist()})")
    sc = np.ones(len(b)) if scores is None else checked(f"{name} scores", scores).reshape(-1)
    if not len(b) == len(lab) == len(sc):
        raise ValueError(f"{name}: {len(b)} boxes, {len(sc)} scores and {len(lab)} labels; expected as many of each")
    return Detections(to_xyxy(b, box_format), sc.astype(np.float64), lab.astype(np.int64))


def _area(b: np.ndarray) -> np.ndarray:
    return np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)


DEGENERATE_ATOL = 1e-3  # zero-area boxes this close in every coordinate (box units) are the same box


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every xyxy box of ``a`` [N, 4] with every box of ``b`` [M, 4]: an [N, M] array.
    Where the union is empty (two zero-area boxes: detectors such as torchvision's SSD keep boxes
    clipped flat at the image edge) IoU is 1 when the boxes agree to DEGENERATE_ATOL in every
    coordinate, else 0: a flat box matches itself, not everything."""
    a, b = np.asarray(a, np.float64).reshape(-1, 4), np.asarray(b, np.float64).reshape(-1, 4)
    width = np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0])
    height = np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1])
    inter = np.clip(width, 0, None) * np.clip(height, 0, None)
    union = _area(a)[:, None] + _area(b)[None, :] - inter
    same = np.all(np.abs(a[:, None, :] - b[None, :, :]) <= DEGENERATE_ATOL, axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / np.where(union > 0, union, 1), same.astype(np.float64))


def match(truth: Detections, candidate: Detections, iou_threshold: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """The greedy matching of the module docstring, for one sample: for each candidate detection
    the index of its truth detection (-1 when unmatched), and the IoU of that match (0 if none)."""
    ious = iou_matrix(candidate.boxes, truth.boxes)
    ious[candidate.labels[:, None] != truth.labels[None, :]] = -1.0
    matched = np.full(len(candidate), -1, np.int64)
    match_iou = np.zeros(len(candidate))
    taken = np.zeros(len(truth), bool)
    for c in np.argsort(-candidate.scores, kind="stable"):
        row = np.where(taken, -1.0, ious[c])
        if row.size and row.max() >= iou_threshold:
            t = int(np.argmax(row))
            matched[c], match_iou[c], taken[t] = t, row[t], True
    return matched, match_iou


def average_precision(true_positive: np.ndarray, scores: np.ndarray, truth_count: int) -> float:
    """All-point interpolated AP (VOC2010+) of one class: ``true_positive`` flags and ``scores`` of
    its candidate detections over all samples, ``truth_count`` > 0 truth detections."""
    tp = np.asarray(true_positive, bool)[np.argsort(-np.asarray(scores), kind="stable")]
    hits = np.cumsum(tp)
    recall = hits / truth_count
    precision = hits / np.arange(1, len(tp) + 1)
    mrec = np.concatenate([[0.0], recall, [1.0]])
    mpre = np.concatenate([[0.0], precision, [0.0]])
    mpre = np.maximum.accumulate(mpre[::-1])[::-1]
    steps = np.nonzero(mrec[1:] != mrec[:-1])[0]
    return float(np.sum((mrec[steps + 1] - mrec[steps]) * mpre[steps + 1]))


def compare(truth: Sequence[Detections], candidate: Sequence[Detections], iou_threshold: float = 0.5,
            truth_name: str = "the truth") -> tuple[dict[str, float | None], dict[str, str]]:
    """recall, precision, mean_iou and map of ``candidate`` against ``truth`` (one
    :class:`Detections` per sample each), with the notes for the ones that are None (naming the
    truth as ``truth_name``)."""
    if len(truth) != len(candidate):
        raise ValueError(f"{len(candidate)} candidate samples but {len(truth)} truth samples")
    matches = [match(t, c, iou_threshold) for t, c in zip(truth, candidate)]
    n_truth, n_cand = sum(len(t) for t in truth), sum(len(c) for c in candidate)
    flags = np.concatenate([m >= 0 for m, _ in matches]) if matches else np.zeros(0, bool)
    ious = np.concatenate([i for _, i in matches]) if matches else np.zeros(0)
    hits = int(flags.sum())
    values: dict[str, float | None] = {"recall": None, "precision": None, "mean_iou": None, "map": None}
    notes: dict[str, str] = {}
    if n_truth:
        values["recall"] = hits / n_truth
        values["map"] = _mean_ap(truth, candidate, flags)
    else:
        notes["recall"] = notes["map"] = f"{truth_name} has no detections: nothing to find, so no recall or mAP"
    if n_cand:
        values["precision"] = hits / n_cand
    else:
        notes["precision"] = "the candidate has no detections"
    if hits:
        values["mean_iou"] = float(ious[flags].mean())
    else:
        notes["mean_iou"] = "no detection matched"
    return values, notes


def _mean_ap(truth: Sequence[Detections], candidate: Sequence[Detections], flags: np.ndarray) -> float:
    truth_labels = np.concatenate([t.labels for t in truth])
    cand_labels = np.concatenate([c.labels for c in candidate]) if candidate else np.zeros(0, np.int64)
    cand_scores = np.concatenate([c.scores for c in candidate]) if candidate else np.zeros(0)
    aps = [average_precision(flags[cand_labels == k], cand_scores[cand_labels == k], int(np.sum(truth_labels == k)))
           for k in np.unique(truth_labels)]
    return float(np.mean(aps))


def detection_metrics(reference: Sequence[Detections], candidate: Sequence[Detections],
                      ground_truth: Sequence[Detections] | None = None, *, iou_threshold: float = 0.5,
                      score_threshold: float | None = None) -> TaskMetrics:
    """The candidate's detections against the float model's (``*_vs_float``) and, when given,
    against labelled boxes (``*_vs_labels``). Detections scoring below ``score_threshold`` are
    dropped from the reference and the candidate (not from the ground truth, which has no
    scores); the default None keeps every detection, whatever its score's scale. The mAP metric is
    named for its IoU threshold (``map50`` at 0.5)."""
    if not 0.0 < iou_threshold <= 1.0:
        raise ValueError(f"iou_threshold {iou_threshold} is outside (0, 1]")
    if score_threshold is not None and not math.isfinite(score_threshold):
        raise ValueError(f"score_threshold {score_threshold} is not a finite number")
    ref = list(reference) if score_threshold is None else [d.above(score_threshold) for d in reference]
    out = list(candidate) if score_threshold is None else [d.above(score_threshold) for d in candidate]
    truths = {"float": ("the float model", ref)}
    if ground_truth is not None:
        truths["labels"] = ("the labels", list(ground_truth))
    map_name = f"map{round(iou_threshold * 100)}"
    values: dict[str, float | None] = {}
    notes: dict[str, str] = {}
    for source, (truth_name, truth) in truths.items():
        got, why = compare(truth, out, iou_threshold, truth_name)
        for name, value in got.items():
            key = f"{map_name if name == 'map' else name}_vs_{source}"
            values[key] = value
            if name in why:
                notes[key] = why[name]
    return TaskMetrics("detection", values, notes)
