"""edgeship: take a trained PyTorch model to the edge and prove it works there."""
from __future__ import annotations

import os

__version__ = "0.1.0"

__all__ = ["__version__", "build"]


def build(*args, **kwargs):  # noqa: ANN002, ANN003 - re-exported lazily to keep `import edgeship` light
    """Build a model for a target; two forms, one pipeline, the same :class:`~edgeship.results.Results`:

    - ``build(module, example_inputs, target="host", calibration=..., evaluation=..., ...)``: a
      ``torch.nn.Module`` in hand (:func:`edgeship.api.build_module`);
    - ``build("host", model="model.toml")``: a model spec file, the demo model without ``model``
      (:func:`edgeship.api.build`, what ``edgeship build`` runs).
    """
    from edgeship import api

    if "module" in kwargs or "example_inputs" in kwargs or (args and not isinstance(args[0], (str, os.PathLike))):
        return api.build_module(*args, **kwargs)
    return api.build(*args, **kwargs)
