"""Whether this machine has the runtimes a profile's variants are built with: checked with the plan,
before any work, from the installed distributions' metadata (no SDK is imported to find out).

Each backend's declaration names the distributions building its variants needs (``requires``) and the
extra of edgeship that installs them (``extra``). A profile naming a backend whose distributions are
missing stops with one ``MissingRuntimeError`` (exit 2) that names the variants and ends in one pip
line installing every extra they need.
"""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, distribution

from edgeship.backends.registry import SPECS
from edgeship.errors import MissingRuntimeError
from edgeship.profile.models import Profile


def installed(dist: str) -> bool:
    """Whether the Python distribution ``dist`` is installed (its metadata is found)."""
    try:
        distribution(dist)
    except PackageNotFoundError:
        return False
    return True


def missing_for(backend: str) -> list[str]:
    """The distributions building backend ``backend``'s variants needs that are not installed."""
    return [dist for dist in SPECS[backend].requires if not installed(dist)]


def pip_line(extras: set[str], dists: set[str]) -> str:
    """The one command installing ``extras`` of edgeship and ``dists`` (those of a backend without an extra)."""
    words = [f'"edgeship[{",".join(sorted(extras))}]"'] if extras else []
    return " ".join(["pip install", *words, *sorted(dists)])


def require_runtimes(profile: Profile, only: list[str] | None = None) -> None:
    """Stop (MissingRuntimeError, exit 2) when a variant of ``profile`` (of those named ``only``; None: every
    one) needs a distribution that is not installed: the message names each such variant, its backend and
    what is missing, then the pip line."""
    built = [v for v in profile.variants if only is None or v.name in only]
    lines, extras, dists = [], set(), set()
    for backend in dict.fromkeys(v.backend for v in built):
        missing, extra = missing_for(backend), SPECS[backend].extra
        if not missing:
            continue
        variants = ", ".join(v.name for v in built if v.backend == backend)
        lines.append(f"  {variants}: backend {backend} needs {', '.join(missing)}"
                     + (f" (the {extra} extra)" if extra else ""))
        extras |= {extra} if extra else set()
        dists |= set() if extra else set(missing)
    if lines:
        where = f" ({profile.path})" if profile.path else ""
        raise MissingRuntimeError(f"profile {profile.name}{where}: variants need runtimes that are not installed\n"
                                  + "\n".join(lines) + f"\ninstall them with:\n{pip_line(extras, dists)}")
