"""edgeship: take a trained PyTorch model to the edge and prove it works there."""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "build"]


def build(*args, **kwargs):  # noqa: ANN002, ANN003 - re-exported lazily to keep `import edgeship` light
    """See :func:`edgeship.api.build`."""
    from edgeship.api import build as _build

    return _build(*args, **kwargs)
