"""A vendor step's documented alternatives, tried in order (a fallback ladder), and crashes that name
what they were doing.

A vendor's converter or quantizer (ONNX Runtime, onnxslim, NNCF) can crash on a valid model where the
same vendor documents a way around it: ONNX Runtime's ``quant_pre_process`` without its symbolic shape
inference, or with no pre-processing at all. ``descend`` runs a step's rungs in that order and hands
back the first result with every step down it took (``StepDown``: what failed, the crash, what ran
instead), which lowering records in ``lowering.details["fallbacks"]`` and its notes. When the last
rung crashes too, the LoweringError names the vendor, the step and the operator it was at (from the
traceback), not a bare TypeError from inside the library. Only a step the vendor documents an
alternative for gets more than one rung; ``vendor_step`` is the ladder of one.
"""
from __future__ import annotations

import contextlib
import re
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from edgeship.errors import EdgeshipError, LoweringError, first_line

T = TypeVar("T")
FALLBACKS = "fallbacks"  # the key in lowering.details (and in a quantizer's details, until lifted)
# A shape-inference function per operator, as ONNX Runtime's symbolic shape inference (_infer_Expand) and
# onnxslim's have them: the operator the step was at.
OPERATOR_FUNCTION = re.compile(r"^_?infer_(?P<op>[A-Z][A-Za-z0-9]*)$")


@dataclass(frozen=True)
class Rung(Generic[T]):
    """One documented way to run a step. ``name`` says how ("without symbolic shape inference");
    ``failing`` names the part that failed when ``run`` raises (a function of the error where the
    traceback tells which part it was; default: the rung's name)."""

    name: str
    run: Callable[[], T]
    failing: str | Callable[[BaseException], str] = ""

    def failed(self, error: BaseException) -> str:
        """What of this rung failed with ``error``, for the record."""
        return (self.failing(error) if callable(self.failing) else self.failing) or self.name


@dataclass(frozen=True)
class Crash:
    """Where a vendor's exception came from: its type and first line, the vendor function it was at
    and the operator (with the node's name) it was working on, where the traceback shows them."""

    error: str
    message: str
    function: str | None = None
    operator: str | None = None
    node: str | None = None

    def at(self) -> str:
        """``operator Expand (node 'x')``, or an empty string when the traceback named none."""
        if not self.operator:
            return ""
        return f"operator {self.operator}" + (f" (node {self.node!r})" if self.node else "")

    def cause(self) -> str:
        """``TypeError in _infer_Expand: object of type 'NoneType' has no len()``."""
        return self._said(with_operator=False)

    def __str__(self) -> str:
        return self._said(with_operator=True)

    def _said(self, with_operator: bool) -> str:
        where = f" in {self.function}" if self.function else ""
        at = f" at {self.at()}" if with_operator and self.operator else ""
        return f"{self.error}{where}{at}: {self.message}"


def crash_of(error: BaseException) -> Crash:
    """``error`` read as a vendor crash: the operator from the innermost per-operator function in its
    traceback (``_infer_Expand`` -> Expand) or from a ``node`` the vendor was processing (an ONNX
    NodeProto in a frame's locals), looked for in the exceptions chained to it too."""
    chain: list[BaseException] = []
    while error is not None and error not in chain:
        chain.append(error)
        error = error.__cause__ or error.__context__
    frames = [frame for e in chain for frame, _ in traceback.walk_tb(e.__traceback__)]
    function = operator = node = None
    for frame in reversed(frames):  # innermost first
        found = OPERATOR_FUNCTION.match(frame.f_code.co_name)
        if found and operator is None:
            function, operator = frame.f_code.co_name, found["op"]
        processed = frame.f_locals.get("node")
        if node is None and isinstance(getattr(processed, "op_type", None), str):
            node, operator = getattr(processed, "name", "") or None, operator or processed.op_type
    if function is None and frames:
        function = frames[-1].f_code.co_name
    return Crash(type(chain[0]).__name__, first_line(chain[0]), function, operator, node)


