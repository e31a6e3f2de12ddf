"""The one small interface every backend implements, and what lowering hands back."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from edgeship.config import StrictModel, check
from edgeship.errors import ProfileError, LoweringError
from edgeship.profile import Variant

Predict = Callable[[list[np.ndarray]], list[np.ndarray]]


@dataclass
class LowerRequest:
    """Everything a backend needs to write one artifact."""

    captured: Any                 # pipeline.capture.Captured
    variant: Variant
    options: Any                  # the backend's parsed Options
    dest: Path                    # where the artifact goes; write it atomically
    calibration: Callable[[], Any] | None = None  # lazily loaded calibration Dataset
    cache: Any = None             # edgeship.cache.Cache for calibration results; None: no caching


@dataclass
class Artifact:
    """A written artifact and what lowering learned about it."""

    path: Path
    notes: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)


class Backend:
    """A lowering target: name, file suffix, the runtime that runs it, and its options.

    ``available()`` is None when the artifact can run on this machine, else the reason;
    ``lower()`` writes the artifact; ``load()`` returns a callable on numpy arrays.
    Heavy SDKs are imported inside methods, so listing backends costs nothing.
    """

    name: ClassVar[str]
    suffix: ClassVar[str]
    runtime: ClassVar[str]                      # runner runtime id
    capture_methods: ClassVar[tuple[str, ...]]  # the capture methods it can lower from
    precisions: ClassVar[tuple[str, ...]] = ("fp32",)
    # Its own int8 quantizer (schemes and methods a variant's [quantization] may name), or None.
    quantization: ClassVar[Any] = None

    class Options(StrictModel):
        """No options."""

    @classmethod
    def option_problems(cls, options: dict[str, Any]) -> list[str]:
        return check(options, cls.Options)[1]

    @classmethod
    def variant_problems(cls, precision: str, options: dict[str, Any]) -> list[str]:
        """Combinations of precision and options this backend cannot build (checked at plan time)."""
        return []

    @classmethod
    def parse_options(cls, options: dict[str, Any]) -> Any:
        parsed, problems = check(options, cls.Options)
        if problems:
            raise ProfileError("; ".join(problems))
        return parsed

    def available(self, options: Any = None) -> str | None:
        """None when artifacts with these options run here; otherwise why not."""
        return None

    def wants_dynamic_batch(self, options: Any) -> bool:
        return False

    def lower(self, request: LowerRequest) -> Artifact:
        raise NotImplementedError

    def job_options(self, options: Any, precision: str = "fp32") -> dict[str, Any]:
        """Runtime options for the device runner."""
        return {}

    def runtime_label(self) -> str:
        return self.runtime

    def load(self, path: Path, options: Any = None, threads: int | None = None) -> Predict:
        """A callable on numpy arrays, from the same loader the device runner uses."""
        from edgeship.devices.runner import RUNTIMES

        opts = self.job_options(options if options is not None else self.Options())
        return RUNTIMES[self.runtime](str(path), opts, threads)[0]


def require(module: str, backend: str) -> Any:
    """Import an SDK for a backend, or raise a LoweringError that says what to install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise LoweringError(f"backend {backend} needs the Python package {module.split('.')[0]!r}: {e}") from None
