"""Model specs: which module to build, its weights, inputs, labels, data and preprocessing.

A spec is a ``model.toml`` (paths relative to its folder) or ``module:callable`` with
``--input-shape``. Loading a spec reads and checks the file only; it imports nothing.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PositiveFloat, PositiveInt, StrictInt, field_validator

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

DType = Literal["float32", "float16", "int64", "int32", "uint8", "bool"]
MAX_ELEMENTS = 2**31 - 1  # elements in one input: what runtimes index with 32-bit integers


class InputSpec(StrictModel):
    """One model input."""

    name: str = Field(
        "input", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="Input name (ONNX input name, npz key).")
    shape: list[int] = Field(min_length=1, description="Shape with the batch dimension first, e.g. [1, 3, 224, 224].")
    dtype: DType = Field("float32", description="Element type.")

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


class DataSpec(StrictModel):
    """Where the model's calibration and evaluation data live."""

    calibration: str | None = Field(None, description=".npz (x, optional y), image folder, or module:callable.")
    evaluation: str | None = Field(None, description="Same forms; y (labels) gives top-1 accuracy.")

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
    data: DataSpec = Field(default_factory=DataSpec, description="Calibration and evaluation data.")
    preprocess: PreprocessSpec = Field(default_factory=PreprocessSpec, description="Image preprocessing.")
    base_dir: PathField = Field(
        default_factory=Path.cwd, exclude=True, description="Folder the entry module is imported from.")
    source: str = Field("", exclude=True, description="Where the spec came from, for messages.")

    _exists = field_validator("weights")(existing_file)
    _text = field_validator("labels")(text_file)
    _finite = field_validator("entry_kwargs")(finite)

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
