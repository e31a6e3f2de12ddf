"""Capture: the float module as a graph, by torch.export, jit.trace or jit.script.

Each method runs at most once per build (and once more with a dynamic batch dimension, for
backends that want one); failures are remembered too, so a fallback order costs nothing extra.

A spec with dynamic dimensions (edgeship.shapes) is exported with one ``torch.export.Dim`` per
group of equal dimensions, from example inputs at the "opt" size; the program then holds for
every size from min to max (torch.export checks the model's code against the ranges). trace and
script record no ranges: a traced graph may have sizes of the example baked in, so backends that
lower from them run the artifact at the min, opt and max sizes (``check_sizes``) before trusting it.
"""
from __future__ import annotations

import contextlib
import os
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from edgeship import outputs, shapes
from edgeship.errors import LoweringError, first_line
from edgeship.metrics import sqnr_db
from edgeship.model import LoadedModel

if TYPE_CHECKING:
    import torch
    from torch.export import Dim

    # What a capture method returns: torch.export's program, or a torch.jit module (trace, script).
    Program: TypeAlias = torch.export.ExportedProgram | torch.jit.ScriptModule

SIZE_CHECK_SQNR_DB = 40.0  # an fp32 artifact this far from the float model at some size has fixed a size wrongly


@dataclass
class Captured:
    """A captured program: an ExportedProgram (export) or a ScriptModule (trace, script)."""

    method: str
    program: Program
    model: LoadedModel
    dynamic_batch: bool
    seconds: float
    notes: list[str] = field(default_factory=list)
    _float_output: object = field(default=None, repr=False)

    @property
    def example_inputs(self) -> tuple[torch.Tensor, ...]:
        return self.model.example_inputs

    @property
    def dynamic(self) -> bool:
        """True when the spec has dynamic dimensions (the artifact must take every size from min to max)."""
        return shapes.is_dynamic(self.model.spec)

    def float_output(self) -> object:
        """The float model's output on the example inputs (computed once)."""
        import torch

        if self._float_output is None:
            with torch.inference_mode():
                self._float_output = self.model.module(*self.example_inputs)
        return self._float_output

    def output_names(self) -> list[str]:
        """The float model's flattened output names (edgeship.outputs), as every backend names them."""
        return outputs.names_of(self.float_output())


class CaptureFailed(Exception):
    """One method failed; ``str()`` is the first line of its error."""

    def __init__(self, method: str, error: BaseException) -> None:
        self.method = method
        self.line = f"{type(error).__name__}: {first_line(error) if str(error).strip() else ''}"
        super().__init__(f"{method}: {self.line}")


class Capturer:
    """Captures on demand and remembers every result, success or failure. ``bounded(stage)``, when given,
    runs each capture method under the build's time limit (``pipeline.watchdog``); what it raises when
    the limit passes (a KeyboardInterrupt) is the build's to handle, not a failure of the method."""

    def __init__(self, model: LoadedModel,
                 bounded: Callable[[str], contextlib.AbstractContextManager[None]] | None = None) -> None:
        self.model = model
        self.bounded = bounded or (lambda stage: contextlib.nullcontext())
        self._done: dict[tuple[str, bool], Captured | CaptureFailed] = {}

    def get(self, method: str, dynamic_batch: bool = False) -> Captured:
        """The capture by ``method``; raises CaptureFailed (also on repeated calls)."""
        key = (method, dynamic_batch)
        if key not in self._done:
            start = time.perf_counter()
            notes: list[str] = []
            try:
                with self.bounded(f"capture by {method}" + (" with a dynamic batch" if dynamic_batch else "")):
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


def capture_export(model: LoadedModel, dynamic_batch: bool, notes: list[str]) -> torch.export.ExportedProgram:
    """torch.export, with the spec's dynamic dimensions free over their ranges; with
    ``dynamic_batch`` the first dimension of every input may vary too."""
    import torch

    dynamic_shapes = shapes.export_dynamic_shapes(model.spec, dynamic_batch)
    if dynamic_shapes is None:
        return torch.export.export(model.module, model.example_inputs)
    args = free_examples(model.example_inputs, dynamic_shapes)
    if shapes.is_dynamic(model.spec):
        notes.append(f"exported with dynamic dimensions: {shapes.describe(model.spec)}")
    try:
        return torch.export.export(model.module, args, dynamic_shapes=dynamic_shapes)
    except Exception as e:
        if "Constraints violated" not in str(e):
            raise
        raise LoweringError(constraint_message(e)) from None


