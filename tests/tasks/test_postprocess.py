"""The device-side SSD decoder (edgeship/devices/postprocess.py) against torchvision's own SSD
post-processing, on the seeded SSDLite of examples/detection, and its NMS against torchvision's."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from edgeship.devices import postprocess
from edgeship.devices.postprocess import batched_nms, decode_batch, decode_boxes, decode_ssd, nms
from tests import system

pytest.importorskip("torchvision", reason=system.reason("python", "torchvision is not installed (make setup)"))
from torchvision.ops import batched_nms as tv_batched_nms  # noqa: E402
from torchvision.ops import nms as tv_nms  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "detection"
SIZE = (320, 320)


@pytest.fixture(scope="module")
def ssdlite():
    """The example's module, imported from its folder (as a spec's entry is)."""
    sys.path.insert(0, str(EXAMPLE))
    try:
        import ssdlite as module
    finally:
        sys.path.remove(str(EXAMPLE))
    return module


@pytest.fixture(scope="module")
def built(ssdlite):
    """The seeded SSDLite, its anchors and its raw head outputs on 4 evaluation images (built once)."""
    ssd = ssdlite.build_ssdlite()
    images = torch.from_numpy(ssdlite.images(4))
    with torch.no_grad():
        out = ssdlite.RawSsdLite(ssd)(images)
    return ssd, ssdlite.anchors_of(ssd), images, out


def torchvision_detections(ssd, out, anchors, score_threshold):
    """torchvision's SSD.postprocess_detections on the head outputs, at ``score_threshold``."""
    kept, ssd.score_thresh = ssd.score_thresh, score_threshold
    try:
        return ssd.postprocess_detections(out, [torch.from_numpy(anchors)] * len(out["cls_logits"]),
                                          [SIZE] * len(out["cls_logits"]))
    finally:
        ssd.score_thresh = kept


def assert_same_detections(mine, theirs) -> None:
    boxes, scores, labels = mine
    assert len(scores) == len(theirs["scores"])
    assert np.array_equal(labels, theirs["labels"].numpy())
    np.testing.assert_allclose(scores, theirs["scores"].numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(boxes, theirs["boxes"].numpy(), rtol=1e-6, atol=1e-4)  # pixels: ~1 float32 ulp at 320
    assert (boxes.dtype, scores.dtype, labels.dtype) == (np.float32, np.float32, np.int64)


@pytest.mark.parametrize("score_threshold", [0.01, 0.0001])
def test_decode_ssd_matches_torchvision_postprocess(built, score_threshold: float) -> None:
    """At 0.01 (the spec default: tens of detections, torchvision's one-pass NMS) and at 0.0001
    (thousands of candidates: torchvision's NMS class by class, and max_detections cuts)."""
    ssd, anchors, _, out = built
    theirs = torchvision_detections(ssd, out, anchors, score_threshold)
    mine = decode_batch(out["bbox_regression"].numpy(), out["cls_logits"].numpy(), anchors,
                        score_threshold=score_threshold, iou_threshold=0.55, candidates_per_class=300,
                        max_detections=300, background=0, image_size=SIZE)
    assert len(mine) == 4
    for m, t in zip(mine, theirs):
        assert_same_detections(m, t)
    counts = [len(t["scores"]) for t in theirs]
    if score_threshold == 0.01:  # the example's head gives a realistic, image-dependent output
        assert all(c > 0 for c in counts) and len(set(counts)) > 1 and max(counts) < 300, counts
    else:
        assert max(counts) == 300, counts  # max_detections cuts


def test_decode_ssd_uses_candidates_beyond_the_nms_switch(built) -> None:
    """The 0.0001 case above really takes torchvision's class-by-class branch (> 1000 candidates)."""
    _, _, _, out = built
    scores = torch.softmax(out["cls_logits"], -1)[..., 1:]
    candidates = (scores > 0.0001).sum(1).clamp(max=300).sum(1)
    assert (candidates > postprocess.VANILLA_NMS_ABOVE).any(), candidates.tolist()


def test_postprocessed_model_matches_torchvision_postprocess(built, ssdlite) -> None:
    ssd, anchors, images, out = built
    model = ssdlite.PostprocessedSsdLite(ssd).eval()
    with torch.no_grad():
        got = model(images[:1])
        raw = ssdlite.RawSsdLite(ssd)(images[:1])  # batch 1, as the model ran (convolutions differ by batch)
    theirs = torchvision_detections(ssd, raw, anchors, 0.01)[0]
    for key in ("boxes", "scores", "labels"):
        assert torch.equal(got[key], theirs[key]), key


def test_anchors_entry_gives_the_models_anchors(built, ssdlite) -> None:
    _, anchors, _, _ = built
    got = ssdlite.anchors()
    assert got.dtype == np.float32 and got.shape == (3234, 4)
    assert np.array_equal(got, anchors)


def test_decode_boxes_matches_torchvision_box_coder_with_clamped_sizes() -> None:
    from torchvision.models.detection._utils import BoxCoder

    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 300, (500, 2)).astype(np.float32)
    anchors = np.concatenate([xy, xy + rng.uniform(1, 100, (500, 2)).astype(np.float32)], 1)
    rel = rng.normal(0, 10, (500, 4)).astype(np.float32)
    rel[:10, 2:] = 100.0  # exp(20) without the clamp: the log(1000 / 16) limit applies
    coder = BoxCoder(weights=(10.0, 10.0, 5.0, 5.0))
    theirs = coder.decode_single(torch.from_numpy(rel), torch.from_numpy(anchors)).numpy()
    np.testing.assert_allclose(decode_boxes(rel, anchors), theirs, rtol=1e-6, atol=1e-4)


