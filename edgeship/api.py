"""The Python API: anything the command line does, ``import edgeship`` does too."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from edgeship.pipeline.plan import BuildRequest
from edgeship.pipeline.run import build as _run_build
from edgeship.results import Results

if TYPE_CHECKING:
    from edgeship.devices.base import DeviceReport
    from edgeship.devices.config import DeviceSet


def build(target: str, model: str | None = None, *, input_shape: str | None = None,
          out: str | Path | None = None, devices_file: str | Path | None = None,
          devices: list[str] | None = None, trust_weights: bool = False, quiet: bool = False,
          debug: bool = False, resume: bool = False, db: str | None = None) -> Results:
    """Build every variant of ``target`` for ``model`` (the demo when None), validate, write results.

    Raises a BadInputError subclass (exit 2) for bad input and GateFailure (exit 3, carrying the
    results) when a validation gate fails.
    """
    request = BuildRequest(target=target, model=model, input_shape=input_shape,
                           out=Path(out) if out else None,
                           devices_file=Path(devices_file) if devices_file else None,
                           device_names=list(devices or []), trust_weights=trust_weights,
                           debug=debug, quiet=quiet, resume=resume, db=db)
    return _run_build(request)


def devices(devices_file: str | Path | None = None) -> "DeviceSet":
    """The devices a devices file defines (DeviceError, exit 2, for a bad file); 'host' always."""
    from edgeship.devices.listing import device_set

    return device_set(devices_file)


def check_device(name: str, devices_file: str | Path | None = None) -> "DeviceReport":
    """Reach device ``name``: OS, architecture, Python, which runtimes import, free disk."""
    return devices(devices_file).device(name).check()
