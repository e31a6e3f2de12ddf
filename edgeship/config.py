"""Reading TOML files into strict pydantic models, with one clear message per mistake.

Every profile, model spec and devices file goes through :func:`read_toml` and :func:`validate`. A
mistake is reported as ``file: key = value: what is wrong; what is allowed (did you mean ...)``
and raised as the caller's error type (exit code 2). Unknown keys are errors, never warnings;
values keep their TOML type (``true`` is not 1, ``"10"`` is not 10); nan and inf are refused.
"""
from __future__ import annotations

import math
import os
import re
import reprlib
import tempfile
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import pydantic
import tomllib
from pydantic import BaseModel, BeforeValidator, ConfigDict

from edgeship.errors import BadInputError, OutputError, did_you_mean, first_line, one_of

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

ENTRY_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*$"

MAX_DEPTH = 32      # tables and arrays nested deeper than this are refused (no real file comes close)
MAX_PROBLEMS = 20   # problems listed in one message; the rest are counted
MAX_BYTES = 64 << 20  # larger files are refused unread (and /dev/zero does not read forever)
# A data source that cannot say how many samples it holds (a module:callable) is read up to [evaluation]
# samples; without that setting, up to this many, and one yielding more is refused.
MAX_UNCOUNTED = 10_000
NOT_FINITE = "not a finite number; finite numbers only (nan, inf and numbers beyond +-1.8e308 are refused)"

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")
Loc = tuple[int | str, ...]  # where a value sits in a document, as pydantic reports it: keys and indexes


class StrictModel(BaseModel):
    """Base for every configuration model: unknown keys are errors; every float must be finite
    (nan and inf are refused, in nested models and optional fields too). Files are validated in
    strict mode (:func:`check`), so a value must have the field's type, not one that converts to it."""

    model_config = ConfigDict(extra="forbid", frozen=False, validate_default=True, allow_inf_nan=False)


def _to_path(value: object) -> object:
    return Path(value) if isinstance(value, str) else value


# A path field: a TOML string becomes a Path (strict validation takes no str for a Path otherwise).
PathField = Annotated[Path, BeforeValidator(_to_path)]


def existing_path(value: Path | None, info: pydantic.ValidationInfo) -> Path | None:
    """Resolve a path against the folder of the file being read (context ``base_dir``); it must exist."""
    if value is None:
        return None
    if "\0" in str(value):
        raise ValueError("a path cannot contain a NUL character")
    base = (info.context or {}).get("base_dir", Path.cwd())
    path = value if value.is_absolute() else Path(base) / value
    try:
        found = path.exists()
    except OSError as e:  # a name too long, a loop of links, ...
        raise ValueError(f"cannot use this path: {e.strerror or e}") from None
    if not found:
        raise ValueError(f"path does not exist ({path}); relative paths start at {base}")
    return path.resolve()


def existing_file(value: Path | None, info: pydantic.ValidationInfo) -> Path | None:
    """:func:`existing_path` that must be a file, not a folder."""
    path = existing_path(value, info)
    if path is not None and not path.is_file():
        raise ValueError(f"not a file ({path}{' is a folder' if path.is_dir() else ''}); expected a file")
    return path


def text_file(value: Path | None, info: pydantic.ValidationInfo) -> Path | None:
    """:func:`existing_file` holding UTF-8 text (a labels file), read now so it cannot fail later."""
    path = existing_file(value, info)
    if path is None:
        return None
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ValueError(f"cannot be read ({path}): {e.strerror or e}") from None
    try:
        data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 text ({path}): byte 0x{data[e.start]:02x} at offset {e.start}") from None
    return path