def random_boxes(rng: np.random.Generator, n: int, spread: float = 100.0) -> np.ndarray:
    corner = rng.uniform(0, spread, (n, 2))
    return np.concatenate([corner, corner + rng.uniform(2, 40, (n, 2))], 1).astype(np.float32)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("iou", [0.3, 0.55, 0.8])
def test_nms_matches_torchvision_nms(seed: int, iou: float) -> None:
    rng = np.random.default_rng(seed)
    boxes = random_boxes(rng, 400, spread=40.0)  # dense: every threshold suppresses some
    scores = rng.permutation(400).astype(np.float32) / 400  # distinct: torch leaves the order of ties open
    theirs = tv_nms(torch.from_numpy(boxes), torch.from_numpy(scores), iou).numpy()
    got = nms(boxes, scores, iou)
    assert got.dtype == np.int64 and 0 < len(got) < 400
    assert np.array_equal(got, theirs)


@pytest.mark.parametrize("n", [300, 1500])  # both sides of torchvision's switch at 1000 boxes
def test_batched_nms_matches_torchvision_batched_nms(n: int) -> None:
    rng = np.random.default_rng(n)
    boxes = random_boxes(rng, n)
    scores = rng.permutation(n).astype(np.float32) / n
    labels = rng.integers(1, 6, n)
    theirs = tv_batched_nms(torch.from_numpy(boxes), torch.from_numpy(scores), torch.from_numpy(labels), 0.5)
    got = batched_nms(boxes, scores, labels, 0.5)
    assert len(got) < n and np.array_equal(got, theirs.numpy())


def test_nms_keeps_the_lower_index_of_tied_scores() -> None:
    boxes = np.array([[0, 0, 10, 10], [0, 0, 10, 10], [50, 50, 60, 60]], np.float32)
    assert nms(boxes, np.array([0.5, 0.5, 0.9], np.float32), 0.5).tolist() == [2, 0]


def test_nms_of_no_boxes_is_empty() -> None:
    got = nms(np.zeros((0, 4), np.float32), np.zeros((0,), np.float32), 0.5)
    assert got.shape == (0,) and got.dtype == np.int64


