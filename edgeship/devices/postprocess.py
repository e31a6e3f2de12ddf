"""SSD post-processing in plain numpy: raw head outputs -> boxes, scores and labels.

A detection model deployed with ``postprocess = "host"`` returns its head outputs as they are (box
regression [N, anchors, 4] and class logits [N, anchors, classes]); this module turns them into
detections the way torchvision's ``SSD.postprocess_detections`` does, so the numbers can be
compared with the float model's. Needs only the standard library and numpy (it imports nothing of
edgeship, like runner.py) and is written to be read as the reference an app developer ports to
the device's language. Per image:

1. ``softmax`` over the classes of each anchor;
2. boxes decoded from the anchors (``decode_boxes``: offsets dx, dy, dw, dh divided by the box coder
   weights, dw and dh clamped to log(1000 / 16)), then clipped to the image when its size is given;
3. per class except the background: anchors scoring strictly above ``score_threshold``, of which
   the ``candidates_per_class`` best;
4. non-maximum suppression within each class (``batched_nms``: a box is dropped when its IoU with a
   better box of the same class is strictly above ``iou_threshold``);
5. the ``max_detections`` best of what is left, best first.

Arithmetic is float32 in the order torchvision uses, so boxes and scores agree with it to float32
rounding. Ties (equal scores) are resolved towards the lower index: the anchor with the lower index
within a class, the earlier candidate across classes (candidates are ordered by class, then by
score); torch's sort and topk do not promise any order for ties.
"""
from __future__ import annotations

import math

import numpy as np

BBOX_XFORM_CLIP = math.log(1000.0 / 16)  # torchvision BoxCoder: largest dw, dh passed to exp
VANILLA_NMS_ABOVE = 1000  # torchvision's batched_nms on CPU: more candidates than this -> NMS class by class


def softmax(logits):
    """Softmax over the last axis, float32 (the maximum is subtracted first, as torch does)."""
    logits = np.asarray(logits, dtype=np.float32)
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def decode_boxes(box_regression, anchors, weights=(10.0, 10.0, 5.0, 5.0), clip=BBOX_XFORM_CLIP):
    """Anchor offsets [A, 4] (dx, dy, dw, dh) applied to xyxy anchors [A, 4]: xyxy boxes, float32.

    As torchvision's ``BoxCoder.decode_single``: the anchor's centre moves by (dx / wx, dy / wy)
    times its width and height, its size is scaled by exp(dw / ww) and exp(dh / wh).
    """
    rel = np.asarray(box_regression, dtype=np.float32)
    anchors = np.asarray(anchors, dtype=np.float32)
    wx, wy, ww, wh = [np.float32(w) for w in weights]
    widths = anchors[:, 2] - anchors[:, 0]
    heights = anchors[:, 3] - anchors[:, 1]
    ctr_x = anchors[:, 0] + np.float32(0.5) * widths
    ctr_y = anchors[:, 1] + np.float32(0.5) * heights
    dx, dy = rel[:, 0] / wx, rel[:, 1] / wy
    dw = np.minimum(rel[:, 2] / ww, np.float32(clip))
    dh = np.minimum(rel[:, 3] / wh, np.float32(clip))
    pred_ctr_x = dx * widths + ctr_x
    pred_ctr_y = dy * heights + ctr_y
    half_w = np.float32(0.5) * (np.exp(dw) * widths)
    half_h = np.float32(0.5) * (np.exp(dh) * heights)
    return np.stack([pred_ctr_x - half_w, pred_ctr_y - half_h, pred_ctr_x + half_w, pred_ctr_y + half_h], axis=1)


def clip_boxes(boxes, image_size):
    """xyxy boxes clipped to an image of ``image_size`` (height, width) pixels."""
    height, width = image_size
    boxes = boxes.copy()
    boxes[:, 0::2] = np.clip(boxes[:, 0::2], np.float32(0), np.float32(width))
    boxes[:, 1::2] = np.clip(boxes[:, 1::2], np.float32(0), np.float32(height))
    return boxes


def nms(boxes, scores, iou_threshold):
    """Indices of the boxes [N, 4] (xyxy) kept by greedy non-maximum suppression, best score first.

    Boxes are visited in descending score (ties: lower index first); each one not yet suppressed
    is kept and suppresses every later box whose IoU with it is strictly above ``iou_threshold``.
    IoUs are computed in the boxes' precision and compared in float64, as torchvision's CPU kernel
    does; a pair with zero union (two empty boxes) never suppresses.
    """
    boxes = np.asarray(boxes)
    scores = np.asarray(scores)
    if len(boxes) == 0:
        return np.zeros((0,), dtype=np.int64)
    x1, y1, x2, y2 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    areas = (x2 - x1) * (y2 - y1)
    zero = np.zeros((), dtype=boxes.dtype)
    order = np.argsort(-scores, kind="stable")
    suppressed = np.zeros(len(boxes), dtype=bool)
    keep = []
    for position, i in enumerate(order):
        if suppressed[i]:
            continue
        keep.append(i)
        rest = order[position + 1:]
        w = np.maximum(zero, np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest]))
        h = np.maximum(zero, np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest]))
        inter = w * h
        with np.errstate(divide="ignore", invalid="ignore"):
            iou = inter / (areas[i] + areas[rest] - inter)
        suppressed[rest[iou.astype(np.float64) > float(iou_threshold)]] = True
    return np.asarray(keep, dtype=np.int64)


