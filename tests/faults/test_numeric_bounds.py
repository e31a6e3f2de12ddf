"""Numbers with no upper bound overflowed where they were used: ``[latency] timeout_s = 1e10`` passed the
profile's checks and ended the measure step with an OverflowError traceback (exit 1), and beyond 4.29e9 a
timeout overflows ``signal.alarm``. Every number of a profile and of a devices file has an upper bound now,
checked when the file is read: exit 2 naming the file, the key, the value and the allowed range."""
from __future__ import annotations

import types
import typing
from pathlib import Path

import pydantic
import pytest

from edgeship.cli import main
from edgeship.devices.config import CONFIGS
from edgeship.profile import Profile
from tests.conftest import write_profile

ORT = """
[[variants]]
name = "ort"
backend = "onnx"
"""


def _bounded(metadata: list[object]) -> bool:
    found = [m for item in metadata for m in [item, *getattr(item, "metadata", [])]]
    return any(getattr(m, "le", None) is not None or getattr(m, "lt", None) is not None for m in found)


def unbounded(model: type[pydantic.BaseModel], seen: set[type] | None = None) -> list[str]:
    """Every number field (nested models, lists and unions followed) of ``model`` without an upper bound."""
    seen = set() if seen is None else seen
    if model in seen:
        return []
    seen.add(model)
    found = []
    for name, info in model.model_fields.items():
        found += [f"{model.__name__}.{name}" + where for where in _leaves(info.annotation, list(info.metadata), seen)]
    return found


def _leaves(annotation: object, metadata: list[object], seen: set[type]) -> list[str]:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _leaves(args[0], metadata + list(args[1:]), seen)
    if origin in (typing.Union, types.UnionType):
        return [w for a in args for w in _leaves(a, metadata, seen)]
    if origin is not None:  # list[...], dict[...]: the items' own constraints
        return [f"[{i}]" + w for i, a in enumerate(args) for w in _leaves(a, [], seen)]
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return [" -> " + w for w in unbounded(annotation, seen)]
    if annotation in (int, float) and not _bounded(metadata):
        return [""]
    return []


def test_profile_every_number_has_an_upper_bound() -> None:
    assert unbounded(Profile) == []


def test_backend_options_every_number_has_an_upper_bound() -> None:
    """A variant's ``options`` are each backend's own model, checked at load like the rest of the profile."""
    from edgeship.backends.registry import SPECS

    assert [f"{name}: {field}" for name, spec in sorted(SPECS.items()) for field in unbounded(spec.Options)] == []


def test_devices_every_number_has_an_upper_bound() -> None:
    assert [w for config in CONFIGS.values() for w in unbounded(config)] == []


def test_profile_timeout_beyond_its_bound_exits_2_naming_file_key_value_and_range(tmp_path: Path, capsys) -> None:
    profile = write_profile(tmp_path, ORT, extra="")
    profile.write_text(profile.read_text().replace("threads = 1", "threads = 1\ntimeout_s = 1e10"))
    assert main(["build", "--target", str(profile), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert (f"edgeship: error: {profile}: latency.timeout_s = 10000000000.0: Input should be less than or equal to "
            "86400 (allowed: more than 0 and at most 86400)") in err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


@pytest.mark.parametrize(("line", "key", "allowed"), [
    ("[limits]\nlowering_s = 1e6", "limits.lowering_s", "more than 0 and at most 86400"),
    ("[evaluation]\nseed = -1", "evaluation.seed", "at least 0 and at most 4294967295"),
    ("[calibration]\nsamples = 100000000", "calibration.samples", "at least 1 and at most 1000000"),
])
def test_profile_numbers_out_of_range_are_refused_with_the_range(tmp_path: Path, line: str, key: str,
                                                                 allowed: str) -> None:
    from edgeship.errors import ProfileError
    from edgeship.profile import load_profile

    (tmp_path / "p.toml").write_text(f"{line}\n{ORT}")
    with pytest.raises(ProfileError, match=rf"p.toml: {key} = .*\(allowed: {allowed}\)"):
        load_profile(tmp_path / "p.toml")
