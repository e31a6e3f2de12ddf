"""torchvision's SSDLite320 (MobileNetV3-Large backbone, 91 COCO classes) with seeded random weights,
in the two forms a detection model spec can deploy, and seeded synthetic images to calibrate and
evaluate it with.

- ``ssdlite_raw``: backbone + head only; returns the raw head outputs ``bbox_regression`` [N, A, 4]
  and ``cls_logits`` [N, A, 91] (A = 3234 anchors), decoded on the host (``postprocess = "host"``,
  ``anchors`` gives the anchors, ``edgeship.devices.postprocess.decode_ssd`` the decoding).
- ``ssdlite_postprocessed``: the same network followed by torchvision's own box decoding and
  per-class NMS for one image; returns ``boxes`` [n, 4], ``scores`` [n], ``labels`` [n]
  (``postprocess = "model"``).

Both take a [N, 3, 320, 320] image that is already normalised to [-1, 1] (torchvision's
GeneralizedRCNNTransform, which resizes and normalises, is left out: it belongs to the app).

No weights can be downloaded here, so the network is random, and a random SSDLite is no detector:
its batch-norm statistics (mean 0, variance 1) do not fit its activations, which shrink to ~1e-14
by the head, and its near-uniform class scores (1/91 = 0.011 > 0.01) put every anchor of every class
above the score threshold. ``build_ssdlite`` makes it behave like a trained detector would, on the
synthetic images below; the details and the reasons are in its docstring.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torch import nn

SIZE = 320  # input height and width
NUM_CLASSES = 91  # COCO's 90 classes and the background (class 0)
SCORE_THRESHOLD = 0.01  # the spec's [detection.decode] defaults; torchvision's SSDLite default is 0.001
IOU_THRESHOLD = 0.55
CANDIDATES_PER_CLASS = 300
MAX_DETECTIONS = 300
DEPTHWISE_MEAN = 1.0  # see build_ssdlite
SETTLE_SEED, CALIBRATION_SEED, EVALUATION_SEED = 100, 1, 2  # three disjoint image streams
HEAD_SCALE, BACKGROUND_GAIN, BACKGROUND_BIAS, BACKGROUND_STEP = 3.0, 4.0, 11.5, 0.05  # see build_ssdlite


def images(n: int = 16, seed: int = EVALUATION_SEED, size: int = SIZE) -> np.ndarray:
    """``n`` seeded synthetic images [n, 3, size, size], float32 in [-1, 1] (already normalised).

    Each is a smooth colour gradient with faint noise, with 2 to 6 rectangles of random size,
    colour and position laid over it, each with a fine texture, so the objects differ from the
    background in colour and in texture and no two images are alike.
    """
    rng = np.random.default_rng(seed)
    ys, xs = np.mgrid[0:size, 0:size] / size
    out = np.empty((n, 3, size, size), np.float32)
    for k in range(n):
        img = rng.uniform(-0.3, 0.3, (3, 1, 1)) * xs + rng.uniform(-0.3, 0.3, (3, 1, 1)) * ys
        img += rng.uniform(-0.4, 0.4, (3, 1, 1)) + rng.normal(0, 0.03, (3, size, size))
        for _ in range(rng.integers(2, 7)):
            w, h = rng.integers(size // 13, size // 2, 2)
            x0, y0 = rng.integers(0, size - w), rng.integers(0, size - h)
            img[:, y0:y0 + h, x0:x0 + w] = rng.uniform(-0.8, 0.8, (3, 1, 1)) + rng.normal(0, 0.1, (3, h, w))
        out[k] = np.clip(img, -1, 1)
    return out


def _batches(n: int, seed: int, batch: int = 4) -> Iterator[np.ndarray]:
    data = images(n, seed)
    for start in range(0, n, batch):
        yield data[start:start + batch]


def calibration_images() -> Iterator[np.ndarray]:
    """Data source for ``[data] calibration``: 32 seeded images, in batches of 4."""
    return _batches(32, CALIBRATION_SEED)


def evaluation_images() -> Iterator[np.ndarray]:
    """Data source for ``[data] evaluation``: 16 seeded images (a stream apart from calibration's)."""
    return _batches(16, EVALUATION_SEED)


def build_ssdlite(seed: int = 0) -> nn.Module:
    """torchvision's SSD (``ssdlite320_mobilenet_v3_large``, 91 classes, score threshold 0.01) with
    random weights drawn from ``seed``, made to behave like a trained detector, in eval mode.

    Three changes, the last two estimated on 8 synthetic images of their own seed (not the
    calibration or evaluation images):

    1. Depthwise kernels get a positive mean (DEPTHWISE_MEAN standard deviations): smoothing
       filters, as trained MobileNets mostly learn, rather than random high-pass ones. It makes
       the network far less sensitive to noise: input noise at 40 dB SQNR came out at 12 dB in
       the class logits before, ~42 dB after. A random network still quantizes badly (its
       channel mixing stays chaotic): edgeship's ONNX int8 read 3.1 dB SQNR and 7% mAP@0.5
       against the float model before this change, 6.4 dB and 13% after. Int8 accuracy of this
       model says nothing about a trained SSDLite's.
    2. Batch-norm statistics are re-estimated (cumulative average in train mode), as training
       would have left them; fresh statistics (mean 0, variance 1) shrink activations to ~1e-14.
    3. The classification head's last 1x1 convolutions (one per feature level) are reshaped:
       the anchors of a location share the first anchor's class weights; the class channels are
       centred over the classes and standardised (mean 0, standard deviation HEAD_SCALE over the
       images); the background channel becomes ``BACKGROUND_BIAS + BACKGROUND_GAIN * local mean
       activation / its average`` (plus BACKGROUND_STEP per anchor of a location, so that its
       anchors never tie).

    Why the head: the random logits are near-uniform (1/91 = 0.011 > 0.01: every anchor of every
    class passes the threshold, 300 detections of noise per image), and scaling them alone gives
    some images hundreds of detections and others none, because how strongly the random
    backbone responds varies a lot between images. Centring over the classes removes the part
    that follows the response's overall strength, so a class wins only where the *pattern* of
    the features favours it, with the background as the default, as in a trained detector; the
    background's gain on the local activation evens the images further. Shared class weights
    make the overlapping anchors on an object agree on its class, so NMS has duplicates to
    remove. The constants come from a grid search for tens of detections above 0.01 per
    evaluation image: 11 to 100 (median 36.5) with seed 0, top scores 0.02 to 0.85, different
    per image.

    Box regression is left as initialised (offsets of a few percent of the anchor size). The
    statistics are computed on one thread, so every process builds the same weights to the bit
    (with two threads the batch-norm statistics differed in the last bits).
    """
    from torchvision.models.detection import ssdlite320_mobilenet_v3_large

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=NUM_CLASSES,
                                              score_thresh=SCORE_THRESHOLD, nms_thresh=IOU_THRESHOLD,
                                              detections_per_img=MAX_DETECTIONS, topk_candidates=CANDIDATES_PER_CLASS)
    settling = torch.from_numpy(images(8, SETTLE_SEED))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # batch-norm statistics reduced in another order differ in the last bits
    try:
        _smooth_depthwise(model)
        _settle_batch_norm(model, settling)
        _shape_classification_head(model, settling)
    finally:
        torch.set_num_threads(threads)
    return model.eval()