def free_examples(args: tuple[torch.Tensor, ...],
                  dynamic_shapes: tuple[dict[int, Dim], ...]) -> tuple[torch.Tensor, ...]:
    """The example inputs with every free dimension of size 1 doubled: torch.export specializes a
    dimension whose example is 1 to that constant (the program still takes 1 when min is 1)."""
    import torch

    out = []
    for arg, free in zip(args, dynamic_shapes):
        for index in free:
            if arg.shape[index] == 1:
                arg = torch.cat([arg, arg], dim=index)
        out.append(arg)
    return tuple(out)


def constraint_message(error: BaseException) -> str:
    """torch.export's 'Constraints violated' in one line: what the model's code requires of the
    dynamic dimensions (equal to another, a multiple of something, a constant) and its suggested fixes."""
    lines = [line.strip() for line in str(error).splitlines()]
    found = dict.fromkeys(line[2:] for line in lines if line.startswith("- "))
    fixes: list[str] = []
    for line in lines[lines.index("Suggested fixes:") + 1:] if "Suggested fixes:" in lines else []:
        if not line:
            break
        fixes.append(line)
    return ("the model does not take the spec's dynamic dimensions as given: " + ("; ".join(found) or first_line(error))
            + (f" (torch.export suggests: {'; '.join(fixes)})" if fixes else "")
            + "; change the spec's dynamic ranges or names to match")


@contextlib.contextmanager
def fx_tracing(tool: str, alternative: str) -> Iterator[None]:
    """Run ``tool``, which traces the model symbolically with torch.fx; a failure of that tracing
    becomes a LoweringError naming the line of the model's code where it stopped and ``alternative``.

    torch.fx runs ``forward`` with proxies instead of tensors, so Python control flow on shapes
    (Hugging Face transformers slice by ``seq_length``, check ``mask.ndim``) stops it with a bare
    TypeError or TraceError that says nothing about FX. Errors raised elsewhere pass unchanged.
    """
    try:
        yield
    except Exception as error:
        why = fx_failure(error)
        if why is None:
            raise
        raise LoweringError(
            f"{tool}: torch.fx could not trace the model ({why}); "
            f"Python control flow on tensor shapes, as in Hugging Face transformers, stops FX. {alternative}"
        ) from error


def fx_failure(error: BaseException) -> str | None:
    """Where and why torch.fx's symbolic tracing stopped (``TypeError at transformers/models/bert/
    modeling_bert.py:85: slice indices must be integers ...``): the last frame of the model's own
    code; None when ``error`` was not raised while FX traced."""
    import torch.fx

    import edgeship

    frames = list(traceback.extract_tb(error.__traceback__))
    paths = [f.filename.replace("\\", "/") for f in frames]
    if not any(_inside(p, torch.fx) for p in paths):
        return None
    model = [(p, f.lineno) for p, f in zip(paths, frames) if not _inside(p, torch) and not _inside(p, edgeship)]
    where = f" at {model[-1][0].split('site-packages/')[-1]}:{model[-1][1]}" if model else ""
    message = first_line(error)
    if len(message) > 120 and ". " in message:   # FX's TraceErrors go on to point at its documentation
        message = message[:message.index(". ") + 1]
    return f"{type(error).__name__}{where}: {message}"


def _inside(path: str, package: Any) -> bool:
    """Whether the file ``path`` lies in ``package``'s own folder: judged by where the package really
    is, not by a folder name, so a model kept under ``~/work/edgeship/`` or ``~/torch/`` is the model's."""
    root = os.path.realpath(os.path.dirname(package.__file__))
    return os.path.realpath(path).startswith(root + os.sep)


def flat_outputs(module: torch.nn.Module, example_inputs: tuple[torch.Tensor, ...],
                 notes: list[str]) -> torch.nn.Module:
    """``module`` itself when it returns a tensor or a flat tuple of tensors; else a wrapper that
    returns its outputs flattened in edgeship's order (:mod:`edgeship.outputs`) as a tuple: a traced
    dict cannot be exported by torch's jit-based graph exporter (prim::DictConstruct)."""
    import torch

    with torch.inference_mode():
        out = module(*example_inputs)
    if isinstance(out, torch.Tensor) or (isinstance(out, tuple) and all(isinstance(o, torch.Tensor) for o in out)):
        return module
    notes.append("traced with the outputs flattened to a tuple (" + ", ".join(outputs.names_of(out)) + ")")

    class FlatOutputs(torch.nn.Module):
        """The module's outputs as one flat tuple, in edgeship's flattened order."""

        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: torch.Tensor) -> tuple[object, ...]:
            return tuple(value for _, value in outputs.flatten(self.inner(*args)))

    return FlatOutputs(module).eval()