def usable_folder(path: Path, what: str, writable: bool = True) -> Path:
    """``path`` when it is a folder, or can be made one, that edgeship can write in (with ``writable``, the
    folder is made and a file written and removed in it to be sure); OutputError naming ``what`` and the
    path otherwise: a file in the way, a folder that is not writable."""
    if "\0" in str(path):
        raise OutputError(f"{what} {str(path)!r}: a path cannot contain a NUL character")
    existing = Path(path)
    try:
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
    except OSError as e:  # a name too long, a loop of links, ...
        raise OutputError(f"{what} {path}: cannot be used: {e.strerror or e}") from None
    if not existing.is_dir():
        problem = "is a file" if existing == Path(path) else f"cannot be created: {existing} is a file"
        raise OutputError(f"{what} {path}: {problem}; expected a folder")
    if writable and not os.access(existing, os.W_OK | os.X_OK):
        where = "" if existing == Path(path) else f"cannot be created: {existing} "
        raise OutputError(f"{what} {path}: {where}is not writable")
    if writable:  # what access() cannot tell (/proc, a read-only mount seen as writable): try it
        try:
            Path(path).mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=path, prefix=".edgeship-probe-"):
                pass
        except OSError as e:
            raise OutputError(f"{what} {path}: cannot be written: {e.strerror or e}") from None
    return path