def _smooth_depthwise(model: nn.Module) -> None:
    """Depthwise kernels get a positive mean of DEPTHWISE_MEAN standard deviations: smoothing
    filters, as trained MobileNets mostly learn, rather than random high-pass ones."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Conv2d) and m.groups > 1 and m.groups == m.in_channels:
                m.weight.add_(DEPTHWISE_MEAN * m.weight.std())


def _settle_batch_norm(model: nn.Module, data: torch.Tensor, batch: int = 4) -> None:
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # cumulative average over the batches
    model.train()
    with torch.no_grad():
        for part in data.split(batch):
            model.head(list(model.backbone(part).values()))
    model.eval()


def _shape_classification_head(model: nn.Module, data: torch.Tensor) -> None:
    convs = [level[-1] for level in model.head.classification_head.module_list]
    inputs: dict[int, torch.Tensor] = {}
    hooks = [c.register_forward_hook(lambda m, args, out, i=i: inputs.__setitem__(i, args[0]))
             for i, c in enumerate(convs)]
    with torch.no_grad():
        model.head(list(model.backbone(data).values()))
        for hook in hooks:
            hook.remove()
        for i, conv in enumerate(convs):
            _shape_level(conv, inputs[i])


def _shape_level(conv: nn.Conv2d, x: torch.Tensor) -> None:
    """One level's last conv: class channels shared across anchors, centred over the classes and
    standardised to HEAD_SCALE; background channel BACKGROUND_BIAS + BACKGROUND_GAIN * (mean over
    input channels / its average over the images) + BACKGROUND_STEP per anchor."""
    weight = conv.weight.view(-1, NUM_CLASSES, conv.in_channels)  # [anchors per location, classes, inputs]
    bias = conv.bias.view(-1, NUM_CLASSES)
    weight[1:], bias[1:] = weight[:1].clone(), bias[:1].clone()
    weight[:, 1:] -= weight[:, 1:].mean(1, keepdim=True)
    bias[:, 1:] -= bias[:, 1:].mean(1, keepdim=True)
    out = conv(x).transpose(0, 1).flatten(1)  # [anchors per location * classes, samples]
    mean, std = out.mean(1), out.std(1)
    weight = conv.weight * (HEAD_SCALE / std)[:, None, None, None]
    bias = (conv.bias - mean) * (HEAD_SCALE / std)
    background = torch.arange(0, conv.out_channels, NUM_CLASSES)
    weight[background] = BACKGROUND_GAIN / (x.shape[1] * x.mean())
    bias[background] = BACKGROUND_BIAS + BACKGROUND_STEP * torch.arange(len(background))
    conv.weight.copy_(weight)
    conv.bias.copy_(bias)


class RawSsdLite(nn.Module):
    """SSDLite's backbone and head: image [N, 3, 320, 320] -> {"bbox_regression": [N, A, 4],
    "cls_logits": [N, A, 91]}."""

    def __init__(self, ssd: nn.Module) -> None:
        super().__init__()
        self.backbone = ssd.backbone
        self.head = ssd.head

    def forward(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.head(list(self.backbone(image).values()))


class PostprocessedSsdLite(nn.Module):
    """SSDLite with torchvision's decoding for ONE image: image [1, 3, 320, 320] -> {"boxes": [n, 4]
    xyxy pixels, "scores": [n], "labels": [n] int64}, best first.

    The same detections as torchvision's ``SSD.postprocess_detections``, selected without its loop
    over classes so that the exported graph stays small: one TopK over the anchors of every class
    (the CANDIDATES_PER_CLASS best), then the score threshold, which keeps the same candidates in
    the same order (class by class, best first). The anchors are a constant of the 320x320 input.
    Exports to ONNX with either exporter (see the README); the NMS is ONNX's NonMaxSuppression.
    """

    def __init__(self, ssd: nn.Module) -> None:
        super().__init__()
        self.raw = RawSsdLite(ssd)
        self.box_coder = ssd.box_coder
        self.register_buffer("anchors", torch.from_numpy(anchors_of(ssd)))

    def forward(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        from torchvision.ops import boxes as box_ops

        out = self.raw(image)
        boxes = self.box_coder.decode_single(out["bbox_regression"][0], self.anchors)
        boxes = box_ops.clip_boxes_to_image(boxes, (image.shape[-2], image.shape[-1]))
        scores = torch.softmax(out["cls_logits"][0], dim=-1)[:, 1:]  # background (class 0) dropped
        top_scores, top_anchors = scores.topk(CANDIDATES_PER_CLASS, dim=0)  # [k, classes - 1]
        labels = torch.arange(1, NUM_CLASSES).expand_as(top_anchors)
        top_scores, top_anchors, labels = top_scores.t().flatten(), top_anchors.t().flatten(), labels.t().flatten()
        above = top_scores > SCORE_THRESHOLD
        cand_boxes, cand_scores, cand_labels = boxes[top_anchors[above]], top_scores[above], labels[above]
        keep = _batched_nms(cand_boxes, cand_scores, cand_labels)[:MAX_DETECTIONS]
        return {"boxes": cand_boxes[keep], "scores": cand_scores[keep], "labels": cand_labels[keep]}


def _batched_nms(boxes: torch.Tensor, scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """torchvision's ``batched_nms`` as it runs for up to 1000 boxes (boxes shifted apart by label,
    one ``torchvision.ops.nms``), without its branches on the number of boxes: those are guards
    on a data-dependent size that ``torch.export`` (and so the dynamo ONNX exporter) refuses.
    Clipped boxes are >= 0, so the largest coordinate, taken with a 0 beside the boxes so that
    no boxes are fine too, is torchvision's."""
    from torchvision.ops import nms

    largest = torch.cat([boxes.flatten(), boxes.new_zeros(1)]).max()
    offsets = labels.to(boxes) * (largest + 1)
    return nms(boxes + offsets[:, None], scores, IOU_THRESHOLD)


