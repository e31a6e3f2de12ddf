"""Model specs: which module to build, its weights, inputs, labels, data and preprocessing.

A spec is a ``model.toml`` (paths relative to its folder) or ``module:callable`` with
``--input-shape``. Loading a spec reads and checks the file only; it imports nothing.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PositiveFloat, PositiveInt, StrictInt, field_validator, model_validator

from edgeship.config import (
    ENTRY_PATTERN,
    PathField,
    StrictModel,
    data_source,
    existing_file,
    finite,
    read_toml,
    text_file,
    validate,
)
from edgeship.errors import ModelSpecError
from edgeship.shapes import group_problems

DType = Literal["float32", "float16", "int64", "int32", "uint8", "bool"]
MAX_ELEMENTS = 2**31 - 1  # elements in one input: what runtimes index with 32-bit integers


class InputSpec(StrictModel):
    """One model input: name, shape, dtype; optionally dynamic dimensions and the range of random values.

    ``dynamic = { 1 = { min = 8, max = 512 } }`` lets dimension 1 take any size from 8 to 512
    (TOML keys are strings: the dimension index). Dimensions of different inputs that must be equal
    are one dimension: those at the same index with the same min and max, or with the same ``name``
    (edgeship.shapes describes the rule)."""

    class Dim(StrictModel):
        """A dynamic dimension: any size from min to max; opt is the size runtimes are tuned for."""

        min: int = Field(ge=1, description="Smallest size the artifact must take.")
        max: int = Field(ge=1, description="Largest size the artifact must take (runtimes that plan "
                                           "memory ahead allocate for it).")
        opt: int | None = Field(
            None, ge=1, description="The size capture uses and runtimes tune for (an optimization profile's opt "
                                    "shape); unset: the size in shape.")
        name: str | None = Field(
            None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
            description="Dimensions with the same name, in any inputs, are one dimension (always equal); unset: "
                        "dimensions at the same index with the same min and max are one.")

    name: str = Field(
        "input", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="Input name (the graph's input name, npz key).")
    shape: list[int] = Field(min_length=1, description="Shape with the batch dimension first, e.g. [1, 3, 224, 224].")
    dtype: DType = Field("float32", description="Element type.")
    dynamic: dict[str, Dim] = Field(
        default_factory=dict, description="Dynamic dimensions by index, written as a string in TOML: "
                                          "{ 1 = { min = 8, max = 512 } }.")
    range: list[int | float] | None = Field(
        None, min_length=2, max_length=2,
        description="[low, high): the values seeded random inputs take: integers for integer dtypes, uniform "
                    "floats otherwise; unset: floats in [0, 1), integers 0.")

    @field_validator("shape")
    @classmethod
    def _positive(cls, shape: list[int]) -> list[int]:
        if any(d < 1 for d in shape):
            raise ValueError("every dimension must be a positive integer")
        elements = math.prod(shape)
        if elements > MAX_ELEMENTS:
            count = f"{elements:.3g}" if elements < 10**300 else f"about 1e{len(str(elements)) - 1}"
            raise ValueError(f"{count} elements; an input has at most {MAX_ELEMENTS:,} (2**31 - 1) elements")
        return shape

    def described(self) -> dict[str, object]:
        """name, shape, dtype, and dynamic and range when given: what results.json and model.json record."""
        out = self.model_dump(mode="json", exclude={"dynamic", "range"})
        if self.dynamic:
            out["dynamic"] = {k: d.model_dump(mode="json", exclude_none=True) for k, d in self.dynamic.items()}
        if self.range is not None:
            out["range"] = self.range
        return out

    @field_validator("dynamic", mode="before")
    @classmethod
    def _index_keys(cls, dynamic: object) -> object:
        """Python callers may key dimensions by int; TOML keys are always strings."""
        if isinstance(dynamic, dict):
            return {str(k) if isinstance(k, int) and not isinstance(k, bool) else k: v for k, v in dynamic.items()}
        return dynamic

    @model_validator(mode="after")
    def _dynamic_and_range(self) -> InputSpec:
        problems = [p for key, dim in self.dynamic.items() for p in self._dim_problems(key, dim)]
        if not problems and self.dynamic:
            largest = math.prod(self.dynamic[str(i)].max if str(i) in self.dynamic else size
                                for i, size in enumerate(self.shape))
            if largest > MAX_ELEMENTS:
                problems.append(f"{largest:.3g} elements at the max sizes; an input has at most {MAX_ELEMENTS:,}")
        problems += self._range_problems()
        if problems:
            raise ValueError(f"input {self.name!r}: " + "; ".join(problems))
        return self

    def _dim_problems(self, key: str, dim: InputSpec.Dim) -> list[str]:
        rank = len(self.shape)
        if not (key.isascii() and key.isdigit() and (key == "0" or key[0] != "0")):
            return [f"dynamic key \"{key}\" is not a dimension index; keys are decimal indices 0 to {rank - 1} "
                    f"(e.g. \"1\")"]
        index = int(key)
        if index >= rank:
            return [f"dynamic \"{key}\": dimension {index} does not exist; shape {self.shape} has dimensions "
                    f"0 to {rank - 1}"]
        where = f"dynamic \"{key}\" (dimension {index})"
        if dim.min >= dim.max:
            return [f"{where}: min {dim.min} is not below max {dim.max}; a dynamic dimension needs min < max "
                    "(leave a fixed dimension out of dynamic)"]
        problems = []
        if not dim.min <= self.shape[index] <= dim.max:
            problems.append(f"{where}: shape[{index}] = {self.shape[index]} is outside [min {dim.min}, max {dim.max}]")
        if dim.opt is not None and not dim.min <= dim.opt <= dim.max:
            problems.append(f"{where}: opt {dim.opt} is outside [min {dim.min}, max {dim.max}]")
        return problems

    def _range_problems(self) -> list[str]:
        if self.range is None:
            return []
        low, high = self.range
        if not low < high:
            return [f"range [{low}, {high}]: low must be below high (values are drawn from [low, high))"]
        limits = {"int64": (-2**63, 2**63 - 1), "int32": (-2**31, 2**31 - 1), "uint8": (0, 255),
                  "bool": (0, 1)}.get(self.dtype)
        if limits is None:
            top = 65504.0 if self.dtype == "float16" else 3.4e38
            return [] if -top <= low and high <= top else [f"range [{low}, {high}]: beyond what {self.dtype} holds"]
        if not all(isinstance(v, int) for v in self.range):
            return [f"range [{low}, {high}]: an {self.dtype} input takes integer bounds"]
        if low < limits[0] or high > limits[1] + 1:
            return [f"range [{low}, {high}]: {self.dtype} holds {limits[0]} to {limits[1]}, so low >= {limits[0]} "
                    f"and high <= {limits[1] + 1}"]
        return []


class DataSpec(StrictModel):
    """Where the model's calibration and evaluation data live."""

    calibration: str | None = Field(None, description=".npz (x, optional y), image folder, or module:callable.")
    evaluation: str | None = Field(None, description="Same forms; y (labels) gives top-1 accuracy.")
    sizes: str | None = Field(
        None, pattern=ENTRY_PATTERN,
        description="A model with dynamic dimensions: module:callable called with the size (\"min\" or \"max\") "
                    "that yields input batches at it, as a callable data source does; every artifact is checked on "
                    "them at those sizes (e.g. the evaluation sentences tokenized to 8 and 128 tokens). Unset: "
                    "seeded random inputs from each input's range.")

    _exists = field_validator("calibration", "evaluation")(data_source)


