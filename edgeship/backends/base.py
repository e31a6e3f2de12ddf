"""The interface every backend implements, and what lowering hands back.

A backend implementation subclasses its declaration in ``backends/<name>/spec.py`` (name, suffix,
runtime, capture methods, precisions, options) and ``Backend`` (how it lowers and loads).
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from edgeship.backends.spec import BackendSpec, TargetCpu, Variant
from edgeship.cache import Cache
from edgeship.calibration.dataset import Dataset
from edgeship.config import StrictModel
from edgeship.errors import LoweringError
from edgeship.lowering.capture import Captured
from edgeship.results import VariantResult

if TYPE_CHECKING:
    from edgeship.spec import ModelSpec

Predict = Callable[[list[np.ndarray]], list[np.ndarray]]


class AccuracyBudget(Protocol):
    """The variant's accuracy gates on calibration samples (``pipeline/budget.py``), for quantizers
    that choose by them (``keep_float = "auto"``)."""

    def failures(self, samples: Dataset, reference: list[np.ndarray], outputs: list[np.ndarray]) -> list[str]:
        """The gates ``outputs`` fail against the float ``reference`` on ``samples``; empty: within budget."""

    def described(self) -> str:
        """The gates judged, for notes."""


@dataclass
class LowerRequest:
    """Everything a backend needs to write one artifact."""

    captured: Captured
    variant: Variant
    options: StrictModel          # the backend's parsed Options (an instance of its Options model)
    dest: Path                    # where the artifact goes; write it atomically
    calibration: Callable[[], Dataset] | None = None  # the calibration samples, loaded on first call
    cache: Cache | None = None    # caches calibration results; None: no caching
    # The CPUs the artifact will run on, (device name, devices.cpu.cpu_facts()) each, for settings a
    # quantizer picks by CPU (its backend's cpu.py); None: this machine's.
    cpus: list[TargetCpu] | None = None
    budget: AccuracyBudget | None = None  # the variant's accuracy gates on calibration samples


@dataclass
class Artifact:
    """A written artifact and what lowering learned about it."""

    path: Path
    notes: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)


class Backend(BackendSpec):
    """How a declared backend lowers and loads.

    ``available()`` is None when the artifact can run on this machine, else the reason;
    ``lower()`` writes the artifact; ``load()`` returns a callable on numpy arrays.
    Heavy SDKs are imported inside methods, so listing backends costs nothing.
    """

    # The runtime load() uses on the build machine when the device's runtime is not one (onnx-web:
    # native ONNX Runtime, for checks only); None: the device's.
    build_runtime: str | None = None

    def available(self, options: StrictModel | None = None) -> str | None:
        """None when artifacts with these options run here; otherwise why not."""
        return None

    def unavailable_here(self, options: StrictModel, precision: str) -> str | None:
        """Why a variant of this precision with these options is not measured on this machine (None:
        it is); default: ``available(options)``. A backend whose runtime needs the CPU's support for a
        precision (OpenVINO's bf16) says so here."""
        return self.available(options)

    def wants_dynamic_batch(self, options: StrictModel) -> bool:
        return False

    def lower(self, request: LowerRequest) -> Artifact:
        raise NotImplementedError

    def job_options(self, options: StrictModel, precision: str = "fp32",
                    spec: ModelSpec | None = None) -> dict[str, Any]:
        """Runtime options for the device runner (``spec``: the model spec, for backends whose
        runtime needs its input sizes, e.g. TensorRT's optimization profile)."""
        return {}

    def bundle_metadata(self, row: VariantResult, options: StrictModel,
                        toolchain: dict[str, str]) -> dict[str, Any] | None:
        """What an app needs to run this backend's artifact (model.json's ``runtime``): the runtime, the
        version that wrote it, what it needs. ``options``: the variant's parsed Options. None: the
        bundle records the options and lowering details as they are."""
        return None

    def snippet_facts(self, artifact: dict[str, Any], spec: ModelSpec) -> dict[str, Any]:
        """What a mobile bundle's loading snippet (bundle/snippets.py) is written from for this backend's
        artifact beyond its model.json entry ``artifact`` (e.g. Core ML's feature names). Default: nothing."""
        return {}

    def runtime_label(self) -> str:
        return self.runtime

    def load(self, path: Path, options: StrictModel | None = None, threads: int | None = None) -> Predict:
        """A callable on numpy arrays, from the same loader the device runner uses."""
        from edgeship.devices.runner import open_runner

        opts = self.job_options(options if options is not None else self.Options())
        return open_runner(self.build_runtime or self.runtime, str(path), opts, threads).infer


def require(module: str, backend: str) -> ModuleType:
    """Import an SDK for a backend, or raise a LoweringError that says what to install."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise LoweringError(f"backend {backend} needs the Python package {module.split('.')[0]!r}: {e}") from None