def anchors_of(ssd: nn.Module, size: int = SIZE) -> np.ndarray:
    """The [A, 4] float32 xyxy anchors (input pixels) that ``ssd``'s anchor generator gives a
    ``size`` x ``size`` input."""
    from torchvision.models.detection.image_list import ImageList

    image = torch.zeros(1, 3, size, size)
    with torch.no_grad():
        features = list(ssd.backbone(image).values())
    return ssd.anchor_generator(ImageList(image, [(size, size)]), features)[0].numpy().astype(np.float32)


def ssdlite_raw(seed: int = 0) -> nn.Module:
    """Entry for ``postprocess = "host"``: the raw-output form of ``build_ssdlite(seed)``."""
    return RawSsdLite(build_ssdlite(seed)).eval()


def ssdlite_postprocessed(seed: int = 0) -> nn.Module:
    """Entry for ``postprocess = "model"``: ``build_ssdlite(seed)`` with its own decoding and NMS."""
    return PostprocessedSsdLite(build_ssdlite(seed)).eval()


def anchors() -> np.ndarray:
    """``[detection.decode] anchors``: SSDLite320's 3234 anchors for a 320x320 input, [A, 4] float32
    xyxy pixels. They depend on the feature-map sizes only, not on the weights."""
    from torchvision.models.detection import ssdlite320_mobilenet_v3_large

    with torch.random.fork_rng(devices=[]):
        ssd = ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=NUM_CLASSES).eval()
    return anchors_of(ssd)
