"""The one registry of backends: every package under ``edgeship/backends/`` (and under the folders
``EDGESHIP_BACKENDS_PATH`` names) that holds a ``spec.py`` is a backend.

``SPECS`` (name -> declaration) is what the profile loader, the planner, the quantizers and the
bundler read; importing it loads each backend's ``spec.py`` only, never an SDK. ``BACKENDS`` (name
-> implementation) imports a backend's ``lower.py`` when it is first asked for, so a build loads the
backends its profile names and no others. A new backend is a new folder: ``spec.py`` declaring a
``BackendSpec`` subclass, ``lower.py`` a class subclassing that declaration and ``base.Backend``.

Backend packages are found by listing folders, not by import statements, so nothing here names a
backend. ``EDGESHIP_BACKENDS_PATH`` (folders separated by ``os.pathsep``) adds folders of backend
packages kept outside edgeship; their files join edgeship's own in the stage cache's key.
"""
from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import edgeship.backends as package
from edgeship.backends.spec import SPECS, BackendSpec, TargetCpu, Variant
from edgeship.errors import BadInputError

if TYPE_CHECKING:
    from edgeship.backends.base import Backend

PATH_VARIABLE = "EDGESHIP_BACKENDS_PATH"
HERE = Path(__file__).resolve().parent
T = TypeVar("T")


def extra_folders() -> list[Path]:
    """The folders ``EDGESHIP_BACKENDS_PATH`` adds, each holding backend packages (BadInputError, exit 2,
    for one that is not a folder)."""
    folders = [Path(p).resolve() for p in os.environ.get(PATH_VARIABLE, "").split(os.pathsep) if p.strip()]
    for folder in folders:
        if not folder.is_dir():
            raise BadInputError(f"{PATH_VARIABLE}: {folder} is not a folder (it names folders of backend packages, "
                                f"separated by {os.pathsep!r})")
    return folders


def _backend_packages(folder: Path) -> list[str]:
    return sorted(p.parent.name for p in folder.glob("*/spec.py") if p.parent.name.isidentifier())


def _discover() -> dict[str, str]:
    """Import every backend's declaration; each registers itself in SPECS. Returns name -> package.
    Packages from ``EDGESHIP_BACKENDS_PATH`` may not reuse a package name or a backend name."""
    seen = {name: HERE for name in _backend_packages(HERE)}
    for folder in extra_folders():
        for name in _backend_packages(folder):
            if name in seen:
                raise BadInputError(f"{PATH_VARIABLE}: the backend package {name!r} in {folder} has the name of "
                                    f"the one in {seen[name]}; rename its folder")
            seen[name] = folder
        if str(folder) not in package.__path__:
            package.__path__.append(str(folder))
    for name, folder in sorted(seen.items(), key=lambda item: (item[1] != HERE, item[0])):  # edgeship's first
        try:
            importlib.import_module(f"{package.__name__}.{name}.spec")
        except Exception as e:
            if folder == HERE:
                raise
            raise BadInputError(f"{PATH_VARIABLE}: the backend package {folder / name} could not be loaded: "
                                f"{type(e).__name__}: {e}") from e
    return {name: spec.__module__.rsplit(".", 1)[0] for name, spec in SPECS.items()}


PACKAGES = _discover()


def package_folder(name: str) -> Path:
    """The folder of backend ``name``'s package."""
    return Path(importlib.import_module(PACKAGES[name]).__file__ or "").parent


def outside_sources() -> list[Path]:
    """The folders of backend packages that live outside edgeship (their source keys the stage cache)."""
    return sorted(folder for folder in map(package_folder, PACKAGES) if HERE not in folder.parents)


def toolchain_dists() -> tuple[str, ...]:
    """Every backend's ``toolchain`` distributions, each once, in name order."""
    return tuple(sorted({dist for spec in SPECS.values() for dist in spec.toolchain}))


def toolchain_others() -> dict[str, str]:
    """Every backend's ``toolchain_others``: versions of what is not a Python distribution, by name."""
    return {name: version for spec in SPECS.values() for name, version in spec.toolchain_others().items()}