def test_nms_of_two_empty_boxes_suppresses_neither() -> None:
    """Zero union gives IoU 0/0 (NaN), which is not above the threshold, as in torchvision."""
    boxes = np.array([[5, 5, 5, 5], [5, 5, 5, 5]], np.float32)
    scores = np.array([0.9, 0.8], np.float32)
    assert nms(boxes, scores, 0.5).tolist() == [0, 1]
    assert tv_nms(torch.from_numpy(boxes), torch.from_numpy(scores), 0.5).tolist() == [0, 1]


def test_decode_ssd_with_nothing_above_the_threshold_is_empty() -> None:
    anchors = np.array([[0, 0, 10, 10], [5, 5, 20, 20]], np.float32)
    logits = np.zeros((2, 4), np.float32)  # every class 0.25
    boxes, scores, labels = decode_ssd(np.zeros((2, 4)), logits, anchors, score_threshold=0.5)
    assert boxes.shape == (0, 4) and scores.shape == (0,) and labels.shape == (0,)
    assert (boxes.dtype, scores.dtype, labels.dtype) == (np.float32, np.float32, np.int64)


def test_decode_ssd_drops_the_background_class_unless_none() -> None:
    anchors = np.array([[0, 0, 10, 10]], np.float32)
    logits = np.array([[5.0, 0.0]], np.float32)  # background 0.993, class 1 0.007
    assert len(decode_ssd(np.zeros((1, 4)), logits, anchors, score_threshold=0.5)[0]) == 0
    _, scores, labels = decode_ssd(np.zeros((1, 4)), logits, anchors, score_threshold=0.5, background=None)
    assert labels.tolist() == [0] and scores[0] == pytest.approx(1 / (1 + np.exp(-5.0)))


def test_decode_ssd_clips_only_when_given_the_image_size() -> None:
    anchors = np.array([[-20, -20, 400, 400]], np.float32)
    logits = np.array([[0.0, 5.0]], np.float32)
    unclipped = decode_ssd(np.zeros((1, 4)), logits, anchors)[0]
    clipped = decode_ssd(np.zeros((1, 4)), logits, anchors, image_size=(300, 320))[0]
    assert unclipped.tolist() == [[-20, -20, 400, 400]] and clipped.tolist() == [[0, 0, 320, 300]]


def test_decode_ssd_keeps_candidates_per_class_and_max_detections() -> None:
    anchors = np.array([[i * 20, 0, i * 20 + 10, 10] for i in range(6)], np.float32)  # no overlaps
    logits = np.zeros((6, 3), np.float32)
    logits[:, 1] = 3.0 + 0.1 * np.arange(6)  # class 1: anchor 5 best
    logits[:, 2] = 3.0
    boxes, _, labels = decode_ssd(np.zeros((6, 4)), logits, anchors, candidates_per_class=2)
    assert sorted(labels.tolist()) == [1, 1, 2, 2]
    assert boxes[labels == 1][:, 0].tolist() == [100, 80]  # the two best anchors of class 1, best first
    assert len(decode_ssd(np.zeros((6, 4)), logits, anchors, max_detections=3)[0]) == 3


def test_decode_ssd_refuses_shapes_that_do_not_fit() -> None:
    with pytest.raises(ValueError, match=r"box regression \[5, 4\], class logits \[4, 3\] and anchors \[5, 4\]"):
        decode_ssd(np.zeros((5, 4)), np.zeros((4, 3)), np.zeros((5, 4)))
    with pytest.raises(ValueError, match=r"expected \[N, anchors, 4\]"):
        decode_batch(np.zeros((5, 4)), np.zeros((5, 3)), np.zeros((5, 4)))


def test_postprocess_module_parses_as_python_3_8() -> None:
    """It runs on device Pythons (JetPack's 3.8): no syntax newer than 3.8."""
    ast.parse(Path(postprocess.__file__).read_text(encoding="utf-8"), feature_version=(3, 8))
