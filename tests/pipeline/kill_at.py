"""Run the ``edgeship`` command and SIGKILL it at a named point of the build, for the fault tests.

    python -m tests.pipeline.kill_at POINT [edgeship arguments ...]

The build is the real one; this driver only wraps one of its functions so that the process kills
itself (``kill -9``: no cleanup, no ``finally``) right before or after it. Nothing in edgeship
knows about it, and the kill lands at the same point every time (a test that watched for files
and killed from outside would race the build).
"""
from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _after(owner: Any, name: str) -> None:
    real = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        _die()
        return out

    setattr(owner, name, wrapper)


def _before(owner: Any, name: str) -> None:
    setattr(owner, name, lambda *args, **kwargs: _die())


def points() -> dict[str, Callable[[], None]]:
    from edgeship.pipeline import output, run

    return {
        "lowered": lambda: _after(run, "lower_variant"),          # the first variant lowered into staging
        "staged": lambda: _before(output.BuildFolder, "publish"),  # reports, bundles, results.json staged
        "merged": lambda: _after(output.BuildFolder, "_merge_variant"),  # publishing: one variant folder in
        "moved": lambda: _before(output.BuildFolder, "_seal"),     # results.json in place, manifest not yet
        "published": lambda: _before(run, "record_build"),         # whole, not yet in the results store
    }


def main(argv: list[str]) -> int:
    points()[argv[0]]()
    from edgeship.cli import main as edgeship

    return edgeship(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
