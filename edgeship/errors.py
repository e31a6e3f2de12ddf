"""Error types. Each carries what a person needs to fix it; the exit code comes from the type.

Exit codes (the command line's contract; see docs/ARCHITECTURE.md): 0 success, 2 bad input, 3 a
validation gate failed, 1 anything else (a bug).
"""
from __future__ import annotations

import difflib
import re
import traceback
from collections.abc import Iterable


class EdgeshipError(Exception):
    """Base class; ``exit_code`` is what the command line exits with."""

    exit_code = 1


class BadInputError(EdgeshipError):
    """Input a person can fix: a profile, model spec, weights file, data set or device file."""

    exit_code = 2


class ProfileError(BadInputError):
    """A target profile that does not parse or validate."""


class ModelSpecError(BadInputError):
    """A model spec (model.toml or module:callable) that cannot be used."""


class WeightsError(BadInputError):
    """A weights file that is refused or does not fit the model."""


class DataError(BadInputError):
    """Calibration or evaluation data that is missing, unreadable or of the wrong shape."""


class CaptureError(BadInputError):
    """The model could not be captured by any method the profile allows."""


class DeviceError(BadInputError):
    """A devices file or device name that cannot be used."""


class StoreError(BadInputError):
    """A results database URL that cannot be opened."""


class ReportError(BadInputError):
    """Results files or report options that cannot be used."""


class BundleError(BadInputError):
    """A bundle that cannot be made, or a bundle file that fails its check."""


class MissingRuntimeError(BadInputError):
    """A profile names backends whose runtimes (Python distributions) are not installed here: the message
    names the variants and ends with the one ``pip install "edgeship[...]"`` line that installs them."""


class OutputError(BadInputError):
    """An output or cache folder that cannot be used: not a folder, not writable, not edgeship's,
    or out of space while writing (the message names the path and what was needed)."""


class WriteFailure(EdgeshipError):
    """The machine refused something the build needed (a write on a full disk or past the file size
    limit, a read-only or unreadable path, an I/O error): the environment, exit 1. The message names
    the path and the OS's reason."""


def os_failure(error: OSError) -> WriteFailure:
    """The one line for an OSError that ended a command: the path(s) it names and the OS's reason."""
    paths = [str(p) for p in (error.filename, error.filename2) if p is not None]
    reason = error.strerror or first_line(error)
    where = f"{' -> '.join(paths)}: " if paths else ""
    return WriteFailure(f"{where}{reason} (errno {error.errno}: the operating system refused it)" if error.errno
                        else f"{where}{reason}")


class UserCodeExit(BadInputError):
    """User code (a model entry, its forward, a data source or dataset reader) raised ``SystemExit`` or
    another ``BaseException`` that is not an interrupt: a model or data error (exit 2), never success."""


def user_code_exit(error: BaseException, during: str) -> UserCodeExit:
    """The model or data error for ``error`` (SystemExit or a BaseException other than an interrupt)
    raised while ``during`` ran: what was called, with what, and what to do instead."""
    if isinstance(error, SystemExit):
        what = f"called sys.exit({error.code!r})"
    else:
        what = f"raised {type(error).__name__}" + (f" ({first_line(error)})" if str(error) else "")
    return UserCodeExit(f"user code {what} during {during}: a model entry, its forward, a data source or "
                        "a dataset reader must return or raise an Exception, not exit (an argparse parse or a "
                        "training script's main run at import?)")


class UserCodeTimeout(BadInputError):
    """A stage ran past its ``[limits]`` watchdog while running user code (the model's forward or entry, a
    data source): a model or data error (exit 2). The message names the stage, the limit and its key."""


class StageTimeout(EdgeshipError):
    """A stage ran past its ``[limits]`` watchdog in edgeship's or a library's code (capture, a converter,
    a compiler): the build could not be made (exit 3, as a variant that could not be built)."""

    exit_code = 3


def is_interrupt(error: BaseException) -> bool:
    """Ctrl-C (KeyboardInterrupt) and the generator protocol's GeneratorExit: passed on as they are."""
    return isinstance(error, (KeyboardInterrupt, GeneratorExit))


class LoweringError(EdgeshipError):
    """One variant could not be lowered; the build records it and goes on."""


class GateFailure(EdgeshipError):
    """A validation gate failed; every artifact and the results are still written."""

    exit_code = 3

    def __init__(self, message: str, results: object = None) -> None:
        super().__init__(message)
        self.results = results


def listing(items: Iterable[object], most: int = 5) -> str:
    """``a, b, c and 4 more``: the first ``most`` items of a list for a message, and a count of the rest."""
    shown = [str(i) for i in items]
    more = f" and {len(shown) - most} more" if len(shown) > most else ""
    return ", ".join(shown[:most]) + more


def did_you_mean(value: str, allowed: Iterable[str]) -> str:
    """A ' (did you mean "x"?)' suffix for a near-miss, or an empty string."""
    close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1, cutoff=0.6)
    return f' (did you mean "{close[0]}"?)' if close else ""


def one_of(allowed: Iterable[str]) -> str:
    """Render an allowed set for a message: ``one of: a, b, c``."""
    return "one of: " + ", ".join(sorted(str(a) for a in allowed))


def first_line(error: BaseException) -> str:
    """The first non-empty line of ``str(error)`` without terminal colour codes, or its type name
    when the message is empty: enough to say in one line of a message or a report what went wrong."""
    lines = [line.strip() for line in plain(str(error)).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")


def plain(text: str) -> str:
    """``text`` without terminal escape sequences (colours, cursor moves) that some converters print."""
    return ANSI_ESCAPE.sub("", text)


# How converters name the operator they cannot take (in the error or the errors chained to it): the
# patterns every converter shares; a backend adds its converter's own (``unsupported_op_patterns``).
UNSUPPORTED_OP = [
    r"Operator torch\._ops\.(?P<ns>\w+)\.(?P<op>\w+)\.\w+ is not in Core ATen",  # torch's core ATen verifier
    r"(?i)(?:unsupported|not supported|not implemented|no \w+ (?:found|registered))[^\n]*?"
    r"\b(?P<ns>aten|prim|quantized)(?:::|\.)(?P<op>\w+)",
    r"(?i)\b(?P<ns>aten|prim|quantized)(?:::|\.)(?P<op>\w+)[^\n]*?(?:unsupported|not supported|not implemented)",
]


def unsupported_op(error: BaseException, patterns: Iterable[str] = ()) -> str | None:
    """The operator a converter could not take (``aten::linalg_inv``), found in the text of the
    error and of the errors chained to it, as ``lowering.log`` shows them; None when none is named.
    ``patterns``: the converter's own, tried before the shared ones."""
    text = plain("".join(traceback.format_exception(error)))
    for pattern in (*patterns, *UNSUPPORTED_OP):
        found = re.search(pattern, text)
        if found:
            ns = found.groupdict().get("ns")
            return f"{ns}::{found['op']}" if ns else found["op"]
    return None


def failure_line(error: BaseException, limit: int = 300, patterns: Iterable[str] = ()) -> str:
    """``Type: first line`` of a converter's failure (colour codes removed), naming the operator
    it could not take when its text names one and the first line does not. edgeship's own
    LoweringError is written to be read whole: its message alone, not cut."""
    if isinstance(error, LoweringError):
        return first_line(error)
    line = f"{type(error).__name__}: {first_line(error)[:limit]}"
    op = unsupported_op(error, patterns)
    return line + (f" (unsupported op: {op})" if op and op.split("::")[-1] not in line else "")