class PreprocessSpec(StrictModel):
    """How images from an image folder become model inputs."""

    resize: list[PositiveInt] | None = Field(
        None, min_length=2, max_length=2, description="Resize to [height, width] first.")
    crop: list[PositiveInt] | None = Field(
        None, min_length=2, max_length=2, description="Center crop to [height, width] after resizing.")
    mean: list[float] | None = Field(None, description="Per-channel mean subtracted after scaling to [0, 1].")
    std: list[PositiveFloat] | None = Field(None, description="Per-channel standard deviation divided by (> 0).")
    layout: Literal["NCHW", "NHWC"] = Field("NCHW", description="Memory layout the model expects.")
    color: Literal["RGB", "L"] = Field("RGB", description="RGB (3 channels) or L (grayscale, 1 channel).")


Task = Literal["classification", "detection", "segmentation", "embedding", "generic"]
BoxFormat = Literal["xyxy", "cxcywh", "xywh"]


class DecodeSpec(StrictModel):
    """How raw detection head outputs become boxes, scores and labels on the host (``postprocess =
    "host"``): SSD-style anchor decoding, per-class score threshold, per-class NMS and top-k, as
    torchvision's SSD post-processing does."""

    kind: Literal["ssd"] = Field("ssd", description="Decoder: ssd (anchor offsets cx, cy, w, h scaled by weights).")
    boxes: str = Field(description="Output holding the box regression, [N, anchors, 4].")
    scores: str = Field(description="Output holding the class logits, [N, anchors, classes].")
    anchors: str = Field(
        pattern=ENTRY_PATTERN, description="module:callable returning the anchors as an [anchors, 4] array of "
                                           "xyxy boxes in input pixels (the spec's folder is importable).")
    weights: list[PositiveFloat] = Field(
        [10.0, 10.0, 5.0, 5.0], min_length=4, max_length=4, description="Box coder weights (wx, wy, ww, wh).")
    score_threshold: float = Field(0.01, ge=0, lt=1, description="Drop detections scoring below this.")
    iou_threshold: float = Field(0.55, gt=0, le=1, description="NMS IoU threshold (per class).")
    candidates_per_class: PositiveInt = Field(300, description="Best-scoring candidates per class kept before NMS.")
    max_detections: PositiveInt = Field(300, description="Detections kept per image after NMS.")
    background: int | None = Field(0, ge=0, description="Class index of the background logit (dropped); unset: none.")


