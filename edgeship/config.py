"""Reading TOML files into strict pydantic models, with one clear message per mistake.

Every profile, model spec and devices file goes through :func:`load_toml`. A mistake is reported
as ``file: key = value: what is wrong; what is allowed (did you mean ...)`` and raised as the
caller's error type (exit code 2). Unknown keys are errors, never warnings.
"""
from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar

import pydantic
import tomllib
from pydantic import BaseModel, ConfigDict

from edgeship.errors import BadInputError, did_you_mean, one_of

ENTRY_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*$"

M = TypeVar("M", bound=BaseModel)


class StrictModel(BaseModel):
    """Base for every configuration model: unknown keys are errors, values are not coerced loosely."""

    model_config = ConfigDict(extra="forbid", frozen=False, validate_default=True)


def existing_path(value: Path | None, info: pydantic.ValidationInfo) -> Path | None:
    """Resolve a path against the folder of the file being read (context ``base_dir``); it must exist."""
    if value is None:
        return None
    base = (info.context or {}).get("base_dir", Path.cwd())
    path = value if value.is_absolute() else Path(base) / value
    if not path.exists():
        raise ValueError(f"path does not exist ({path}); relative paths start at {base}")
    return path.resolve()


def data_source(value: str | None, info: pydantic.ValidationInfo) -> str | None:
    """A data path (must exist; made absolute) or a ``module:callable`` (kept as written)."""
    if value is None or re.match(ENTRY_PATTERN, value):
        return value
    return str(existing_path(Path(value), info))


def read_toml(path: Path, error: type[BadInputError]) -> dict[str, Any]:
    """Parse a TOML file, turning a missing file or a syntax error into ``error``."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise error(f"{path}: file not found") from None
    except IsADirectoryError:
        raise error(f"{path}: is a directory, expected a TOML file") from None
    except tomllib.TOMLDecodeError as e:
        raise error(f"{path}: not valid TOML: {e}") from None


def validate(data: dict[str, Any], model: type[M], source: str, error: type[BadInputError],
             context: dict[str, Any] | None = None) -> M:
    """Validate ``data`` against ``model``; every problem goes into one ``error`` naming ``source``."""
    obj, problems = check(data, model, context)
    if problems:
        raise_problems(source, problems, error)
    return obj  # type: ignore[return-value]


def check(data: dict[str, Any], model: type[M],
          context: dict[str, Any] | None = None) -> tuple[M | None, list[str]]:
    """Validate without raising: the model, or None and one line per problem."""
    try:
        return model.model_validate(data, context=context), []
    except pydantic.ValidationError as e:
        return None, [format_error(model, err) for err in e.errors(include_url=False)]


def raise_problems(source: str, problems: list[str], error: type[BadInputError]) -> None:
    """Raise one ``error`` that lists every problem, headed by the file it came from."""
    if len(problems) == 1:
        raise error(f"{source}: {problems[0]}")
    raise error(f"{source}: {len(problems)} problems:\n  " + "\n  ".join(problems))


def load_toml(path: Path, model: type[M], error: type[BadInputError],
              context: dict[str, Any] | None = None) -> M:
    """Read and validate a TOML file in one step."""
    return validate(read_toml(path, error), model, str(path), error, context)


def format_error(model: type[BaseModel], err: dict[str, Any]) -> str:
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
    value = _short(err.get("input"))
    msg = str(err["msg"]).removeprefix("Value error, ")
    if kind == "literal_error":
        allowed = literal_values(model, loc)
        if allowed:
            msg = f"not allowed; {one_of(allowed)}{did_you_mean(str(err.get('input')), allowed)}"
    return f"{key} = {value}: {msg}"


def render_loc(loc: tuple[Any, ...]) -> str:
    """``("variants", 1, "backend")`` -> ``variants[1].backend``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, str) else f'"{value}"'
    return text if len(text) <= 80 else text[:77] + "..."


def _inner_types(annotation: Any) -> list[Any]:
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
    out: list[Any] = []
    for a in args:
        if a is not type(None) and a is not Ellipsis:
            out.extend(_inner_types(a))
    return out


def _annotation_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[Any]:
    """Every annotation a location may have, walking nested models, lists and dicts."""
    current: list[Any] = [model]
    for part in loc:
        if isinstance(part, int):
            continue
        nxt: list[Any] = []
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


def fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The keys allowed at ``loc`` (the fields of the model found there)."""
    names: list[str] = []
    for annotation in _annotation_at(model, loc):
        for inner in _inner_types(annotation):
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                names.extend(n for n in inner.model_fields if n not in names)
    return names


def literal_values(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The values a Literal field at ``loc`` allows, or an empty list."""
    values: list[str] = []
    for annotation in _annotation_at(model, loc):
        for inner in _inner_types(annotation):
            if typing.get_origin(inner) is Literal:
                values.extend(str(v) for v in typing.get_args(inner))
    return values
