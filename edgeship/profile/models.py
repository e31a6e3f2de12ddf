"""The target profile's models (``targets/*.toml``): what to build for a target and how to check it.

A profile lists variants (one artifact each: backend, precision, options), the capture methods in
fallback order, validation gates and latency settings. ``edgeship.profile.load`` reads and checks
a whole profile; these models only hold it.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from edgeship.backends.registry import SPECS
from edgeship.config import MAX_UNCOUNTED, PathField, StrictModel, data_source, text_file
from edgeship.errors import did_you_mean, one_of
from edgeship.quantize.settings import CalibrationSettings, Candidates, QuantizationSettings, SelectionSettings

Precision = Literal["fp32", "fp16", "bf16", "int8", "w8"]
CaptureMethod = Literal["export", "trace", "script"]
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
# Upper bounds of numeric settings: generous for any real use, small enough that no timer, sleep or
# count overflows (1e10 s overflowed the measure step's timers; signal.alarm takes at most 4.29e9).
DAY_S = 86_400.0
MAX_SEED = 2**32 - 1        # numpy's and torch's seeds take it; negative seeds they refuse
MAX_SAMPLES = 1_000_000
MAX_DB = 1000.0             # float64 rounding reads ~320 dB; 1000: "identical outputs only" (their SQNR is null)


class CaptureSettings(StrictModel):
    """How the model is captured into a graph."""

    methods: list[CaptureMethod] = Field(
        default=["export", "trace", "script"], min_length=1,
        description="Capture methods in fallback order; each backend uses those it accepts.")


class LatencySettings(StrictModel):
    """How latency is measured on every device."""

    warmup: int = Field(10, ge=0, le=1_000_000, description="Untimed inferences before timing starts.")
    iterations: int = Field(100, ge=1, le=100_000_000, description="Timed inferences; percentiles come from these.")
    threads: int | None = Field(None, ge=1, le=1024, description="Runtime threads; unset: the device's core count.")
    timeout_s: float = Field(600.0, gt=0, le=DAY_S,
                             description="Seconds one measurement may take before it is stopped.")
    max_cv: float | None = Field(
        0.15, gt=0, le=10, description="Flag a measurement whose coefficient of variation (std / mean) is above this; "
                                "unset: never flag.")
    sizes: Literal["opt", "all"] = Field(
        "opt", description="For a model with dynamic dimensions: time at the opt size only (the min and max sizes "
                           "are run for accuracy), or at min, opt and max.")
    cooldown_s: float = Field(
        0.0, ge=0, le=3600, description="Seconds each device rests between two measurements (lets a phone or board "
                                        "cool down).")


class Limits(StrictModel):
    """Watchdogs on the build's stages (``[limits]``): a stage still running at its limit is stopped and the build
    with it, naming the stage and its key (exit 2 when it was stuck in the model's or a data source's code, else
    3); the build folder keeps the last build. Each limit grows with the model once its parameter count is known
    (from its load on): by ``per_million_params`` of itself per million parameters."""

    capture_s: float = Field(
        300.0, gt=0, le=DAY_S, description="Seconds each capture method (torch.export, jit.trace, jit.script) may "
                                           "take, loading the model included when it happens there.")
    reference_s: float = Field(
        300.0, gt=0, le=DAY_S, description="Seconds the evaluation data, loading the model and its float outputs may "
                                           "go without progress (a batch read or evaluated, the model loaded).")
    calibration_s: float = Field(
        300.0, gt=0, le=DAY_S, description="Seconds reading the calibration data may go without a batch read.")
    lowering_s: float = Field(
        300.0, gt=0, le=DAY_S, description="Seconds each variant's lowering may take after its capture: quantization "
                                           "(calibration runs included), conversion, compilation, the size checks.")
    per_million_params: float = Field(
        0.05, ge=0, le=10, description="Each limit grows by this share of itself per million model parameters (0.05: "
                                       "resnet18's 11.7 M get 1.6 times the limit, 20 M twice); 0: fixed limits.")


class Gates(StrictModel):
    """Validation gates. A variant that fails one is marked and the build exits 3."""

    min_sqnr_db: float | None = Field(None, ge=-MAX_DB, le=MAX_DB,
                                      description="Lowest SQNR (dB) of outputs against the float model.")
    max_top1_drop: float | None = Field(None, ge=0, le=100, description="Largest top-1 drop against float, in points.")
    min_agreement: float | None = Field(
        None, ge=0, le=1, description="Lowest share of samples whose top-1 equals the float model's.")
    min_cosine: float | None = Field(
        None, ge=-1, le=1, description="Lowest cosine similarity of outputs to float (task embedding: the mean of "
                                       "the per-sample cosines).")
    min_map50_vs_float: float | None = Field(
        None, ge=0, le=1, description="Task detection: lowest mAP@0.5 with the float model's detections as truth.")
    min_recall_vs_float: float | None = Field(
        None, ge=0, le=1, description="Task detection: lowest share of the float model's detections matched.")
    min_miou_vs_float: float | None = Field(
        None, ge=0, le=1, description="Task segmentation: lowest mIoU of argmax masks against the float model's.")
    min_pixel_agreement: float | None = Field(
        None, ge=0, le=1, description="Task segmentation: lowest share of pixels whose class equals the float's.")
    min_cosine_worst: float | None = Field(
        None, ge=-1, le=1, description="Task embedding: lowest cosine of any one sample's embedding to the float's.")
    min_recall_at_1_vs_float: float | None = Field(
        None, ge=0, le=1, description="Task embedding: lowest share of evaluation samples whose nearest other sample "
                                      "is the one the float model finds (recall@1).")
    min_spearman_vs_float: float | None = Field(
        None, ge=-1, le=1, description="Task embedding: lowest Spearman rank correlation of all pairwise "
                                       "similarities with the float model's.")
    max_p50_ms: float | None = Field(None, gt=0, le=DAY_S * 1000,
                                     description="Highest p50 latency (ms) on any device measured.")

    def merged(self, override: Gates | None) -> Gates:
        """These gates with every field the override sets replaced."""
        if override is None:
            return self
        return self.model_copy(update=override.model_dump(exclude_unset=True))


class EvaluationSettings(StrictModel):
    """Which samples accuracy is measured on."""

    samples: int | None = Field(
        None, ge=1, le=MAX_SAMPLES, description="Use at most this many evaluation samples (a module:callable source is "
                                                "read only that far); unset: all (a callable: at most "
                                                f"{MAX_UNCOUNTED:,}).")
    random_samples: int = Field(
        32, ge=1, le=MAX_SAMPLES, description="Seeded random inputs used when the model has no evaluation data.")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Seed for sampling and for random inputs.")


class DataOverride(StrictModel):
    """Data the profile uses instead of the model spec's own."""

    calibration: str | None = Field(
        None, description="Calibration data (.npz, image folder or module:callable) for this target.")
    evaluation: str | None = Field(
        None, description="Evaluation data (.npz, image folder or module:callable) for this target.")

    _exists = field_validator("calibration", "evaluation")(data_source)