class DetectionSpec(StrictModel):
    """What a detection model returns and where its post-processing runs."""

    postprocess: Literal["model", "host"] = Field(
        "model", description="model: the model returns boxes, scores and labels per image (batch 1); host: the "
                             "model returns raw head outputs and edgeship decodes them ([detection.decode]).")
    boxes: str = Field("boxes", description="Output holding the boxes, [detections, 4] (postprocess = model).")
    scores: str = Field("scores", description="Output holding the scores, [detections].")
    labels: str = Field("labels", description="Output holding the class indices, [detections].")
    box_format: BoxFormat = Field("xyxy", description="Box layout of the boxes output.")
    iou_threshold: float = Field(0.5, gt=0, le=1, description="IoU for a match in the metrics (mAP@0.5: 0.5).")
    score_threshold: float | None = Field(
        None, ge=0, description="Detections scoring below this are left out of the metrics; unset: none are.")
    decode: DecodeSpec | None = Field(None, description="How raw outputs are decoded (postprocess = host).")


class SegmentationSpec(StrictModel):
    """Which output holds per-pixel class logits and which label value is ignored."""

    output: str | None = Field(None, description="Output holding [N, classes, H, W] logits; unset: the first.")
    ignore_index: int | None = Field(255, description="Label value left out of the metrics against labels.")


class EmbeddingSpec(StrictModel):
    """Which output is the embedding compared per sample by cosine."""

    output: str | None = Field(None, description="Output holding the embeddings; unset: the first.")


