"""The matrix file: which models are built for which targets and measured on which devices.

    # examples/matrix.toml
    models = ["demo"]                 # "demo" (the built-in model) or model.toml paths, relative to this file
    targets = ["host", "android"]     # profile names (targets/NAME.toml) or profile paths
    devices = ["host"]                # device names: "host", or names in devices_file
    # devices_file = "devices.toml"   # relative to this file
    # num_cpus = 1                    # CPUs a build task asks Ray for
    # retries = 2                     # times Ray runs a measurement again after its worker or node died

Every (model, target) is one build, measured on every device of the list. Read and checked like a
profile: a mistake is a ``MatrixError`` (exit 2) naming the file, the key and what is allowed.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field, field_validator

from edgeship.config import StrictModel, read_toml, validate
from edgeship.errors import BadInputError
from edgeship.spec import demo_spec_path

DEMO = "demo"


class MatrixError(BadInputError):
    """A matrix file, or a matrix run's options, that cannot be used."""


class MatrixFile(StrictModel):
    """A matrix file's contents."""

    models: list[str] = Field(min_length=1, description='Model specs: "demo" or model.toml paths (relative to the '
                                                        "matrix file).")
    targets: list[str] = Field(min_length=1, description="Target profiles: names (targets/NAME.toml) or paths.")
    devices: list[str] = Field(default_factory=lambda: ["host"], min_length=1,
                               description='Devices every build is measured on: "host" or names in devices_file.')
    devices_file: str | None = Field(None, description="devices.toml naming the devices (relative to the matrix file).")
    num_cpus: float = Field(1.0, gt=0, description="CPUs each build task asks Ray for.")
    retries: int = Field(2, ge=0, le=10, description="Times Ray runs a measurement again when its worker or node "
                                                      "died.")

    @field_validator("models", "targets", "devices")
    @classmethod
    def _unique(cls, values: list[str]) -> list[str]:
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            raise ValueError(f"listed twice: {', '.join(twice)}")
        return values


@dataclass(frozen=True)
class Cell:
    """One build of the matrix: a model spec (a path) for a target profile."""

    model: str          # the spec path given to the build
    label: str          # the model's name (the spec's)
    target: str         # the profile given to the build (a name or a path)
    target_name: str    # the profile's name

    @property
    def folder(self) -> str:
        """``<target>/<model>``: where the build goes under --out, as under artifacts/ for edgeship build."""
        return f"{self.target_name}/{self.label}"


@dataclass
class Matrix:
    """A checked matrix file, paths resolved."""

    path: Path
    models: list[tuple[str, str]]   # (spec name, spec path)
    targets: list[tuple[str, str]]  # (profile name, as given to the build)
    devices: list[str]
    devices_file: Path | None
    num_cpus: float
    retries: int
    run_id: str = ""    # names this run in the results store (builds.matrix): the file and a start time

    def cells(self) -> list[Cell]:
        return [Cell(spec, label, target, name) for label, spec in self.models for name, target in self.targets]


def load_matrix(path: Path | str) -> Matrix:
    """Read and check a matrix file (MatrixError, exit 2): the keys, then every model spec, profile
    and devices file it names, so a typo fails before the first build."""
    from edgeship.pipeline.plan import BuildRequest, resolve_devices
    from edgeship.profile import load_profile
    from edgeship.spec import load_spec

    path = Path(path)
    data = read_toml(path, MatrixError)
    parsed = validate(data, MatrixFile, str(path), MatrixError)
    base = path.resolve().parent

    def relative(value: str) -> Path:
        return Path(value) if Path(value).is_absolute() else base / value

    models = [(m, str(demo_spec_path() if m == DEMO else relative(m))) for m in parsed.models]
    devices_file = relative(parsed.devices_file) if parsed.devices_file else None
    targets = [t if not (t.endswith(".toml") or "/" in t) else str(relative(t)) for t in parsed.targets]
    problems: list[str] = []
    names: dict[str, str] = {}
    for i, (written, spec) in enumerate(models):
        problems += _problem(f"models[{i}] = {written!r}",
                             lambda spec=spec: names.setdefault(spec, load_spec(spec).name))
    for i, target in enumerate(targets):
        problems += _problem(f"targets[{i}] = {parsed.targets[i]!r}",
                             lambda target=target: names.setdefault(target, load_profile(target).name))
    request = BuildRequest(target=targets[0], devices_file=devices_file, device_names=list(parsed.devices))
    problems += _problem("devices", lambda: resolve_devices(request))
    if problems:
        raise MatrixError(f"{path}: " + "; ".join(problems))
    twice = [n for group in ([names[s] for _, s in models], [names[t] for t in targets])
             for n, count in Counter(group).items() if count > 1]
    if twice:
        raise MatrixError(f"{path}: two models or two targets have the same name ({', '.join(sorted(twice))}): their "
                          "builds would go into one folder")
    from edgeship.results import now_utc

    return Matrix(path, [(names[s], s) for _, s in models], [(names[t], t) for t in targets], list(parsed.devices),
                  devices_file, parsed.num_cpus, parsed.retries, f"{path.name}@{now_utc()}")


def _problem(where: str, check: Callable[[], object]) -> list[str]:
    """The BadInputError ``check`` raises, prefixed with ``where``; nothing when it passes."""
    try:
        check()
    except BadInputError as e:
        return [f"{where}: {e}"]
    return []
