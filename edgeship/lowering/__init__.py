"""Backends: one module each, registered in one dict.

Adding a backend means writing its module (a ``Backend`` subclass decorated with ``@register``)
and adding one import line at the bottom of this file.
"""
from __future__ import annotations

from edgeship.lowering.base import Artifact, Backend, LowerRequest

BACKENDS: dict[str, Backend] = {}


def register(cls: type[Backend]) -> type[Backend]:
    """Add a backend to the registry under its ``name``."""
    if cls.name in BACKENDS:
        raise RuntimeError(f"backend {cls.name!r} registered twice")
    BACKENDS[cls.name] = cls()
    return cls


from edgeship.lowering import mobile, executorch, onnx, coreml, tensorrt  # noqa: E402,F401  (registration)

__all__ = ["BACKENDS", "Artifact", "Backend", "LowerRequest", "register"]