def toolchain() -> dict[str, str]:
    """The build's toolchain as results.json records it and the stage cache keys on it: Python, torch and
    the shared libraries, then every backend's distributions and other versions."""
    from edgeship.results import toolchain_versions

    return toolchain_versions(toolchain_dists(), toolchain_others())


def _device_side() -> Iterator[tuple[str, str, str]]:
    """(backend name, its package, module) for every backend's device-side module."""
    for name, package_name in PACKAGES.items():
        for module in SPECS[name].device_modules:
            yield name, package_name, module


def device_modules() -> dict[str, str]:
    """Every backend's device-side modules: the name each has beside runner.py on a device
    (``<package>_<module>``, e.g. ``aoti_build``) -> its module on the host (``...backends.aoti.build``)."""
    return {f"{package_name.rsplit('.', 1)[1]}_{module}": f"{package_name}.{module}"
            for _, package_name, module in _device_side()}


def device_files() -> dict[str, Path]:
    """The same modules' files, by the file name each has beside runner.py on a device."""
    return {f"{package_name.rsplit('.', 1)[1]}_{module}.py": package_folder(name) / f"{module}.py"
            for name, package_name, module in _device_side()}


class Made(Mapping[str, T]):
    """Name -> an object made on first use by ``make(name)``, over the names ``names()`` lists: the
    registry's lazy tables (each backend's implementation, each runtime's native program)."""

    def __init__(self, names: Callable[[], Iterable[str]], make: Callable[[str], T]) -> None:
        self._names, self._make = names, make
        self._made: dict[str, T] = {}

    def __getitem__(self, name: str) -> T:
        if name not in self._made:
            if name not in self._names():
                raise KeyError(name)
            self._made[name] = self._make(name)
        return self._made[name]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._names()))

    def __len__(self) -> int:
        return len(list(self._names()))


def defined_in(name: str, module: str, base: type[T]) -> list[type[T]]:
    """The classes defined in backend ``name``'s ``<package>.<module>`` that subclass ``base``."""
    found = importlib.import_module(f"{PACKAGES[name]}.{module}")
    return [cls for cls in vars(found).values() if isinstance(cls, type) and cls.__module__ == found.__name__
            and issubclass(cls, base)]


def _implementation(name: str) -> Backend:
    """The class in ``<package>.lower`` that implements backend ``name``'s declaration, made."""
    declared = SPECS[name]
    found = [cls for cls in defined_in(name, "lower", declared) if callable(getattr(cls, "lower", None))]
    if len(found) != 1:
        raise RuntimeError(f"{PACKAGES[name]}.lower must define one class implementing {declared.__name__} and "
                           f"Backend; found {len(found)}")
    return cast("Backend", found[0]())


BACKENDS: Mapping[str, Backend] = Made(lambda: PACKAGES, _implementation)


def depends_on_cpu(variant: Variant) -> bool:
    """Whether lowering ``variant`` chooses a setting by its target CPUs or checks them (its backend's
    ``reads_cpus``): the build then probes the target devices' CPUs before lowering."""
    return SPECS[variant.backend].reads_cpus(variant)


def cpu_dependence(variant: Variant, cpus: list[TargetCpu] | None) -> dict[str, Any] | None:
    """What of the target CPUs (None: this machine's) ``variant``'s artifact is made from, as its
    backend's ``cpu_dependence`` says; None when nothing."""
    from edgeship.quantize.cpu_choice import this_machine

    spec = SPECS[variant.backend]
    if not spec.reads_cpus(variant):
        return None
    return spec.cpu_dependence(variant, this_machine() if cpus is None else cpus)


__all__ = ["BACKENDS", "PACKAGES", "SPECS", "BackendSpec", "Made", "cpu_dependence", "defined_in", "depends_on_cpu",
           "device_files", "device_modules", "outside_sources", "package_folder", "toolchain", "toolchain_dists",
           "toolchain_others"]
