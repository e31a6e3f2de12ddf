"""Lowering: one artifact per variant, from the first capture method its backend can use.

A variant that cannot be captured or lowered is recorded with the reason (and a traceback in
``lowering.log`` beside where its artifact would be); the other variants still build. The build
lowers into its staging folder (``out_dir`` here), never over a validated artifact.
"""
from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from edgeship.backends.base import AccuracyBudget, Artifact, Backend, LowerRequest
from edgeship.backends.registry import BACKENDS
from edgeship.cache import Cache
from edgeship.calibration.dataset import Dataset
from edgeship.config import StrictModel
from edgeship.devices.hashing import sha256_path
from edgeship.errors import LoweringError, OutputError, WriteFailure, failure_line
from edgeship.fsutil import NO_SPACE, atomic_write_text
from edgeship.lowering.capture import CaptureFailed, Capturer
from edgeship.pipeline.watchdog import Watchdog
from edgeship.profile import Profile, Variant
from edgeship.results import now_utc


class LoweredRecord(TypedDict):
    """lowered.json: what the stage cache keeps beside a variant's folder (``Lowered.cache_record``)."""

    file: str                     # the artifact, relative to the folder
    sha256: str
    capture: str | None
    capture_seconds: float | None
    seconds: float | None
    notes: list[str]
    artifact_notes: list[str]
    details: dict[str, object]    # the artifact's backend facts
    lowered_at: str


@dataclass
class Lowered:
    """The outcome of lowering one variant."""

    variant: Variant
    backend: Backend
    options: StrictModel   # the backend's parsed Options
    artifact: Artifact | None = None
    capture: str | None = None
    capture_seconds: float | None = None
    capture_failures: list[CaptureFailed] = field(default_factory=list)
    seconds: float | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    sha256: str | None = None   # the artifact's, once known (restored entries bring theirs, checked)
    reused: bool = False        # restored from the stage cache (``seconds`` are the lowering build's)

    def artifact_sha256(self) -> str:
        """The artifact's sha256, hashed once however often it is asked for."""
        if self.sha256 is None:
            self.sha256 = sha256_path(self.artifact.path)
        return self.sha256

    def cache_record(self) -> LoweredRecord:
        """What the stage cache keeps beside the variant's folder, to restore this outcome."""
        path = self.artifact.path
        return {"file": path.name, "sha256": self.artifact_sha256(), "capture": self.capture,
                "capture_seconds": self.capture_seconds, "seconds": self.seconds, "notes": self.notes,
                "artifact_notes": self.artifact.notes, "details": self.artifact.details, "lowered_at": now_utc()}


def restored(variant: Variant, record: LoweredRecord, folder: Path) -> Lowered:
    """A variant's lowering outcome rebuilt from the stage cache (its folder already restored)."""
    backend = BACKENDS[variant.backend]
    notes = list(record["artifact_notes"]) + [f"reused from the stage cache (lowered {record['lowered_at']})"]
    return Lowered(variant, backend, backend.parse_options(variant.options),
                   artifact=Artifact(folder / record["file"], notes, record["details"]), capture=record["capture"],
                   capture_seconds=record["capture_seconds"], seconds=record["seconds"], notes=list(record["notes"]),
                   sha256=record["sha256"], reused=True)


def capture_order(profile: Profile, variant: Variant) -> list[str]:
    """The variant's capture methods in fallback order, keeping only those its backend takes."""
    backend = BACKENDS[variant.backend]
    return [m for m in (variant.capture or profile.capture.methods) if m in backend.capture_methods]


def lower_variant(profile: Profile, variant: Variant, capturer: Capturer, out_dir: Path,
                  calibration: Callable[[], Dataset] | None = None, debug: bool = False,
                  cache: Cache | None = None, cpus: list[tuple[str, dict[str, object]]] | None = None,
                  budget: AccuracyBudget | None = None, watchdog: Watchdog | None = None) -> Lowered:
    """Capture (with fallback) and lower one variant; failures become ``Lowered.error``. ``cpus``:
    the CPUs the artifact will run on (None: this machine's), for settings chosen by CPU; ``budget``:
    the variant's accuracy gates on calibration samples, for quantizers that choose by them;
    ``watchdog``: the lowering runs under ``[limits] lowering_s`` (a stall ends the build: Stalled)."""
    backend = BACKENDS[variant.backend]
    result = Lowered(variant, backend, backend.parse_options(variant.options))
    captured, result.capture_failures = capturer.first(capture_order(profile, variant),
                                                       backend.wants_dynamic_batch(result.options))
    result.notes.extend(f"capture {f} (fell back)" for f in result.capture_failures if captured)
    if captured is None:
        result.error = "capture failed: " + "; ".join(str(f) for f in result.capture_failures)
        return result
    result.capture = captured.method
    result.capture_seconds = captured.seconds
    result.notes.extend(captured.notes)
    dest = out_dir / variant.name / f"model{backend.suffix}"
    request = LowerRequest(captured, variant, result.options, dest, calibration, cache, cpus, budget)
    start = time.perf_counter()
    bounded = watchdog.bounded(f"lower {variant.name} ({variant.backend} {variant.precision})", "lowering_s") \
        if watchdog is not None else contextlib.nullcontext()
    try:
        with bounded:
            result.artifact = backend.lower(request)
    except (OutputError, WriteFailure):
        raise  # a full disk is the build's problem, not this variant's
    except Exception as e:  # a converter's failure belongs to this variant only
        if isinstance(e, OSError) and e.errno in NO_SPACE:
            raise  # a converter's own write on a full disk: the build's problem too
        if debug and not isinstance(e, LoweringError):
            raise
        # colour codes removed, the unsupported op named (the backend's converter's patterns first)
        result.error = f"lowering failed: {failure_line(e, patterns=backend.unsupported_op_patterns)}"
        atomic_write_text(dest.parent / "lowering.log", traceback.format_exc())
    result.seconds = time.perf_counter() - start
    return result