@dataclass(frozen=True)
class StepDown:
    """One step down a ladder: the rung that failed, its crash, and the rung that ran next."""

    vendor: str
    step: str
    rung: str
    failed: str
    crash: Crash
    next: str

    def note(self) -> str:
        """``quant_pre_process: symbolic shape inference failed (TypeError in _infer_Expand ...); ran without it``."""
        ran = "without it" if self.next == f"without {self.failed}" else self.next
        return f"{self.step}: {self.failed} failed ({self.crash}); ran {ran}"

    def record(self) -> dict[str, Any]:
        """The step down as ``lowering.details["fallbacks"]`` lists it."""
        return {"vendor": self.vendor, "step": self.step, "from": self.rung, "to": self.next, "failed": self.failed,
                "error": self.crash.error, "message": self.crash.message, "function": self.crash.function,
                "operator": self.crash.operator, "node": self.crash.node, "note": self.note()}


@dataclass
class Descent(Generic[T]):
    """A ladder's outcome: the value of the rung that ran through, its name, and the steps down before it."""

    value: T
    rung: str
    steps: list[StepDown]


def is_vendor_crash(error: Exception) -> bool:
    """Whether ``error`` is the vendor's own failure, which a documented alternative may avoid: not
    edgeship's own errors, and not the machine's (OSError: a full disk is the build's problem)."""
    return not isinstance(error, (EdgeshipError, OSError, MemoryError))


def descend(vendor: str, step: str, rungs: Sequence[Rung[T]],
            steps_down: Callable[[Exception], bool] = is_vendor_crash) -> Descent[T]:
    """Run ``rungs`` in order until one returns; an error ``steps_down`` refuses is raised as it is.
    When the last rung fails too: a LoweringError naming ``vendor``, ``step``, the operator and every rung."""
    steps: list[StepDown] = []
    for index, rung in enumerate(rungs):
        try:
            return Descent(rung.run(), rung.name, steps)
        except Exception as e:
            if not steps_down(e):
                raise
            crash = crash_of(e)
            if index + 1 == len(rungs):
                raise LoweringError(exhausted(vendor, step, rung.failed(e), crash, steps)) from e
            steps.append(StepDown(vendor, step, rung.name, rung.failed(e), crash, rungs[index + 1].name))
    raise ValueError(f"{vendor} {step}: no rungs to run")


def exhausted(vendor: str, step: str, failed: str, crash: Crash, steps: list[StepDown]) -> str:
    """The message when no documented alternative is left: vendor, step, operator, and what was tried."""
    at = f" at {crash.at()}" if crash.operator else ""
    tried = ("; tried before it: " + "; ".join(s.note() for s in steps) if steps
             else "; no documented alternative to fall back on")
    what = step if failed == step else f"{step} ({failed})"
    return f"{vendor} {what} crashed{at}: {crash.cause()}{tried}"


def vendor_step(vendor: str, step: str, run: Callable[[], T]) -> T:
    """``run()``, a vendor step with no documented alternative: its crash becomes a LoweringError
    naming ``vendor``, ``step`` and the operator."""
    return descend(vendor, step, [Rung(step, run)]).value


@contextlib.contextmanager
def told(steps: Sequence[StepDown]) -> Iterator[None]:
    """The block, after ``steps`` were taken: a LoweringError it raises also names them, so a later
    failure is read with what had already stepped down (recorded() keeps them only on success)."""
    try:
        yield
    except LoweringError as e:
        if not steps:
            raise
        raise LoweringError(f"{e} (after earlier steps down: {'; '.join(s.note() for s in steps)})") from e


def recorded(details: dict[str, Any], steps: Sequence[StepDown]) -> None:
    """Add ``steps`` to ``details["fallbacks"]`` (the key is written only when there is one)."""
    if steps:
        details.setdefault(FALLBACKS, []).extend(s.record() for s in steps)


def lifted(quantization: dict[str, Any]) -> dict[str, Any]:
    """The quantizer's step downs, moved out of its details to lowering.details' own key."""
    steps = quantization.pop(FALLBACKS, [])
    return {FALLBACKS: steps} if steps else {}