def capture_trace(model: LoadedModel, dynamic_batch: bool, notes: list[str]) -> torch.jit.ScriptModule:
    """jit.trace; when the tracer's own consistency check fails (as it does for
    nn.MultiheadAttention), trace again without it and let numeric validation judge."""
    import torch

    if shapes.is_dynamic(model.spec):
        notes.append(f"traced at the opt size; the traced graph may fix sizes the example had, so the artifact is "
                     f"run at min, opt and max where it can be ({shapes.describe(model.spec)})")

    module = flat_outputs(model.module, model.example_inputs, notes)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", torch.jit.TracerWarning)
        try:
            traced = torch.jit.trace(module, model.example_inputs, check_trace=True, strict=False)
        except torch.jit.TracingCheckError as e:
            first = first_line(e)
            notes.append(f"trace check failed ({first[:120]}); traced without the check, "
                         "numeric validation judges the artifact")
            traced = torch.jit.trace(module, model.example_inputs, check_trace=False, strict=False)
    tracer_warnings = {str(w.message).splitlines()[0]
                       for w in caught if issubclass(w.category, torch.jit.TracerWarning)}
    for message in sorted(tracer_warnings)[:3]:
        notes.append(f"tracer warning: {message[:160]}")
    return traced


def capture_script(model: LoadedModel, dynamic_batch: bool, notes: list[str]) -> torch.jit.ScriptModule:
    """jit.script: keeps Python control flow; needs code torch.jit.script compiles."""
    import torch

    if shapes.is_dynamic(model.spec):
        notes.append("scripted: sizes stay symbolic unless the code fixes them; the artifact is run at min, opt and "
                     "max where it can be")

    return torch.jit.script(model.module)


CAPTURE_METHODS: dict[str, Callable[[LoadedModel, bool, list[str]], Program]] = {
    "export": capture_export, "trace": capture_trace, "script": capture_script}


def check_sizes(captured: Captured, predict: Callable[[list[np.ndarray]], list[np.ndarray]], precision: str) -> str:
    """Run an artifact at each of the spec's sizes (min, opt, max) on seeded random inputs and compare
    it with the float model: a LoweringError names the size when the artifact fails there, returns
    other output shapes, or, computing in ``precision`` "fp32", is further than SIZE_CHECK_SQNR_DB from
    the float model, as a graph traced at one size and fixed to it would be. In another precision it
    is checked for running and its shapes only: its error on random inputs is that precision's, which
    the variant's gates judge on real data (an int8 MiniLM reads 13.9 dB on random token ids).
    Returns a note with the SQNR at each size."""
    from edgeship.calibration.datasets import random_batch

    min_sqnr_db = SIZE_CHECK_SQNR_DB if precision == "fp32" else None
    spec, measured = captured.model.spec, []
    for seed, (size, at) in enumerate(shapes.sizes(spec).items()):
        where = f"at the {size} size ({', '.join(f'{name} {shape}' for name, shape in at.items())})"
        arrays = random_batch(spec, size, seed)
        expected = _float_outputs(captured, arrays)
        try:
            got = [np.asarray(a) for a in predict(arrays)]
        except Exception as e:  # the runtime's own words say why (a bounded tensor, a fixed reshape)
            raise LoweringError(f"the artifact does not run {where}: {type(e).__name__}: {first_line(e)}") from None
        sqnr, problem = _compare(expected, got, min_sqnr_db)
        if problem:
            raise LoweringError(f"the artifact {where} {problem}")
        measured.append(f"{size} {sqnr}")
    return "ran at the spec's sizes against the float model (SQNR): " + ", ".join(measured)


def _float_outputs(captured: Captured, arrays: list[np.ndarray]) -> list[np.ndarray]:
    import torch

    with torch.inference_mode():
        out = captured.model.module(*[torch.from_numpy(a) for a in arrays])
    return [v.numpy() if isinstance(v, torch.Tensor) else np.asarray(v) for _, v in outputs.flatten(out)]


def _compare(expected: list[np.ndarray], got: list[np.ndarray], min_sqnr_db: float | None) -> tuple[str, str | None]:
    """The worst SQNR over the outputs as text, and what is wrong (None when nothing is)."""
    if len(got) != len(expected):
        return "", f"returns {len(got)} outputs, the float model {len(expected)}"
    worst = None
    for i, (ref, out) in enumerate(zip(expected, got)):
        if ref.shape != out.shape:
            return "", f"returns shape {list(out.shape)} for output {i}, the float model {list(ref.shape)}"
        if np.issubdtype(out.dtype, np.floating) and not np.isfinite(out).all() and np.isfinite(ref).all():
            return "", f"returns non-finite values in output {i}"
        value = sqnr_db(ref, out)
        if value is not None and (worst is None or value < worst):
            worst = value
    text = "identical" if worst is None else f"{worst:.1f} dB"
    if min_sqnr_db is not None and worst is not None and worst < min_sqnr_db:
        return text, f"differs from the float model: SQNR {text}, below {min_sqnr_db:g} dB"
    return text, None