def finite(value: T) -> T:
    """``value`` when every float inside it (lists and tables included) is finite, else ValueError
    naming where; for fields typed ``Any``, which pydantic's ``allow_inf_nan`` does not reach."""
    stack: list[tuple[str, object]] = [("", value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError(f"{where.lstrip('.') or 'value'} = {item}: {NOT_FINITE}")
        if isinstance(item, dict):
            stack.extend((f"{where}.{k}", v) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(item))
    return value


def data_source(value: str | None, info: pydantic.ValidationInfo) -> str | None:
    """A data path (must exist; made absolute) or a ``module:callable`` (kept as written)."""
    if value is None or re.match(ENTRY_PATTERN, value):
        return value
    return str(existing_path(Path(value), info))


def read_toml(path: Path, error: type[BadInputError]) -> dict[str, Any]:
    """Parse a TOML file, turning anything that keeps it from being read into ``error``: a missing
    or unreadable file, bytes that are not UTF-8, a syntax error, nesting deeper than MAX_DEPTH."""
    text = decode_utf8(read_bytes(path, error), path, error)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise error(f"{path}: not valid TOML: {e}") from None
    except RecursionError:
        raise error(f"{path}: nested too deeply: arrays or tables at most {MAX_DEPTH} levels deep") from None
    except ValueError as e:  # an integer longer than Python converts (4300 digits)
        raise error(f"{path}: not valid TOML: a number too long to read ({first_line(e)[:80]})") from None
    if _depth(data) > MAX_DEPTH:
        raise error(f"{path}: nested too deeply: arrays or tables at most {MAX_DEPTH} levels deep")
    return data


def read_bytes(path: Path, error: type[BadInputError], what: str = "TOML file", most: int = MAX_BYTES) -> bytes:
    """The bytes of ``what`` at ``path``, at most ``most`` of them; a missing file, a folder, a bad path,
    a larger file or an OS error become ``error`` naming the path."""
    if "\0" in str(path):
        raise error(f"{str(path)!r}: a path cannot contain a NUL character")
    try:
        with open(path, "rb") as f:
            data = f.read(most + 1)
    except FileNotFoundError:
        raise error(f"{path}: {what} not found") from None
    except IsADirectoryError:
        raise error(f"{path}: is a directory, expected a {what}") from None
    except OSError as e:
        raise error(f"{path}: cannot be read: {e.strerror or e}") from None
    if len(data) > most:
        limit = f"{most >> 20} MiB" if most >= 1 << 20 else f"{most:,} bytes"
        raise error(f"{path}: larger than {limit}; not a {what}")
    return data


def decode_utf8(data: bytes, path: Path, error: type[BadInputError]) -> str:
    """UTF-8 text (a leading byte order mark is dropped); other bytes are ``error`` naming the offset."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise error(f"{path}: not UTF-8 text: byte 0x{data[e.start]:02x} at offset {e.start} (line {line}) "
                    "is not valid UTF-8; TOML files must be UTF-8") from None


def _depth(value: object) -> int:
    """How deeply lists and tables nest in ``value`` (iteratively: no recursion limit to hit)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth <= MAX_DEPTH:
            children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
            stack.extend((child, depth + 1) for child in children)
    return deepest


def validate(data: Mapping[str, object], model: type[M], source: str, error: type[BadInputError],
             context: Mapping[str, object] | None = None) -> M:
    """Validate ``data`` against ``model``; every problem goes into one ``error`` naming ``source``."""
    obj, problems = check(data, model, context)
    if problems:
        raise_problems(source, problems, error)
    return obj  # type: ignore[return-value]


def check(data: Mapping[str, object], model: type[M],
          context: Mapping[str, object] | None = None) -> tuple[M | None, list[str]]:
    """Validate without raising: the model, or None and one line per problem. Strict: a value must
    have the field's own type (an int for an int, not true or "10")."""
    # Fields the loader sets (``exclude=True``: where the file was read from) are not keys of the file.
    internal = [k for k in data if k in model.model_fields and model.model_fields[k].exclude]
    problems = [f"unknown key {k}; allowed here: {', '.join(fields_at(model, ()))}" for k in internal]
    try:
        obj = model.model_validate({k: v for k, v in data.items() if k not in internal}, context=context, strict=True)
    except pydantic.ValidationError as e:
        return None, problems + [format_error(model, err) for err in e.errors(include_url=False)]
    return (None, problems) if problems else (obj, [])


def raise_problems(source: str, problems: list[str], error: type[BadInputError]) -> None:
    """Raise one ``error`` that lists the problems (the first MAX_PROBLEMS, then how many more),
    headed by the file they came from."""
    if len(problems) == 1:
        raise error(f"{source}: {problems[0]}")
    shown = problems[:MAX_PROBLEMS]
    more = [f"... and {len(problems) - len(shown)} more"] if len(problems) > len(shown) else []
    raise error(f"{source}: {len(problems)} problems:\n  " + "\n  ".join(shown + more))


def load_toml(path: Path, model: type[M], error: type[BadInputError],
              context: Mapping[str, object] | None = None) -> M:
    """Read and validate a TOML file in one step."""
    return validate(read_toml(path, error), model, str(path), error, context)


def format_error(model: type[BaseModel], err: ErrorDetails) -> str:
    """One line for one pydantic error: key, value, what is wrong, what is allowed."""
    loc = tuple(err["loc"])
    key = render_loc(loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        allowed = list(fields_at(model, loc[:-1]))
        return (f"unknown key {key!s}{did_you_mean(str(loc[-1]), allowed)}; "
                f"allowed here: {', '.join(allowed) or 'none'}")
    if kind == "missing":
        return f"missing required key {key}"
    msg = str(err["msg"]).removeprefix("Value error, ")
    given = err.get("input")
    if kind == "finite_number" or (isinstance(given, float) and not math.isfinite(given)):
        msg = NOT_FINITE
    elif kind in EXPECTED_TYPE:
        msg = f"expected {EXPECTED_TYPE[kind]}, not {toml_type(given)}"
    elif kind in BOUNDS:
        msg += f" (allowed: {allowed_range(model, loc, err.get('ctx') or {})})"
    if kind == "literal_error":
        allowed = literal_values(model, loc)
        if allowed:
            msg = f"not allowed; {one_of(allowed)}{did_you_mean(str(given), allowed)}"
    if not loc:  # a check of the whole document: its input is the document, not worth repeating
        return msg
    if isinstance(given, dict):  # a whole table: name it, do not print it
        return f"{key}: {msg}"
    return f"{key} = {_short(given)}: {msg}"


EXPECTED_TYPE = {"int_type": "an integer", "int_from_float": "an integer", "float_type": "a number",
                 "bool_type": "true or false", "string_type": "a string", "list_type": "an array",
                 "dict_type": "a table", "model_type": "a table", "model_attributes_type": "a table"}


BOUNDS = {"greater_than": "gt", "greater_than_equal": "ge", "less_than": "lt", "less_than_equal": "le"}
BOUND_WORDS = {"gt": "more than {}", "ge": "at least {}", "lt": "less than {}", "le": "at most {}"}


def allowed_range(model: type[BaseModel], loc: Loc, ctx: Mapping[str, object]) -> str:
    """The range a number field at ``loc`` allows, every bound it has (``more than 0 and at most 86400``):
    from the field's declaration, else the bound the error names (``ctx``)."""
    found = {name: value for name, value in ctx.items() if name in BOUND_WORDS}
    for meta in _metadata_at(model, loc):
        for name in BOUND_WORDS:
            value = getattr(meta, name, None)
            if value is not None:
                found.setdefault(name, value)
    return " and ".join(BOUND_WORDS[name].format(_number(found[name])) for name in BOUND_WORDS if name in found)


def _metadata_at(model: type[BaseModel], loc: Loc) -> list[object]:
    """The constraints (annotated_types Gt, Le, ...) declared on the field at ``loc`` (list indexes after the
    field's name skipped): one entry per model the location may be in."""
    names = [i for i, part in enumerate(loc) if isinstance(part, str)]
    if not names:
        return []
    last = names[-1]
    found: list[object] = []
    for annotation in _annotation_at(model, loc[:last]):
        for inner in _inner_types(annotation):
            if isinstance(inner, type) and issubclass(inner, BaseModel) and str(loc[last]) in inner.model_fields:
                found.extend(inner.model_fields[str(loc[last])].metadata)
    return found


def _number(value: object) -> str:
    """A bound for a message as pydantic writes it in its own (``86400``, ``0.5``)."""
    if isinstance(value, (int, float)) and float(value).is_integer():
        return str(int(value))
    return f"{value:g}" if isinstance(value, float) else str(value)


def toml_type(value: object) -> str:
    """What a TOML value is, in TOML's words: ``a string``, ``an integer``, ``a table``, ..."""
    for kind, name in ((bool, "true/false"), (int, "an integer"), (float, "a float"),
                       (str, "a string"), (list, "an array"), (dict, "a table")):
        if isinstance(value, kind):
            return name if kind is not bool else str(value).lower()
    return type(value).__name__


def render_loc(loc: Loc) -> str:
    """``("variants", 1, "backend")`` -> ``variants[1].backend``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _short(value: object) -> str:
    """A value as TOML would write it, cut to 80 characters."""
    if isinstance(value, bool):
        text = str(value).lower()
    elif isinstance(value, str):
        text = f'"{value}"' if value.isprintable() else repr(value)
    else:
        text = reprlib.repr(value) if isinstance(value, (list, dict)) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _inner_types(annotation: object) -> list[object]:
    """The types inside Optional[...], list[...], dict[..., X], Annotated[...] and unions."""
    origin = typing.get_origin(annotation)
    if origin is None:
        return [annotation]
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _inner_types(args[0])
    if origin is dict:
        return _inner_types(args[1])
    if origin is Literal:
        return [annotation]
    out: list[object] = []
    for a in args:
        if a is not type(None) and a is not Ellipsis:
            out.extend(_inner_types(a))
    return out


def _annotation_at(model: type[BaseModel], loc: Loc) -> list[object]:
    """Every annotation a location may have, walking nested models, lists and dicts."""
    current: list[object] = [model]
    for part in loc:
        if isinstance(part, int):
            continue
        nxt: list[object] = []
        for t in current:
            for inner in _inner_types(t):
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    field = inner.model_fields.get(str(part))
                    if field is not None:
                        nxt.append(field.annotation)
                elif typing.get_origin(t) is dict or isinstance(t, types.GenericAlias):
                    nxt.append(inner)
        current = nxt
    return current


def fields_at(model: type[BaseModel], loc: Loc) -> list[str]:
    """The keys allowed at ``loc`` (the fields of the model found there)."""
    names: list[str] = []
    for annotation in _annotation_at(model, loc):
        for inner in _inner_types(annotation):
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                names.extend(n for n, f in inner.model_fields.items() if n not in names and not f.exclude)
    return names


def literal_values(model: type[BaseModel], loc: Loc) -> list[str]:
    """The values a Literal field at ``loc`` allows, or an empty list."""
    values: list[str] = []
    for annotation in _annotation_at(model, loc):
        for inner in _inner_types(annotation):
            if typing.get_origin(inner) is Literal:
                values.extend(str(v) for v in typing.get_args(inner))
    return values
