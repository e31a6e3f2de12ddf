"""The native benchmark programs that devices without Python (Android) run, and their output.

Each program answers two things: the command line that times an artifact on the device, and how
to read the timings back from what it printed. A backend declares its program by name
(``BackendSpec.native_program``) and its package's ``native.py`` holds the program's class, a
``NativeProgram``; ``PROGRAMS`` (runtime -> program) is built from those declarations, each class
imported on first use. The programs run their own inputs (all ones), not edgeship's evaluation
samples, and print no outputs edgeship can compare, so accuracy is not measured on these devices;
the notes say so.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from edgeship.backends.registry import PACKAGES, SPECS, Made, defined_in
from edgeship.devices.base import Job


@dataclass
class NativeTimings:
    """What a native program's output says: per-run times when it prints them, else the mean."""

    timings_ms: list[float] | None
    mean_ms: float
    runs: int
    load_ms: float | None = None
    notes: list[str] = field(default_factory=list)


class NativeProgram:
    """A native benchmark program: the command line that times an artifact, and its output's reader."""

    program: ClassVar[str]                  # its name, as the backend's native_program declares it
    logcat_tag: ClassVar[str | None] = None  # where it logs on Android when not to stdout (logcat's tag)

    def command(self, program: str, model: str, job: Job) -> list[str]:
        """The command line running ``program`` (its path on the device) on ``model`` for ``job``."""
        raise NotImplementedError

    def parse(self, text: str, warmup: int) -> NativeTimings:
        """The timings in the program's output (MeasurementError when it has none)."""
        raise NotImplementedError


def declared_programs() -> dict[str, str]:
    """Runtime -> the name of its native benchmark program, as the backends declare them (no import)."""
    return {spec.runtime: spec.native_program for spec in SPECS.values() if spec.native_program}


def _program(runtime: str) -> NativeProgram:
    """The NativeProgram in the native.py of the backend that declares ``runtime``'s program, made."""
    name = next(name for name, spec in SPECS.items() if spec.runtime == runtime and spec.native_program)
    found = defined_in(name, "native", NativeProgram)
    if len(found) != 1 or found[0].program != SPECS[name].native_program:
        raise RuntimeError(f"{PACKAGES[name]}.native must define one NativeProgram, the program "
                           f"{SPECS[name].native_program!r}; found {[cls.__name__ for cls in found]}")
    return found[0]()


PROGRAMS: Mapping[str, NativeProgram] = Made(declared_programs, _program)


def last_error(text: str) -> str:
    """The last line of a program's output that reads as an error (else its last line), for a message."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.match(r"^(E|F) ", ln) or "rror" in ln or "failed" in ln]
    return (errors or lines or ["no output"])[-1][:300]
