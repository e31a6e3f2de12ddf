"""The registry: every declared backend is implemented, declares what the profile checks need,
and has its own test module."""
from __future__ import annotations

from pathlib import Path

import pytest

from edgeship.backends.base import Backend
from edgeship.backends.registry import BACKENDS, SPECS
from edgeship.backends.spec import BackendSpec
from edgeship.config import StrictModel
from edgeship.errors import ProfileError
from edgeship.quantize.settings import QuantizationSupport

PRECISIONS = {"fp32", "fp16", "bf16", "int8", "w8"}
CAPTURE_METHODS = {"export", "trace", "script"}


def test_registry_every_backend_is_one_package_with_its_tests() -> None:
    from edgeship.backends.registry import PACKAGES, package_folder

    tests = Path(__file__).parents[1] / "backends"
    for name in SPECS:
        folder = package_folder(name)
        assert (folder / "spec.py").is_file() and (folder / "lower.py").is_file(), name
        assert PACKAGES[name] == f"edgeship.backends.{folder.name}", name
        assert list((tests / folder.name).glob("test_*.py")), f"backend {name} has no tests in {tests / folder.name}"


def test_registry_every_declaration_has_one_implementation_of_it() -> None:
    assert set(BACKENDS) == set(SPECS)
    for name, backend in BACKENDS.items():
        assert isinstance(backend, Backend) and isinstance(backend, SPECS[name]), name


@pytest.mark.parametrize("name", sorted(SPECS))
def test_registry_declarations_are_complete(name: str) -> None:
    spec = SPECS[name]
    assert spec.name == name
    assert spec.suffix.startswith(".") and len(spec.suffix) > 1, spec.suffix
    assert spec.runtime, "no runtime id"
    assert spec.capture_methods and set(spec.capture_methods) <= CAPTURE_METHODS, spec.capture_methods
    assert spec.precisions and set(spec.precisions) <= PRECISIONS, spec.precisions
    assert issubclass(spec.Options, StrictModel)
    assert spec.option_problems({}) == [], "default options must be valid"
    if spec.quantization is not None:
        assert "int8" in spec.precisions
        assert isinstance(spec.quantization, QuantizationSupport)
        assert spec.quantization.default_method in spec.quantization.methods


def test_registry_refuses_a_second_declaration_of_a_name() -> None:
    with pytest.raises(RuntimeError, match="declared twice"):
        type("AnotherOnnx", (BackendSpec,), {"name": "onnx"})
    assert SPECS["onnx"].__name__ == "OnnxSpec"


def test_registry_unknown_backend_names_the_known_ones(tmp_path: Path) -> None:
    from edgeship.profile import load_profile

    (tmp_path / "p.toml").write_text('[[variants]]\nname = "x"\nbackend = "onxx"\n')
    with pytest.raises(ProfileError, match=r"variants\[0\]\.backend.*onnx") as e:
        load_profile(tmp_path / "p.toml")
    assert 'did you mean "onnx"' in str(e.value)


def test_registry_is_readable_without_loading_an_implementation() -> None:
    import subprocess
    import sys

    code = ("import sys; import edgeship.profile; "
            "allowed = lambda m: m.endswith(('.registry', '.settings', '.spec')) or m.count('.') == 2; "
            "loaded = [m for m in sys.modules if m.startswith(('edgeship.lowering.', 'edgeship.quantize.', "
            "'edgeship.backends.')) and not allowed(m)]; print(loaded); assert not loaded, loaded; "
            "assert not {'torch', 'numpy', 'edgeship.devices'} & set(sys.modules), 'heavy import'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_registry_tensorrt_refuses_an_optimization_level_before_8_6() -> None:
    problems = SPECS["tensorrt"].option_problems({"tensorrt_version": "8.5", "builder_optimization_level": 3})
    assert problems and "builder_optimization_level needs TensorRT 8.6 or later, not 8.5" in problems[0]
    assert SPECS["tensorrt"].option_problems({"tensorrt_version": "8.6", "builder_optimization_level": 3}) == []
