"""results.json (schema 1): the models that write and read it.

The field names are DESIGN.md's contract; fields added here extend it. A measurement that could
not be taken is None with the reason in ``notes``, never a made-up number.
"""
from __future__ import annotations

import json
import math
import platform
import re
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from edgeship.fsutil import atomic_write_text

# The float model's row: the first of every build (DESIGN.md: backend `eager`), every comparison's
# baseline. Its backend id and its runtime id are this one name; ``VariantResult.is_reference`` and
# ``devices.base.Job.is_reference`` are the only places that compare with it.
REFERENCE = "eager"

SCHEMA = 1
REUSED_FROM_CACHE = "reused from the stage cache"   # how the note of a latency row another build measured begins
REUSED_BY_RESUME = "reused by build --resume"      # ... of a row kept from the folder's previous results.json
# The distributions every build's artifacts depend on; each backend adds its own (its spec's toolchain).
TOOLCHAIN_DISTS = ("torch", "torchvision", "numpy", "edgeship")
PRECISIONS = ("fp32", "fp16", "bf16", "int8", "w8")  # DESIGN.md's precision ids (profile.models.Precision)
BACKEND_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # a backend's name, built in or a package's


class ResultModel(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class OutputAccuracy(ResultModel):
    """One output of a variant against the same output of the float model."""

    name: str
    sqnr_db: float | None = Field(None, description="None when identical (infinite), or not element-wise comparable.")
    cosine: float | None = None
    max_abs_err: float | None = None
    equal: float | None = Field(None, description="Share of equal elements (integer and boolean outputs).")
    non_finite: int | None = None
    note: str | None = Field(None, description="Why figures are null.")


class TaskAccuracy(ResultModel):
    """The model spec's task's metrics (detection, segmentation, embedding), e.g. map50_vs_float."""

    task: str
    values: dict[str, float | None] = Field(default_factory=dict)
    notes: dict[str, str] = Field(default_factory=dict, description="Why a value is null, keyed by its name.")


class Accuracy(ResultModel):
    """Outputs of one variant against the float model's, on the evaluation samples. The top-level
    figures are those of the task's primary output (the first, or the one the spec names);
    ``outputs`` has every output's, ``task`` the task's own metrics."""

    samples: int
    top1: float | None = None
    top1_drop: float | None = Field(None, description="Float top-1 minus this top-1, in points.")
    agreement: float | None = None
    sqnr_db: float | None = Field(None, description="None when outputs equal the float ones (infinite).")
    cosine: float | None = None
    max_abs_err: float | None = None
    non_finite: int | None = Field(
        None, description="How many output values were NaN or inf; when > 0 every figure above is null "
                          "and the variant fails its check.")
    informative: bool = Field(
        True, description="False when the float model's outputs carry no information to compare against "
                          "(non-finite, all zero, constant, or constant evaluation inputs): the figures "
                          "prove nothing and reports show 'not informative'.")
    uninformative_reason: str | None = Field(None, description="Why informative is false.")
    output: str | None = Field(None, description="Name of the output the top-level figures are of.")
    outputs: list[OutputAccuracy] = Field(default_factory=list, description="Every output's figures, by name.")
    task: TaskAccuracy | None = Field(None, description="The task's metrics; None for classification and generic.")


class CpuFacts(ResultModel):
    """The CPU a row ran on, as the device runner found it (``devices/cpu.py``)."""

    model: str | None = Field(None, description="The CPU's name (x86: model name; ARM: board and core types).")
    arch: str | None = Field(None, description="Machine architecture, e.g. x86_64, aarch64, arm64.")
    flags: list[str] = Field(
        default_factory=list, description="Instruction-set flags that decide int8 and bf16 kernels (x86: avx2, "
                                          "avx512_vnni, avx_vnni, amx_int8, ...; ARM: neon, dotprod, i8mm, sve, ...).")
    source: str = Field("unknown", description="Where they were read: /proc/cpuinfo, sysctl, or unknown.")

    @classmethod
    def from_document(cls, doc: object) -> CpuFacts | None:
        """The facts in a runner's result (its ``cpu``), or None when it has none (a native program)."""
        if not isinstance(doc, dict):
            return None
        return cls(model=doc.get("model"), arch=doc.get("arch"), flags=list(doc.get("flags") or []),
                   source=doc.get("source") or "unknown")


class DeviceAgreement(ResultModel):
    """How closely one device computes an artifact's outputs against another device."""

    device: str = Field(description="The device compared against (the build's first that returned outputs).")
    equal: bool = Field(description="Every output bit for bit the same.")
    sqnr_db: float | None = Field(None, description="SQNR of these outputs against that device's, in dB; None when "
                                                    "equal (infinite) or the outputs cannot be paired.")
    max_abs_diff: float | None = Field(None, description="Largest absolute difference; None when not paired.")


class Latency(ResultModel):
    """One variant timed on one device."""

    device: str
    runtime: str
    threads: int | None = None
    warmup: int
    iterations: int
    size: str | None = Field(
        None, description="A model with dynamic dimensions: the input size this row ran at (min, max); None: "
                          "the opt size, the row the variant's accuracy and reports read.")
    p50_ms: float | None = None
    p90_ms: float | None = None
    p99_ms: float | None = None
    mean_ms: float | None = None
    std_ms: float | None = None
    cv: float | None = Field(None, description="Coefficient of variation (std / mean) of the timed iterations.")
    load_ms: float | None = Field(
        None, description="The artifact's load time (session or program load, a compile at load included), after "
                          "the runtime's import; None when not measured (notes say why).")
    peak_rss_mb: float | None = Field(
        None, description="Peak resident memory of the runner process over the whole job: the interpreter, numpy, "
                          "the inputs and the evaluation pass's outputs included.")
    import_ms: float | None = Field(
        None, description="The runtime's import time in the fresh runner process, before the load (cold start is "
                          "import_ms + load_ms + first_inference_ms); None when not measured (notes say why).")
    first_inference_ms: float | None = Field(
        None, description="The first inference after the load, on the first batch, timed on its own: the first "
                          "warmup run, so the timed iterations are unchanged (with no warmup, the first timed "
                          "one); None when not measured (notes say why).")
    rss_over_baseline_mb: float | None = Field(
        None, description="Peak resident memory of the runner process from just before the runtime's import to the "
                          "end of the timed runs, above its resident memory then: what the runtime, the loaded "
                          "artifact and its inferences added (not the interpreter, numpy or the inputs, nor the "
                          "evaluation pass). MiB. None when not measured (notes say why).")
    measured_at: str | None = None
    node: str | None = Field(
        None, description="Where the measurement ran when it ran through Ray (edgeship matrix on a cluster): the "
                          "node's host and Ray node id; None for a build measured from one host.")
    node_interval: list[float] | None = Field(
        None, description="Through Ray: when the job held the device there, [start, end] in seconds since the "
                          "epoch by the node's clock (the device's time in a cluster run); None otherwise.")
    cv_above_max: bool | None = Field(
        None, description="True when cv exceeds the profile's latency.max_cv (an unsteady measurement); "
                          "None when not measured.")
    other_cpu_load: float | None = Field(
        None, description="CPUs' worth of work other processes did on the device while the iterations were "
                          "timed (from /proc/stat on Linux devices; None where the runner cannot read it).")
    contended: bool | None = Field(
        None, description="True when other_cpu_load was 0.5 or more: the timings were shared with other work "
                          "and say little about the artifact alone; None when not known.")
    attempts: int | None = Field(
        None, description="How many times the job was started (retries after a dropped connection).")
    accuracy: Accuracy | None = Field(
        None, description="Accuracy of the outputs this device returned; None when it returned none.")
    inputs_sha256: str | None = Field(
        None, description="sha256 of the evaluation inputs the device ran (build --resume compares it).")
    run_error: str | None = Field(
        None, description="The runtime's error when the artifact failed to load or run on this device (the "
                          "variant fails); None when it ran, or when the device itself could not be reached.")
    output_mismatch: list[str] = Field(
        default_factory=list, description="How the outputs this device returned differ from the float model's "
                                          "(count, shape, dtype); the variant fails when any does.")
    reference_sha256: str | None = Field(
        None, description="sha256 of the float model's outputs and the labels this row's accuracy was computed "
                          "against (build --resume compares it).")
    cpu: CpuFacts | None = Field(
        None, description="The CPU this row ran on (model, architecture, ISA flags); None when the device did not "
                          "say (an adb device's native benchmark program, a row from an older build).")
    vs_first_device: DeviceAgreement | None = Field(
        None, description="This device's outputs against the first device's outputs of the same artifact at the "
                          "same size (two kernel families computing one file); None on the first device or where "
                          "either returned no outputs.")
    emulated: str | None = Field(
        None, description="The emulator the device ran under (qemu-user and its CPU model): outputs and accuracy "
                          "are that CPU's kernels', the times are the emulator's, never the CPU's, so no speed-up, "
                          "selection, gate or comparison uses them; None on a real device.")
    notes: list[str] = Field(default_factory=list)

    @property
    def timed(self) -> bool:
        """Whether this row's times are the device's own (measured, not emulated)."""
        return self.p50_ms is not None and self.emulated is None

    def unmeasured_why(self, key: str) -> str | None:
        """Why field ``key`` is null, from the runner's note naming it (``protocol.not_measured``), or None."""
        for note in self.notes:
            names, sep, why = note.partition(" not measured: ")
            if sep and key in names.split(", "):
                return f"{key} not measured on {self.device}: {why}"
        return None


class Lowering(ResultModel):
    seconds: float | None = Field(None, description="Seconds spent lowering (capture not included).")
    reused: bool = Field(False, description="The artifact came from the stage cache: seconds are those of the "
                                            "build that lowered it, not of this one.")
    capture: str | None = Field(None, description="Capture method that produced the artifact.")
    capture_seconds: float | None = Field(None, description="Seconds the capture took (shared by variants using it).")
    notes: list[str] = Field(default_factory=list)
    details: dict[str, Any] = Field(default_factory=dict, description="Backend facts: ops, delegation, versions.")


class GateResult(ResultModel):
    passed: bool = True
    failures: list[str] = Field(default_factory=list)
    # False: no device of the build can run the artifact by design (a GPU runtime without its GPU,
    # an OS's own runtime off that OS): built and checked, not measured; ``passed`` then only says nothing failed.
    checked: bool = True


class VariantResult(ResultModel):
    """One row of results.json: one artifact (or the eager float model)."""

    @property
    def is_reference(self) -> bool:
        """The float model's row (the baseline), not an artifact."""
        return self.backend == REFERENCE

    name: str
    backend: str
    precision: str
    quantization: Literal["none", "dynamic", "static"] = "none"
    file: str | None = None
    size_bytes: int | None = None
    sha256: str | None = None
    lowering: Lowering = Field(default_factory=Lowering)
    accuracy: Accuracy | None = None
    latency: list[Latency] = Field(default_factory=list)
    gates: GateResult = Field(default_factory=GateResult)
    error: str | None = Field(None, description="Why the variant has no artifact, when it failed.")
    notes: list[str] = Field(default_factory=list)
    selected: bool = Field(False, description="True for the one variant the profile's [selection] picked.")

    def p50_on(self, device: str | None) -> float | None:
        """The p50 measured on ``device`` (its first row), None when there is none or it is emulated."""
        lat = next((lat for lat in self.latency if lat.device == device), None)
        return lat.p50_ms if lat is not None and lat.timed else None

    def untimed_why(self, device: str | None) -> str:
        """Why :meth:`p50_on` gives nothing for ``device``."""
        lat = next((lat for lat in self.latency if lat.device == device), None)
        if lat is not None and lat.emulated is not None:
            return f"{device} is emulated ({lat.emulated}): its times are not the CPU's"
        return f"no p50 measured on {device or 'any device'}"


class SelectionCandidate(ResultModel):
    """One variant as the selection judged it."""

    name: str
    p50_ms: float | None = Field(None, description="p50 on the deciding device; None when not measured there.")
    eligible: bool = Field(description="Measured there, gates passed and inside the budget.")
    reason: str | None = Field(None, description="Why it is not eligible.")


class Selection(ResultModel):
    """Which variant the profile's [selection] picked, and why (the budget and every candidate)."""

    policy: str
    budget: str = Field(description="The accuracy budget as applied, e.g. 'top1_drop <= 1 point'.")
    device: str | None = Field(None, description="Device whose p50 decided.")
    selected: str | None = Field(None, description="The picked variant; None when no variant is inside the budget.")
    candidates: list[SelectionCandidate] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class ModelInfo(ResultModel):
    name: str
    entry: str
    weights_sha256: str | None = None
    inputs: list[dict[str, Any]]
    params: int
    flops: int | None = None
    seed: int | None = Field(
        None, description="Seed of torch, numpy and random when the entry callable built the module (the "
                          "model spec's seed): what a model without weights file is initialised from.")
    outputs: list[dict[str, Any]] = Field(
        default_factory=list, description="The float model's outputs, flattened in order: name, shape (batch "
                                          "first; null where the length varies by sample), dtype, ragged.")
    task: str = Field("classification", description="The model spec's task: how outputs were judged.")


class Results(ResultModel):
    """The whole results.json document."""

    schema_version: int = Field(SCHEMA, alias="schema")
    target: str
    created: str
    model: ModelInfo
    toolchain: dict[str, str]
    variants: list[VariantResult]
    selection: Selection | None = Field(None, description="The [selection] outcome; None when the profile has none.")
    build_key: str | None = Field(None, description="Hash of everything the build read: an unchanged re-build "
                                                    "with the same key reuses this output (stage cache).")
    requested_variants: list[str] | None = Field(
        None, description="The variants the build was asked for (build --variant), in the profile's order; absent "
                          "(null): every variant of the profile. Only these (and the eager reference) were lowered and "
                          "measured and decide the build's exit status; a row of another variant was kept from the "
                          "folder's earlier build, its artifact and measurements unchanged (its notes say so).")
    notes: list[str] = Field(default_factory=list, description="Build-level notes: requested devices that "
                                                               "measured nothing, values written as null, the "
                                                               "variants a build --variant left out and why.")

    def dump(self) -> str:
        """Strict JSON: a non-finite number (not JSON) is written as null with a note beside it.
        ``requested_variants`` only for a build --variant: a full build's document is as it was before."""
        doc = self.model_dump(mode="json", by_alias=True, exclude={"requested_variants"} if self.requested_variants
                              is None else set())
        return json.dumps(finite_document(doc), indent=2, allow_nan=False) + "\n"

    def write(self, path: Path) -> None:
        """Write atomically, so a reader never sees a half-written file."""
        atomic_write_text(path, self.dump())

    @classmethod
    def read(cls, path: Path) -> Results:
        return cls.model_validate_json(Path(path).read_text())

    def variant(self, name: str) -> VariantResult:
        return next(v for v in self.variants if v.name == name)

    def built(self, row: VariantResult) -> bool:
        """Whether this build made and measured ``row`` (not kept from an earlier build by a build --variant)."""
        return self.requested_variants is None or row.is_reference or row.name in self.requested_variants


def id_problems(results: Results) -> list[str]:
    """Where a results.json read from a file holds something else than an id or a time (a newline and
    Markdown in ``backend``, say): ``key value: what is allowed``, for each. Free text (names, notes)
    is not checked here: every report escapes it."""
    problems = []
    try:
        datetime.fromisoformat(results.created)
    except ValueError:
        problems.append(f"created {json.dumps(results.created)}: an ISO 8601 time, e.g. 2026-11-29T18:00:00Z")
    for i, v in enumerate(results.variants):
        if not BACKEND_ID.fullmatch(v.backend):
            problems.append(f"variants.{i}.backend {json.dumps(v.backend)}: a backend id (letters, digits, '.', '_', "
                            f"'-', such as {REFERENCE})")
        if v.precision not in PRECISIONS:
            problems.append(f"variants.{i}.precision {json.dumps(v.precision)}: one of {', '.join(PRECISIONS)}")
    return problems


def finite_document(doc: object, path: str = "", notes: list[str] | None = None) -> object:
    """``doc`` (a fresh dump, changed in place) with every NaN or inf replaced by None, and a note in
    the ``notes`` of the nearest enclosing object that has them, naming the field and the value."""
    if isinstance(doc, dict):
        notes = doc["notes"] if isinstance(doc.get("notes"), list) else notes
        for key, value in doc.items():
            doc[key] = finite_document(value, f"{path}.{key}" if path else str(key), notes)
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            doc[i] = finite_document(value, f"{path}[{i}]", notes)
    elif isinstance(doc, float) and not math.isfinite(doc):
        if notes is not None:
            notes.append(f"{path} was {doc} (not a finite number): written as null")
        return None
    return doc


def now_utc() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def toolchain_versions(backend_dists: Iterable[str] = (), others: Mapping[str, str] | None = None) -> dict[str, str]:
    """Python and the installed versions of the libraries that shape artifacts: TOOLCHAIN_DISTS and
    ``backend_dists`` (the backends', from the registry's ``toolchain_dists``), then ``others``: the
    versions of what is not a Python distribution (the registry's ``toolchain_others``)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for dist in dict.fromkeys((*TOOLCHAIN_DISTS, *backend_dists)):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            continue
    return out | dict(others or {})
