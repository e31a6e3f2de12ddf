"""Model specs: which module to build, its weights, inputs, labels, data and preprocessing.

A spec is a ``model.toml`` (paths relative to its folder) or ``module:callable`` with
``--input-shape``. Loading a spec reads and checks the file only; it imports nothing.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from edgeship.config import ENTRY_PATTERN, StrictModel, data_source, existing_path, read_toml, validate
from edgeship.errors import ModelSpecError

DType = Literal["float32", "float16", "int64", "int32", "uint8", "bool"]


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
        return shape


class DataSpec(StrictModel):
    """Where the model's calibration and evaluation data live."""

    calibration: str | None = Field(None, description=".npz (x, optional y), image folder, or module:callable.")
    evaluation: str | None = Field(None, description="Same forms; y (labels) gives top-1 accuracy.")

    _exists = field_validator("calibration", "evaluation")(data_source)


class PreprocessSpec(StrictModel):
    """How images from an image folder become model inputs."""

    resize: list[int] | None = Field(None, min_length=2, max_length=2, description="Resize to [height, width] first.")
    crop: list[int] | None = Field(
        None, min_length=2, max_length=2, description="Center crop to [height, width] after resizing.")
    mean: list[float] | None = Field(None, description="Per-channel mean subtracted after scaling to [0, 1].")
    std: list[float] | None = Field(None, description="Per-channel standard deviation divided by.")
    layout: Literal["NCHW", "NHWC"] = Field("NCHW", description="Memory layout the model expects.")
    color: Literal["RGB", "L"] = Field("RGB", description="RGB (3 channels) or L (grayscale, 1 channel).")


class ModelSpec(StrictModel):
    """A model to build, as DESIGN.md's model spec contract describes."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", description="Model name; used in output paths.")
    entry: str = Field(pattern=ENTRY_PATTERN, description="module:callable returning an nn.Module.")
    entry_kwargs: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments for the entry callable.")
    weights: Path | None = Field(None, description="state_dict checkpoint, loaded with weights_only=True.")
    inputs: list[InputSpec] = Field(min_length=1, description="The model's inputs, in call order.")
    labels: Path | None = Field(None, description="Class names, one a line.")
    data: DataSpec = Field(default_factory=DataSpec, description="Calibration and evaluation data.")
    preprocess: PreprocessSpec = Field(default_factory=PreprocessSpec, description="Image preprocessing.")
    base_dir: Path = Field(
        default_factory=Path.cwd, exclude=True, description="Folder the entry module is imported from.")
    source: str = Field("", exclude=True, description="Where the spec came from, for messages.")

    _exists = field_validator("weights", "labels")(existing_path)

    def label_names(self) -> list[str] | None:
        """Class names from the labels file, or None."""
        if self.labels is None:
            return None
        return [line.strip() for line in self.labels.read_text().splitlines() if line.strip()]


def parse_input_shape(text: str) -> list[int]:
    """``"1,3,224,224"`` -> ``[1, 3, 224, 224]`` (ModelSpecError on anything else)."""
    try:
        shape = [int(p) for p in text.replace("x", ",").split(",") if p.strip()]
    except ValueError:
        shape = []
    if not shape or any(d < 1 for d in shape):
        raise ModelSpecError(f"--input-shape {text!r}: expected positive integers separated by commas, "
                             "e.g. 1,3,224,224")
    return shape


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
