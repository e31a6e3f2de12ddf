"""What a report shows: the builds read from results.json files, one row (:class:`Line`) per build
and variant, and why a value is "not measured".

Every number a report prints comes from the results; a number that is not there is shown as
"not measured", with the reason the results give (a variant's error, a device's note, a
latency row's notes). Nothing here computes a measurement, only ratios of measured ones.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from edgeship.errors import ReportError
from edgeship.results import (
    REUSED_BY_RESUME,
    REUSED_FROM_CACHE,
    SCHEMA,
    Accuracy,
    Latency,
    Results,
    VariantResult,
    id_problems,
)

SUPPORTED_SCHEMAS = (SCHEMA,)
# How the note of a latency row build --resume kept from the folder's previous results.json begins
# (pipeline/schedule.py's ``reusable``).


@dataclass(frozen=True)
class Shown:
    """One cell of a report: its text, and why nothing was measured when that is the case."""

    text: str
    why: str | None = None


@dataclass
class Build:
    """One results.json: its label in the report and where it came from."""

    label: str
    results: Results
    source: str


@dataclass
class Line:
    """One (build, variant) row of the report."""

    build: Build
    variant: VariantResult
    name: str

    def latency(self, device: str) -> Latency | None:
        return next((lat for lat in self.variant.latency if lat.device == device), None)

    def p50(self, device: str) -> float | None:
        """The p50 on ``device``; None when not measured or emulated (an emulator's time is no speed)."""
        return self.variant.p50_on(device)

    @property
    def task(self) -> str:
        """The model spec's task (classification, detection, ...): how this build's outputs were judged."""
        return self.build.results.model.task

    def accuracy(self, device: str | None = None) -> Accuracy | None:
        """The accuracy of the outputs ``device`` returned, else the variant's own; None when the
        outputs ``device`` returned differ from the float model's in count, shape or dtype."""
        lat = self.latency(device) if device else None
        if lat is not None and lat.output_mismatch:
            return None
        per_device = getattr(lat, "accuracy", None)
        return per_device or self.variant.accuracy


@dataclass
class Report:
    """The builds a report covers, their rows, and the devices measured on."""

    builds: list[Build]
    lines: list[Line] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, builds: list[Build]) -> Report:
        report = cls(builds)
        several = len(builds) > 1
        for b in builds:
            for v in b.results.variants:
                report.lines.append(Line(b, v, f"{b.label} · {v.name}" if several else v.name))
        report.devices = list(dict.fromkeys(lat.device for ln in report.lines for lat in ln.variant.latency))
        return report

    @property
    def title(self) -> str:
        models = list(dict.fromkeys(b.results.model.name for b in self.builds))
        targets = list(dict.fromkeys(b.results.target for b in self.builds))
        return f"{', '.join(models) or 'results'} on {', '.join(targets) or 'the results store'}"

    def eager(self, line: Line) -> Line | None:
        return next((ln for ln in self.lines if ln.build is line.build and ln.variant.is_reference), None)


def load_builds(paths: list[Path]) -> list[Build]:
    """Read results.json files (ReportError, exit 2, naming the file) and label each build."""
    results = [(_read(Path(p)), str(p)) for p in paths]
    seen: set[str] = set()
    for _, source in results:
        if source in seen:
            raise ReportError(f"{source}: given twice")
        seen.add(source)
    return [Build(label, r, source) for (r, source), label in zip(results, build_labels([r for r, _ in results]))]


def _read(path: Path) -> Results:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReportError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise ReportError(f"{path}: is a folder; give the results.json inside it") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ReportError(f"{path}: not a results.json: not JSON text ({e})") from None
    except OSError as e:
        raise ReportError(f"{path}: cannot be read: {e.strerror or e}") from None
    if not isinstance(doc, dict) or "schema" not in doc:
        raise ReportError(f"{path}: not a results.json: no top-level \"schema\" field")
    schema = doc["schema"]
    if type(schema) is not int or schema not in SUPPORTED_SCHEMAS:  # not True, not 1.0
        raise ReportError(f"{path}: results.json schema {json.dumps(schema)} is not one this edgeship reads "
                          f"(supported: {', '.join(map(str, SUPPORTED_SCHEMAS))})")
    try:
        results = Results.model_validate(doc)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise ReportError(f"{path}: not a results.json (schema 1): {where}: {first['msg']}") from None
    problems = id_problems(results)
    if problems:
        raise ReportError(f"{path}: not a results.json (schema 1): " + "; ".join(problems))
    return results


