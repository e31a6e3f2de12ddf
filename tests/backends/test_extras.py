"""Each backend's declaration and pyproject.toml agree: the extra a backend names installs what building
its variants needs (``requires``) and what shapes its artifacts (``toolchain``), ``all`` holds every
backend's extra, and the core package holds no backend's runtime."""
from __future__ import annotations

from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from edgeship.backends.registry import SPECS

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
RUNTIMES = {"executorch", "openvino", "nncf", "coremltools", "onnx", "onnxruntime", "onnxscript", "tensorrt"}


def project() -> dict:
    return tomllib.loads(PYPROJECT.read_text())["project"]


def names(requirements: list[str], extras: dict[str, list[str]]) -> set[str]:
    """The distributions ``requirements`` name, an ``edgeship[...]`` among them replaced by its extras' own."""
    found: set[str] = set()
    for line in requirements:
        req = Requirement(line)
        if canonicalize_name(req.name) == "edgeship":
            found |= {n for extra in req.extras for n in names(extras[extra], extras)}
        else:
            found.add(canonicalize_name(req.name))
    return found


def extra_names(extra: str) -> set[str]:
    extras = project()["optional-dependencies"]
    return names(extras[extra], extras)


def core_names() -> set[str]:
    return names(project()["dependencies"], {})


def canonical(dists: tuple[str, ...]) -> set[str]:
    return {canonicalize_name(d) for d in dists}


def test_extras_every_backend_requirement_is_installed_by_its_extra() -> None:
    wrong = {name: sorted(canonical(spec.requires) - extra_names(spec.extra) - core_names()) if spec.extra
             else sorted(canonical(spec.requires) - core_names())
             for name, spec in SPECS.items()}
    assert not {k: v for k, v in wrong.items() if v}, f"requires not in the backend's extra: {wrong}"
    assert all(spec.extra in project()["optional-dependencies"] for spec in SPECS.values() if spec.extra)


def test_extras_every_backend_toolchain_is_its_extras_or_its_devices_runtime() -> None:
    """What shapes a backend's artifacts is installed by its extra (or the core), except the runtime its
    device runs (TensorRT, from JetPack on the Jetson), which the build machine need not have."""
    wrong = {name: sorted(canonical(spec.toolchain) - canonical((spec.runtime,)) - core_names()
                          - (extra_names(spec.extra) if spec.extra else set()))
             for name, spec in SPECS.items()}
    assert not {k: v for k, v in wrong.items() if v}, f"toolchain dists no extra installs: {wrong}"
    assert extra_names("executorch") >= {"executorch"} and "tensorrt" in canonical(SPECS["tensorrt"].toolchain)


def test_extras_all_holds_every_backends_extra_and_the_core_no_runtime() -> None:
    every = set().union(*(extra_names(spec.extra) for spec in SPECS.values() if spec.extra))
    assert every <= extra_names("all") and "tensorrt" not in extra_names("all")
    assert not core_names() & RUNTIMES, f"runtimes in the core dependencies: {sorted(core_names() & RUNTIMES)}"
    assert {"torch", "torchvision", "numpy", "pydantic"} <= core_names()


def test_extras_names_resolve_self_references() -> None:
    extras = {"a": ["onnx>=1", "edgeship[b]"], "b": ["Open_VINO==1; python_version>'3'"]}
    assert names(["edgeship[a]", "numpy"], extras) == {"onnx", "open-vino", "numpy"}
