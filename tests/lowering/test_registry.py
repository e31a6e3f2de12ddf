"""The registry: one entry per backend, each with its own test module."""
from __future__ import annotations

from pathlib import Path

from edgeship.lowering import BACKENDS

MODULE_FOR = {"pytorch-mobile": "mobile"}


def test_registry_every_backend_has_a_test_module() -> None:
    here = Path(__file__).parent
    missing = [n for n in BACKENDS if not (here / f"test_{MODULE_FOR.get(n, n)}.py").exists()]
    assert not missing, f"backends without tests: {missing}"


def test_registry_backends_declare_suffix_runtime_and_capture() -> None:
    for backend in BACKENDS.values():
        assert backend.suffix.startswith(".") and backend.runtime and backend.capture_methods
        assert "fp32" in backend.precisions or backend.precisions