def batched_nms(boxes, scores, labels, iou_threshold):
    """NMS within each label: indices of the kept boxes, best score first (ties: lower index first).

    torchvision does this two ways and so does this function, so its float32 rounding is the
    same: up to ``VANILLA_NMS_ABOVE`` boxes, one NMS pass over boxes shifted apart by label (a box
    moves by label * (largest coordinate + 1), so boxes of different labels never overlap); beyond
    that, NMS class by class. Both keep the same boxes except where the shift's rounding moves an
    IoU across the threshold (within ~1e-4 of it); a port may use either.
    """
    boxes = np.asarray(boxes)
    scores = np.asarray(scores)
    labels = np.asarray(labels)
    if len(boxes) == 0:
        return np.zeros((0,), dtype=np.int64)
    if len(boxes) <= VANILLA_NMS_ABOVE:
        offsets = labels.astype(boxes.dtype) * (boxes.max() + np.ones((), dtype=boxes.dtype))
        return nms(boxes + offsets[:, None], scores, iou_threshold)
    kept = []
    for label in np.unique(labels):
        members = np.nonzero(labels == label)[0]
        kept.append(members[nms(boxes[members], scores[members], iou_threshold)])
    kept = np.sort(np.concatenate(kept))
    return kept[np.argsort(-scores[kept], kind="stable")]


def decode_ssd(box_regression, class_logits, anchors, weights=(10.0, 10.0, 5.0, 5.0), score_threshold=0.01,
               iou_threshold=0.55, candidates_per_class=300, max_detections=300, background=0, image_size=None):
    """Detections of ONE image from SSD head outputs: (boxes [n, 4] float32 xyxy, scores [n]
    float32, labels [n] int64), best score first.

    ``box_regression`` [A, 4] and ``class_logits`` [A, C] are the head's outputs for the image,
    ``anchors`` [A, 4] the xyxy anchors in input pixels; ``background`` is the class index left
    out (None: none is); ``image_size`` (height, width) clips the boxes to the image (None: not
    clipped). The steps are listed in the module's docstring.
    """
    box_regression, class_logits, anchors = _checked(box_regression, class_logits, anchors)
    scores = softmax(class_logits)
    boxes = decode_boxes(box_regression, anchors, weights)
    if image_size is not None:
        boxes = clip_boxes(boxes, image_size)
    cand_boxes, cand_scores, cand_labels = [], [], []
    for label in range(scores.shape[1]):
        if label == background:
            continue
        above = np.nonzero(scores[:, label] > np.float32(score_threshold))[0]
        best = above[np.argsort(-scores[above, label], kind="stable")[:candidates_per_class]]
        cand_boxes.append(boxes[best])
        cand_scores.append(scores[best, label])
        cand_labels.append(np.full(len(best), label, dtype=np.int64))
    if not cand_boxes:  # a single class that is the background: nothing to detect
        return _empty()
    cand_boxes = np.concatenate(cand_boxes).reshape(-1, 4)
    cand_scores = np.concatenate(cand_scores)
    cand_labels = np.concatenate(cand_labels)
    keep = batched_nms(cand_boxes, cand_scores, cand_labels, iou_threshold)[:max_detections]
    return cand_boxes[keep], cand_scores[keep], cand_labels[keep]


def decode_batch(box_regression, class_logits, anchors, **settings):
    """``decode_ssd`` for each image of a batch ([N, A, 4] and [N, A, C]; the same anchors for all):
    a list of (boxes, scores, labels), one per image."""
    box_regression = np.asarray(box_regression)
    class_logits = np.asarray(class_logits)
    if box_regression.ndim != 3 or class_logits.ndim != 3 or len(box_regression) != len(class_logits):
        raise ValueError("box regression %s and class logits %s: expected [N, anchors, 4] and [N, anchors, classes]"
                         % (list(box_regression.shape), list(class_logits.shape)))
    return [decode_ssd(box_regression[i], class_logits[i], anchors, **settings) for i in range(len(box_regression))]


def _checked(box_regression, class_logits, anchors):
    """The three inputs as float32 arrays; ValueError naming the shapes when they do not fit together."""
    box_regression = np.asarray(box_regression, dtype=np.float32)
    class_logits = np.asarray(class_logits, dtype=np.float32)
    anchors = np.asarray(anchors, dtype=np.float32)
    shapes = (list(box_regression.shape), list(class_logits.shape), list(anchors.shape))
    fits = (box_regression.ndim == 2 and box_regression.shape[1] == 4 and class_logits.ndim == 2
            and anchors.shape == box_regression.shape and len(class_logits) == len(anchors))
    if not fits:
        raise ValueError("box regression %s, class logits %s and anchors %s do not fit: expected [A, 4], [A, classes] "
                         "and [A, 4] with the same number of anchors A" % shapes)
    return box_regression, class_logits, anchors


def _empty():
    return np.zeros((0, 4), dtype=np.float32), np.zeros((0,), dtype=np.float32), np.zeros((0,), dtype=np.int64)
