"""Capture: the float module as a graph, by torch.export, jit.trace or jit.script.

Each method runs at most once per build (and once more with a dynamic batch dimension, for
backends that want one); failures are remembered too, so a fallback order costs nothing extra.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Any

from edgeship.errors import first_line
from edgeship.model import LoadedModel

DYNAMIC_BATCH_MAX = 4096


@dataclass
class Captured:
    """A captured program: an ExportedProgram (export) or a ScriptModule (trace, script)."""

    method: str
    program: Any
    model: LoadedModel
    dynamic_batch: bool
    seconds: float
    notes: list[str] = field(default_factory=list)

    @property
    def example_inputs(self) -> tuple[Any, ...]:
        return self.model.example_inputs


class CaptureFailed(Exception):
    """One method failed; ``str()`` is the first line of its error."""

    def __init__(self, method: str, error: BaseException) -> None:
        self.method = method
        self.line = f"{type(error).__name__}: {first_line(error) if str(error).strip() else ''}"
        super().__init__(f"{method}: {self.line}")


class Capturer:
    """Captures on demand and remembers every result, success or failure."""

    def __init__(self, model: LoadedModel) -> None:
        self.model = model
        self._done: dict[tuple[str, bool], Captured | CaptureFailed] = {}

    def get(self, method: str, dynamic_batch: bool = False) -> Captured:
        """The capture by ``method``; raises CaptureFailed (also on repeated calls)."""
        key = (method, dynamic_batch)
        if key not in self._done:
            start = time.perf_counter()
            notes: list[str] = []
            try:
                program = CAPTURE_METHODS[method](self.model, dynamic_batch, notes)
                self._done[key] = Captured(method, program, self.model, dynamic_batch,
                                           time.perf_counter() - start, notes)
            except Exception as e:  # any failure of a capture method is reported, not fatal
                self._done[key] = CaptureFailed(method, e)
        result = self._done[key]
        if isinstance(result, CaptureFailed):
            raise result
        return result

    def first(self, methods: list[str], dynamic_batch: bool = False) -> tuple[Captured | None, list[CaptureFailed]]:
        """The first method in ``methods`` that captures, and the failures before it."""
        failures: list[CaptureFailed] = []
        for method in methods:
            try:
                return self.get(method, dynamic_batch), failures
            except CaptureFailed as f:
                failures.append(f)
        return None, failures

    def failures(self) -> list[CaptureFailed]:
        return [r for r in self._done.values() if isinstance(r, CaptureFailed)]


def capture_export(model: LoadedModel, dynamic_batch: bool, notes: list[str]) -> Any:
    """torch.export; with ``dynamic_batch`` the first dimension of every input may vary."""
    import torch
    from torch.export import Dim

    args = model.example_inputs
    if not dynamic_batch:
        return torch.export.export(model.module, args)
    # An example batch of 1 would specialize the dimension to 1, so export with a batch of 2.
    args = tuple(torch.cat([a, a]) if a.shape[0] == 1 else a for a in args)
    batch = Dim("batch", min=1, max=DYNAMIC_BATCH_MAX)
    return torch.export.export(model.module, args, dynamic_shapes=tuple({0: batch} for _ in args))


def capture_trace(model: LoadedModel, dynamic_batch: bool, notes: list[str]) -> Any:
    """jit.trace; when the tracer's own consistency check fails (as it does for
    nn.MultiheadAttention), trace again without it and let numeric validation judge."""
    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", torch.jit.TracerWarning)
        try:
            traced = torch.jit.trace(model.module, model.example_inputs, check_trace=True)
        except torch.jit.TracingCheckError as e:
            first = first_line(e)
            notes.append(f"trace check failed ({first[:120]}); traced without the check, "
                         "numeric validation judges the artifact")
            traced = torch.jit.trace(model.module, model.example_inputs, check_trace=False)
    tracer_warnings = {str(w.message).splitlines()[0]
                       for w in caught if issubclass(w.category, torch.jit.TracerWarning)}
    for message in sorted(tracer_warnings)[:3]:
        notes.append(f"tracer warning: {message[:160]}")
    return traced


def capture_script(model: LoadedModel, dynamic_batch: bool, notes: list[str]) -> Any:
    """jit.script: keeps Python control flow; needs TorchScript-compatible code."""
    import torch

    return torch.jit.script(model.module)


CAPTURE_METHODS = {"export": capture_export, "trace": capture_trace, "script": capture_script}
