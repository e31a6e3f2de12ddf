"""Quantization settings in a profile, and what each backend's quantizer supports.

Precision ids (DESIGN.md) and how a variant asks for quantization:

- ``fp32``: no quantization (``"quantization": "none"`` in results.json).
- ``int8`` with ``scheme = "static"``: int8 weights and int8 activations whose ranges come from
  calibration data (``"static"``).
- ``int8`` with ``scheme = "dynamic"``: int8 weights; activations are quantized to int8 at run
  time from each batch's own range, so no calibration data is needed (``"dynamic"``). The
  arithmetic is int8, hence precision ``int8``, not ``w8``.
- ``w8`` (int8 weights, float activations and float arithmetic) is weight-only quantization; a backend
  whose ``QuantizationSupport`` does not list the scheme refuses it.

Everything here is plain pydantic, importable without torch; the profile loader checks each
variant against its backend's ``QuantizationSupport`` (``profile/checks.py``) before any model is loaded.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field, NonNegativeInt

from edgeship.config import StrictModel

Scheme = Literal["static", "dynamic"]
Method = Literal["minmax", "mean-minmax", "histogram", "percentile", "entropy"]


class QuantizationSettings(StrictModel):
    """How an int8 variant is quantized (the ``quantization`` table of a variant)."""

    scheme: Scheme = Field(
        "static", description="static: calibrated int8 activations; dynamic: activations quantized at run time.")
    method: Method | None = Field(None, description="Calibration method (static only); unset: the backend's default.")
    per_channel: bool = Field(True, description="Per-channel weight scales (else one scale per tensor).")
    percentile: float = Field(99.999, gt=50, le=100, description="Percentile kept by the percentile method.")
    samples: int | None = Field(
        None, ge=1, le=1_000_000,
        description="Calibration samples for this variant; unset: the profile's [calibration] samples.")
    seed: int | None = Field(
        None, ge=0, le=2**32 - 1,
        description="Seed for drawing the calibration samples; unset: the profile's [calibration] seed.")
    keep_float: Annotated[NonNegativeInt, Field(le=100_000)] | Literal["auto"] = Field(
        0, description="Keep this many of the most sensitive layers in float (static only); \"auto\": the "
                             "fewest, most sensitive first, that make the variant pass its accuracy gates on "
                             "calibration samples (never the evaluation set), at most a quarter of the layers.")
    operators: Literal["auto", "all", "weighted"] = Field(
        "auto", description="Operators quantized (static only): all that the backend's quantizer takes, or only "
                            "weighted layers (convolutions, matrix multiplications); auto: weighted only for a "
                            "graph with attention and layer normalization (a transformer), all otherwise.")
    sensitivity: bool = Field(
        True, description="Measure per-layer sensitivity (SQNR of each layer's quantized output) for static int8.")


class Candidates(StrictModel):
    """Values to try for an int8 variant; every combination becomes one measured candidate."""

    per_channel: list[bool] | None = Field(None, min_length=1, description="Per-channel and/or per-tensor weights.")
    method: list[Method] | None = Field(None, min_length=1, description="Calibration methods to try.")
    keep_float: list[Annotated[int, Field(ge=0, le=100_000)]] | None = Field(
        None, min_length=1, description="Numbers of most sensitive layers kept in float.")


class CalibrationSettings(StrictModel):
    """How calibration samples are drawn (the profile's ``[calibration]`` table)."""

    samples: int = Field(128, ge=1, le=1_000_000,
                         description="Calibration samples drawn (seeded) from the calibration data.")
    seed: int = Field(0, ge=0, le=2**32 - 1,
                      description="Seed for drawing the samples, and for random inputs when there is no data.")


class SelectionSettings(StrictModel):
    """Which variant to ship (the profile's ``[selection]`` table)."""

    select: Literal["fastest-within-budget"] = Field(
        description="fastest-within-budget: the lowest p50 among variants inside the budget.")
    max_top1_drop: float = Field(
        ge=0, le=100, description="Largest top-1 drop against float, in points. Without labels: "
                          "agreement >= 1 - max_top1_drop/100 instead.")
    min_sqnr_db: float | None = Field(None, ge=-1000, le=1000,
                                      description="Also require this SQNR (dB) of outputs against float.")


@dataclass(frozen=True)
class QuantizationSupport:
    """What a backend's own quantizer offers; checked against each variant at plan time."""

    schemes: tuple[str, ...]
    methods: tuple[str, ...]
    default_method: str
    engines: str  # the quantizer and kernels, for messages and notes


def scheme_of(precision: str, settings: QuantizationSettings | None) -> str:
    """results.json's ``quantization``: none | dynamic | static. w8 (weights quantized ahead of
    time, activations float) counts as static; its precision says the activations stay float."""
    if precision == "w8":
        return "static"
    if precision != "int8":
        return "none"
    return (settings or QuantizationSettings()).scheme


def needs_calibration(precision: str, settings: QuantizationSettings | None) -> bool:
    """Static int8 calibrates activation ranges; dynamic int8 and w8 need no data."""
    return precision == "int8" and scheme_of(precision, settings) == "static"