class Variant(StrictModel):
    """One artifact: a backend, a precision and the backend's options."""

    name: str = Field(pattern=NAME_PATTERN, description="Unique name; the artifact's folder.")
    backend: str = Field(description=f"Backend id, {one_of(SPECS)}.")
    precision: Precision = Field(
        "fp32", description="fp32, fp16, bf16, int8 (weights and activations) or w8 (weights).")
    capture: list[CaptureMethod] | None = Field(
        None, min_length=1, description="Capture fallback order for this variant; unset: the profile's.")
    options: dict[str, Any] = Field(
        default_factory=dict, description="Backend options, checked against the backend's own schema.")
    gates: Gates | None = Field(None, description="Gates for this variant, overriding the profile's field by field.")
    quantization: QuantizationSettings | None = Field(
        None, description="How an int8 variant is quantized; unset: static, the backend's default method.")
    candidates: Candidates | None = Field(
        None, description="int8 settings to try; each combination becomes one variant (see [selection]).")

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        if value not in SPECS:
            raise ValueError(f"unknown backend; {one_of(SPECS)}{did_you_mean(value, SPECS)}")
        return value


def _platform_backends() -> str:
    """``android (a, b), ...``: each bundle platform and the backends whose
    artifacts it takes (their ``bundle_platforms``)."""
    platforms: dict[str, list[str]] = {}
    for name, spec in sorted(SPECS.items()):
        for platform in spec.bundle_platforms:
            platforms.setdefault(platform, []).append(name)
    return ", ".join(f"{p} ({', '.join(names)})" for p, names in sorted(platforms.items()))


