"""The model spec's task applied to outputs: which output a task reads, and its metrics.

``TaskJudge`` turns the float model's and an artifact's flattened outputs (``edgeship.outputs``
order: arrays [N, ...], or per-sample lists for outputs whose length varies) into the task's
:class:`TaskMetrics`. Detections decoded on the host (``postprocess = "host"``) go through the same
reference decoder the device runner and the bundle's app code use
(``edgeship/devices/postprocess.py``), for the float model and the artifact alike. A detection
data set's labelled boxes (``y`` [N, M, 5], :func:`labelled_boxes`) are the ground truth of the
``*_vs_labels`` metrics, as segmentation masks are of segmentation's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from edgeship.entry import import_entry, importable
from edgeship.errors import ModelSpecError, first_line
from edgeship.metrics import CONSTANT_RTOL, NEAR_ZERO
from edgeship.spec import DetectionSpec, ModelSpec
from edgeship.tasks.common import TaskMetrics, checked
from edgeship.tasks.detection import Detections, detection_metrics, detections
from edgeship.tasks.embedding import embedding_metrics
from edgeship.tasks.segmentation import segmentation_metrics

Output = np.ndarray | list  # an array [N, ...] or one array per sample

# Which gates each task checks; the rest of the profile's accuracy gates do not apply to it.
TASK_GATES = {
    "classification": ("min_sqnr_db", "min_cosine", "min_agreement", "max_top1_drop"),
    "generic": ("min_sqnr_db", "min_cosine"),
    "detection": ("min_map50_vs_float", "min_recall_vs_float"),
    "segmentation": ("min_miou_vs_float", "min_pixel_agreement"),
    "embedding": ("min_cosine", "min_cosine_worst", "min_recall_at_1_vs_float", "min_spearman_vs_float"),
}
# The task metric each task gate reads (classification and generic gates read accuracy fields).
GATE_METRICS = {"min_map50_vs_float": "map50_vs_float", "min_recall_vs_float": "recall_vs_float",
                "min_miou_vs_float": "miou_vs_float", "min_pixel_agreement": "pixel_agreement",
                "min_cosine_worst": "cosine_worst", "min_recall_at_1_vs_float": "recall_at_1_vs_float",
                "min_spearman_vs_float": "spearman_vs_float"}
# Gates on properties of the whole evaluation set, judged where it ran (not on the few seeded samples
# a dynamic model also runs at its min and max sizes).
SET_GATES = ("min_recall_at_1_vs_float", "min_spearman_vs_float")


@dataclass
class TaskJudge:
    """The spec's task over outputs named ``names`` (the float model's flattened output names).
    ``anchors`` ([A, 4] xyxy) are needed for detections decoded on the host."""

    spec: ModelSpec
    names: list[str]
    anchors: np.ndarray | None = None

    @property
    def task(self) -> str:
        return self.spec.task

    def index(self, name: str | None, what: str) -> int:
        """Position of output ``name`` (None: the first); ValueError listing the outputs otherwise."""
        if name is None:
            return 0
        if name not in self.names:
            raise ValueError(f"{self.spec.source or 'model spec'}: {what} names output {name!r}, but the model's "
                             f"outputs are: {', '.join(self.names)}")
        return self.names.index(name)

    def primary(self) -> int:
        """The output the element-wise figures (top-1, agreement, SQNR) of the accuracy block read."""
        settings = self.spec.task_settings()
        if self.task in ("segmentation", "embedding"):
            return self.index(settings.output, f"[{self.task}] output")
        if self.task == "detection" and settings.postprocess == "host":
            return self.index(settings.decode.scores, "[detection.decode] scores")
        return 0

    def uninformative(self, reference: list[Output]) -> str | None:
        """Why the float model's detections prove nothing, or None (and None for other tasks, or
        detections the task cannot read: its metrics then say why): none at all; every score the
        same, so which detection ranks first, and every match against it, is arbitrary (a fresh
        class head scores every box alike); the same detections for every sample."""
        if self.task != "detection":
            return None
        try:
            found = self.detections(reference, "the float model")
        except ValueError:
            return None
        scores = np.concatenate([d.scores for d in found]).astype(np.float64) if found else np.zeros(0)
        if not scores.size:
            return f"the float model detects nothing in any of the {len(found)} evaluation samples"
        if scores.size > 1 and np.ptp(scores) <= CONSTANT_RTOL * max(float(np.abs(scores).max()), NEAR_ZERO):
            return (f"every detection of the float model has the same score ({scores[0]:.6g}): which one ranks "
                    "first, and so every match against it, is arbitrary")
        if len(found) > 1 and all(_same(found[0], d) for d in found[1:]):
            return f"the float model gives the same detections for all {len(found)} evaluation samples"
        return None

    def reading(self) -> list[str]:
        """How the outputs were read where the spec did not say (a detector's unnamed tuple)."""
        if self.task == "detection" and self._torchvision_order(self.spec.task_settings()):
            return ["detection outputs read as boxes = output0, scores = output1, labels = output2, the order "
                    "torchvision's detectors return (name them in [detection] boxes, scores and labels otherwise)"]
        return []

    def check(self) -> None:
        """ValueError when the spec names an output the model does not have."""
        self.primary()
        if self.task == "detection":
            self._detection_indices(self.spec.task_settings())

    def metrics(self, reference: list[Output], candidate: list[Output],
                labels: np.ndarray | None) -> TaskMetrics | None:
        """The task's metrics of ``candidate`` against ``reference`` (and labels where the task reads
        them); None for classification and generic, whose figures are the accuracy block's own."""
        if self.task == "detection":
            settings = self.spec.task_settings()
            boxed = labels is not None and labels.ndim == 3 and labels.shape[-1] == 5
            return detection_metrics(self.detections(reference, "the float model"),
                                     self.detections(candidate, "the artifact"),
                                     self.ground_truth(labels, reference) if boxed else None,
                                     iou_threshold=settings.iou_threshold, score_threshold=settings.score_threshold)
        if self.task == "segmentation":
            i = self.primary()
            masks = labels if labels is not None and labels.ndim == 3 else None
            return segmentation_metrics(_stacked(reference[i]), _stacked(candidate[i]), masks,
                                        ignore_index=self.spec.task_settings().ignore_index)
        if self.task == "embedding":
            i = self.primary()
            ref, out = _stacked(reference[i]), _stacked(candidate[i])
            return embedding_metrics(ref.reshape(len(ref), -1), out.reshape(len(out), -1), labels)
        return None

    def ground_truth(self, labels: np.ndarray, reference: list[Output]) -> list[Detections]:
        """The labelled boxes of a detection data set, one :class:`Detections` per sample, in the
        coordinates of the model's detections: the spec's ``box_format`` when the model
        post-processes, xyxy input pixels when the host decodes (as ``decode_batch`` returns them).
        ``reference`` (the float outputs) gives the sample count and, for host decoding, the class
        count (the scores output's last dimension). ValueError naming the sample otherwise."""
        settings: DetectionSpec = self.spec.task_settings()
        classes = None
        if settings.postprocess == "host":
            scores = reference[self.index(settings.decode.scores, "[detection.decode] scores")]
            classes = None if isinstance(scores, list) else int(scores.shape[-1])
        box_format = "xyxy" if settings.postprocess == "host" else settings.box_format
        return labelled_boxes(labels, len(reference[0]), box_format, classes)

    def detections(self, outputs: list[Output], who: str) -> list[Detections]:
        """Per-sample detections from ``outputs``: read from the boxes/scores/labels outputs, or
        decoded from the raw head outputs with the anchors."""
        settings: DetectionSpec = self.spec.task_settings()
        if settings.postprocess == "host":
            return self._decoded(outputs, settings, who)
        b, s, lab = self._detection_indices(settings)
        n = len(outputs[b])
        return [detections(_boxes(_sample(outputs[b], k)), _sample(outputs[lab], k), _sample(outputs[s], k),
                           box_format=settings.box_format, name=f"{who}'s sample {k}") for k in range(n)]

    def _detection_indices(self, settings: DetectionSpec) -> tuple[int, ...]:
        if settings.postprocess == "host":
            return (self.index(settings.decode.boxes, "[detection.decode] boxes"),
                    self.index(settings.decode.scores, "[detection.decode] scores"))
        if self._torchvision_order(settings):
            return 0, 1, 2
        return (self.index(settings.boxes, "[detection] boxes"), self.index(settings.scores, "[detection] scores"),
                self.index(settings.labels, "[detection] labels"))

    def _torchvision_order(self, settings: DetectionSpec) -> bool:
        """A plain tuple of three outputs (output0..2) from a model that post-processes itself, with
        no output named in the spec: read in torchvision's order, boxes, scores, labels."""
        named = {"boxes", "scores", "labels"} & settings.model_fields_set
        return settings.postprocess == "model" and not named and self.names == ["output0", "output1", "output2"]

    def _decoded(self, outputs: list[Output], settings: DetectionSpec, who: str) -> list[Detections]:
        from edgeship.devices.postprocess import decode_batch

        if self.anchors is None:
            raise ValueError("detections decoded on the host need the anchors ([detection.decode] anchors)")
        b, s = self._detection_indices(settings)
        d = settings.decode
        decoded = decode_batch(_stacked(outputs[b]), _stacked(outputs[s]), self.anchors, weights=tuple(d.weights),
                               score_threshold=d.score_threshold, iou_threshold=d.iou_threshold,
                               candidates_per_class=d.candidates_per_class, max_detections=d.max_detections,
                               background=d.background, image_size=self.image_size())
        return [detections(boxes, labels, scores, name=f"{who}'s sample {k}")
                for k, (boxes, scores, labels) in enumerate(decoded)]

    def image_size(self) -> tuple[int, int] | None:
        """(height, width) of an image input [N, C, H, W], which decoded boxes are clipped to."""
        shape = self.spec.inputs[0].shape
        return (shape[-2], shape[-1]) if len(shape) == 4 else None


def labelled_boxes(labels: object, samples: int, box_format: str = "xyxy",
                   classes: int | None = None) -> list[Detections]:
    """Detection labels [N, M, 5] as ground truth, one :class:`Detections` per sample (scores all
    1.0): each row is (x1, y1, x2, y2, class) in ``box_format``, rows with a negative class pad
    (samples hold different numbers of boxes, or none). ValueError for another shape, N other than
    ``samples``, NaN or inf, a fractional class, a class not below ``classes`` (when known), or a
    box with x2 < x1 or y2 < y1 after conversion to xyxy, naming the sample."""
    where = "detection labels (y)"
    y = checked(where, labels)
    if y.ndim != 3 or y.shape[-1] != 5 or len(y) != samples:
        raise ValueError(f"{where} have shape {list(y.shape)}; expected boxes [{samples}, M, 5] for the {samples} "
                         f"samples: per sample M rows of (x1, y1, x2, y2, class) in box format {box_format}, rows "
                         "with a negative class pad")
    truth = []
    for k, rows in enumerate(y.astype(np.float64)):
        fractional = rows[:, 4] != np.round(rows[:, 4])
        if fractional.any():
            raise ValueError(f"{where}: sample {k} has fractional class {rows[fractional, 4][0]:g} "
                             f"({int(fractional.sum())} row(s)); classes are integer indices (negative: padding)")
        rows = rows[rows[:, 4] >= 0]
        if classes is not None and rows.size and rows[:, 4].max() >= classes:
            raise ValueError(f"{where}: sample {k} has class {int(rows[:, 4].max())}; the model's scores output has "
                             f"{classes} classes, so classes are in [0, {classes})")
        found = detections(rows[:, :4], rows[:, 4], box_format=box_format, name=f"{where} of sample {k}")
        inverted = (found.boxes[:, 2] < found.boxes[:, 0]) | (found.boxes[:, 3] < found.boxes[:, 1])
        if inverted.any():
            raise ValueError(f"{where}: sample {k} has {int(inverted.sum())} box(es) with x2 < x1 or y2 < y1 (as "
                             f"xyxy from box format {box_format}), the first {rows[inverted][0, :4].tolist()}")
        truth.append(found)
    return truth


def _same(a: Detections, b: Detections) -> bool:
    return all(np.array_equal(x, y) for x, y in ((a.boxes, b.boxes), (a.scores, b.scores), (a.labels, b.labels)))


def _stacked(value: Output) -> np.ndarray:
    if isinstance(value, list):
        raise ValueError("this output's length varies by sample; the task needs one array [N, ...]")
    return value


def _boxes(value: np.ndarray) -> np.ndarray:
    """[1, D, 4] (a batch-first padded output) or [D, 4] as [D, 4]."""
    a = np.asarray(value)
    return a.reshape(-1, 4) if a.ndim >= 2 and a.shape[-1] == 4 else a


def _sample(value: Output, k: int) -> Any:
    """Sample ``k`` of an output: its own array, or row ``k`` of an array merged over a batch of 1."""
    return value[k] if isinstance(value, list) else value[k:k + 1]


def task_anchors(spec: ModelSpec) -> np.ndarray | None:
    """The anchors of a detection model decoded on the host, from the spec's callable, checked:
    an [A, 4] array of finite numbers (ModelSpecError otherwise); None for other models."""
    settings = spec.task_settings()
    decode = getattr(settings, "decode", None)
    if spec.task != "detection" or settings.postprocess != "host" or decode is None:
        return None
    where = f"{spec.source or 'model spec'}: [detection.decode] anchors {decode.anchors}"
    with importable(spec.base_dir):
        factory = import_entry(decode.anchors, spec.base_dir, ModelSpecError, where)
        try:
            anchors = np.asarray(factory(), dtype=np.float32)
        except Exception as e:
            raise ModelSpecError(f"{where} raised {type(e).__name__}: {first_line(e)}") from None
    if anchors.ndim != 2 or anchors.shape[1] != 4 or not np.isfinite(anchors).all():
        raise ModelSpecError(f"{where}: expected an [anchors, 4] array of finite xyxy boxes, got shape "
                             f"{list(anchors.shape)}")
    return anchors