def build_labels(results: list[Results]) -> list[str]:
    """Short distinct names: the target; the model too when models differ; the time when needed."""
    labels = [r.target for r in results]
    if len({r.model.name for r in results}) > 1:
        labels = [f"{r.model.name}/{r.target}" for r in results]
    if len(set(labels)) < len(labels):
        labels = [f"{label} {r.created}" for label, r in zip(labels, results)]
    if len(set(labels)) < len(labels):
        labels = [f"{label} #{i + 1}" for i, label in enumerate(labels)]
    return labels


def reuse(lat: Latency | None) -> str | None:
    """How a latency row came to be in these results without being measured by their build: "cache"
    (another build on this machine measured it; the stage cache kept it), "resume" (the build that
    wrote the folder before measured it; build --resume kept it), None (measured by this build)."""
    notes = lat.notes if lat is not None else []
    if any(n.startswith(REUSED_FROM_CACHE) for n in notes):
        return "cache"
    return "resume" if any(n.startswith(REUSED_BY_RESUME) for n in notes) else None


def accuracy_row(variant: VariantResult, device: str | None = None) -> Latency | None:
    """The latency row whose outputs gave the accuracy shown for ``device`` (its own), or for the
    variant: the first row at the opt size with accuracy, as the pipeline takes it
    (``schedule.record_measurements``); None when no row's accuracy is the one shown."""
    own = next((lat for lat in variant.latency if lat.device == device), None) if device else None
    if own is not None and own.accuracy is not None:
        return own
    first = next((lat for lat in variant.latency if lat.accuracy is not None and lat.size is None), None)
    return first if first is not None and first.accuracy == variant.accuracy else None


def why_no_latency(line: Line, device: str) -> str:
    """Why ``line`` has no p50 on ``device``, from what its results say."""
    v = line.variant
    if v.error:
        return f"{v.name} was not built: {v.error}"
    lat = line.latency(device)
    if lat is not None and lat.emulated is not None:
        took = f" (it took {lat.p50_ms:.1f} ms a run there)" if lat.p50_ms is not None else ""
        return f"{device} is emulated ({lat.emulated}): its times are the emulator's, not the CPU's{took}"
    if lat is not None:
        return "; ".join(lat.notes) or f"the runner returned no timings for {v.name} on {device}"
    for note in v.notes:
        if note.startswith(f"{device}:"):
            return f"{v.name} on {note}"
    measured = {lat.device for ln in line.build.results.variants for lat in ln.latency}
    if device not in measured:
        return f"build {line.build.label} did not measure on {device}"
    return f"results.json holds no measurement of {v.name} on {device}"


def why_no_accuracy(line: Line) -> str:
    """Why ``line`` has no accuracy block."""
    v = line.variant
    if v.error:
        return f"{v.name} was not built: {v.error}"
    mismatched = [why_mismatch(lat) for lat in v.latency if lat.output_mismatch]
    reasons = mismatched + [n for n in v.notes if "not measured" in n] or [n for lat in v.latency for n in lat.notes]
    return "; ".join(reasons) or f"results.json holds no accuracy for {v.name}"


def why_mismatch(lat: Latency) -> str:
    """Why the outputs of one device were not compared: they differ from the float model's."""
    return f"outputs on {lat.device} differ from the float model's: {'; '.join(lat.output_mismatch)}"


def why_no_field(line: Line, key: str) -> str:
    """Why one accuracy field is null although the accuracy block exists."""
    wanted = [n for n in line.variant.notes if n.startswith(f"{key} is null")]
    return wanted[0] if wanted else f"results.json has {key} = null for {line.variant.name}"