class ModelSpec(StrictModel):
    """A model to build, as DESIGN.md's model spec contract describes."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", description="Model name; used in output paths.")
    entry: str = Field(pattern=ENTRY_PATTERN, description="module:callable returning an nn.Module.")
    entry_kwargs: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments for the entry callable.")
    weights: PathField | None = Field(None, description="state_dict checkpoint, loaded with weights_only=True.")
    seed: StrictInt = Field(
        0, ge=0, lt=2**32, description="torch, numpy and random are seeded with it before the entry is called, so "
                                       "a model without weights gets the same random weights in every process.")
    inputs: list[InputSpec] = Field(min_length=1, description="The model's inputs, in call order.")
    labels: PathField | None = Field(None, description="Class names, one a line.")
    task: Task = Field(
        "classification", description="How outputs are judged against the float model: classification (top-1, "
                                      "agreement, SQNR), detection (matched boxes, mAP@0.5), segmentation (mIoU of "
                                      "argmax masks), embedding (per-sample cosine), generic (SQNR and cosine of "
                                      "every output).")
    detection: DetectionSpec | None = Field(None, description="Detection outputs and post-processing.")
    segmentation: SegmentationSpec | None = Field(None, description="Segmentation output.")
    embedding: EmbeddingSpec | None = Field(None, description="Embedding output.")
    data: DataSpec = Field(default_factory=DataSpec, description="Calibration and evaluation data.")
    preprocess: PreprocessSpec = Field(default_factory=PreprocessSpec, description="Image preprocessing.")
    base_dir: PathField = Field(
        default_factory=Path.cwd, exclude=True, description="Folder the entry module is imported from.")
    source: str = Field("", exclude=True, description="Where the spec came from, for messages.")

    _exists = field_validator("weights")(existing_file)
    _text = field_validator("labels")(text_file)
    _finite = field_validator("entry_kwargs")(finite)

    @model_validator(mode="after")
    def _task_sections(self) -> ModelSpec:
        grouped = group_problems(self.inputs)
        if grouped:
            raise ValueError("; ".join(grouped))
        if self.data.sizes is not None and not any(i.dynamic for i in self.inputs):
            raise ValueError(f"[data] sizes = {self.data.sizes!r} gives samples at the min and max sizes, but no "
                             "input has dynamic dimensions; remove it, or add `dynamic` to an input")
        for section in ("detection", "segmentation", "embedding"):
            if getattr(self, section) is not None and self.task != section:
                raise ValueError(f"[{section}] is given but task is {self.task!r}; set task = \"{section}\" "
                                 f"or remove [{section}]")
        if self.task == "detection":
            det = self.detection or DetectionSpec()
            if det.postprocess == "host" and det.decode is None:
                raise ValueError("[detection] postprocess = \"host\" needs [detection.decode] (which outputs hold "
                                 "the box regression and the class logits, and the anchors)")
            if det.postprocess == "model" and det.decode is not None:
                raise ValueError("[detection.decode] is given but postprocess is \"model\" (the model decodes "
                                 "itself); set postprocess = \"host\" or remove [detection.decode]")
            if det.postprocess == "model" and self.inputs[0].shape[0] != 1:
                raise ValueError(f"task detection with postprocess = \"model\" returns detections for one image; "
                                 f"the first input's batch must be 1, not {self.inputs[0].shape[0]}")
        return self

    def task_settings(self) -> DetectionSpec | SegmentationSpec | EmbeddingSpec | None:
        """The task's section, with its defaults when the spec leaves it out (None: no section)."""
        defaults = {"detection": DetectionSpec, "segmentation": SegmentationSpec, "embedding": EmbeddingSpec}
        if self.task not in defaults:
            return None
        return getattr(self, self.task) or defaults[self.task]()

    def label_names(self) -> list[str] | None:
        """Class names from the labels file, or None (ModelSpecError when it cannot be read as text)."""
        if self.labels is None:
            return None
        try:
            text = self.labels.read_bytes().decode("utf-8-sig")
        except OSError as e:
            raise ModelSpecError(f"{self.source or 'model spec'}: labels {self.labels}: cannot be read: "
                                 f"{e.strerror or e}") from None
        except UnicodeDecodeError as e:
            raise ModelSpecError(f"{self.source or 'model spec'}: labels {self.labels}: not UTF-8 text "
                                 f"(byte offset {e.start})") from None
        return [line.strip() for line in text.splitlines() if line.strip()]


def parse_input_shape(text: str) -> list[int]:
    """``"1,3,224,224"`` (or ``1x3x224x224``) -> ``[1, 3, 224, 224]``; ModelSpecError naming the
    first element that is not a positive integer."""
    parts = [p.strip() for p in text.split("," if "," in text else "x")]
    for i, part in enumerate(parts):
        digits = part.isascii() and part.isdigit()
        if digits and len(part) <= 18 and int(part) > 0:
            continue
        what = ("is empty" if not part else f"({_cut(part)}) is too large" if digits and len(part) > 18
                else f"({_cut(part)!r}) is not a positive integer")
        raise ModelSpecError(f"--input-shape {_cut(text)!r}: element {i + 1} {what}; expected positive integers "
                             "separated by commas, e.g. 1,3,224,224")
    return [int(p) for p in parts]


def _cut(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def load_spec(spec: str | Path, input_shape: str | None = None) -> ModelSpec:
    """A ModelSpec from a ``model.toml`` path or ``module:callable`` (+ ``--input-shape``)."""
    text = str(spec)
    if text.endswith(".toml") or Path(text).is_file():
        path = Path(text)
        data = read_toml(path, ModelSpecError)
        ctx = {"base_dir": path.parent}
        parsed = validate(data, ModelSpec, str(path), ModelSpecError, context=ctx)
        parsed.base_dir = path.parent.resolve()
        parsed.source = str(path)
        return parsed
    if ":" not in text:
        raise ModelSpecError(f"--model {text!r}: expected a model.toml file or module:callable")
    if input_shape is None:
        raise ModelSpecError(f"--model {text}: a module:callable spec needs --input-shape, e.g. 1,3,224,224")
    data = {"name": text.split(":")[-1].split(".")[-1], "entry": text,
            "inputs": [{"name": "input", "shape": parse_input_shape(input_shape)}]}
    parsed = validate(data, ModelSpec, f"--model {text}", ModelSpecError)
    parsed.source = f"--model {text}"
    return parsed


def demo_spec_path() -> Path:
    """The built-in demo model's spec."""
    return Path(__file__).resolve().parent / "demo" / "model.toml"