class BundleSettings(StrictModel):
    """App bundles written at the end of a build (``[bundle]``): one zip per platform."""

    platforms: list[Literal["android", "ios", "jetson", "web", "linux", "x86"]] = Field(
        min_length=1, description=f"Platforms to bundle for, each with the backends it takes: {_platform_backends()}.")
    variants: Literal["passing", "fastest"] | list[str] = Field(
        "passing", description="passing: every variant that passed its gates; fastest: the passing variant with the "
                               "lowest p50; or a list of variant names (bundled even when a gate failed, "
                               "with a warning).")
    fastest_on: str | None = Field(
        None, description="Device whose p50 picks the fastest variant; unset: the first device measured.")
    labels: PathField | None = Field(
        None, description="Class names, one a line, instead of the model spec's labels.")
    output: str | None = Field(None, description="What the model's output means, written to model.json; unset: "
                                                 "class scores when the labels match the output's size.")

    _exists = field_validator("labels")(text_file)


class Profile(StrictModel):
    """A target profile, as read from ``targets/NAME.toml``."""

    name: str = Field(pattern=NAME_PATTERN, description="Target name; the first folder under artifacts/.")
    description: str = Field("", description="One line on what the target is.")
    capture: CaptureSettings = Field(default_factory=CaptureSettings, description="Capture methods.")
    latency: LatencySettings = Field(default_factory=LatencySettings, description="Latency settings.")
    gates: Gates = Field(default_factory=Gates, description="Gates for every variant.")
    evaluation: EvaluationSettings = Field(default_factory=EvaluationSettings, description="Evaluation samples.")
    data: DataOverride = Field(default_factory=DataOverride, description="Data that overrides the model spec's.")
    calibration: CalibrationSettings = Field(
        default_factory=CalibrationSettings, description="Calibration samples for static int8.")
    selection: SelectionSettings | None = Field(
        None, description="Pick one variant to ship, e.g. the fastest within an accuracy budget; unset: none.")
    variants: list[Variant] = Field(min_length=1, description="The artifacts to build.")
    devices: list[str] = Field(
        default_factory=list, description="Devices (names in the --devices file) to measure on when no --device is "
                                          "given; unset: this machine.")
    bundle: BundleSettings | None = Field(None, description="App bundles to write at the end of a build; unset: none.")
    limits: Limits = Field(default_factory=Limits, description="Time limits of the build's stages (watchdogs).")
    path: PathField | None = Field(
        None, exclude=True, description="Where the profile was read from (set by the loader).")

    @model_validator(mode="after")
    def _unique_variant_names(self) -> Profile:
        seen: dict[str, int] = {}
        for i, v in enumerate(self.variants):
            if v.name in seen:
                raise ValueError(f'variants[{seen[v.name]}] and variants[{i}] are both named "{v.name}"; '
                                 "variant names must be unique")
            seen[v.name] = i
        return self

    def gates_for(self, variant: Variant) -> Gates:
        """The profile's gates with the variant's overrides applied."""
        return self.gates.merged(variant.gates)
