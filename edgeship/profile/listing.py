"""What ``edgeship targets`` lists and ``edgeship targets show NAME`` prints: every profile ``--target
NAME`` accepts, and one profile as a build uses it.

The names are exactly those :func:`~edgeship.profile.load.resolve_profile_path` resolves: the working
folder's ``targets/*.toml`` (a project's own profiles) first, then edgeship's built-in ones; a project
profile with a built-in's name hides the built-in one, as it does for ``--target``. Each profile is read
and checked as a build reads it; one that does not load is listed with its error.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgeship.backends.registry import SPECS
from edgeship.errors import BadInputError
from edgeship.profile.load import PROJECT_TARGETS, load_profile, profile_files, profile_folders
from edgeship.profile.models import Profile

BUILT_IN, PROJECT = "built in", "this project"


@dataclass
class TargetEntry:
    """One profile ``--target NAME`` accepts: its name, file, where it comes from (``built in`` or ``this
    project``: the working folder's targets/), the profile read and checked, or the error reading it,
    and the built-in profile of the same name it hides."""

    name: str
    path: Path
    origin: str
    profile: Profile | None = None
    error: str | None = None
    hides: Path | None = None


def list_targets(search: list[Path] | None = None) -> list[TargetEntry]:
    """Every profile ``--target NAME`` accepts (``search``: the folders it looks in, first match first),
    sorted by name, each loaded."""
    folders = search or profile_folders()
    entries = []
    for name, path in profile_files(folders).items():
        origin = BUILT_IN if path.parent.resolve() == PROJECT_TARGETS.resolve() else PROJECT
        later = [f / path.name for f in folders[folders.index(path.parent) + 1:] if (f / path.name).is_file()]
        hidden = [p for p in later if p.resolve() != path.resolve()]
        entry = TargetEntry(name, path, origin, hides=hidden[0] if hidden else None)
        try:
            entry.profile = load_profile(path)
        except BadInputError as e:
            entry.error = str(e)
        entries.append(entry)
    return entries


def resolved(profile: Profile) -> dict[str, Any]:
    """Every setting of ``profile`` as a build uses it, defaults filled in (null: unset, the build's own
    choice, e.g. latency threads = the device's cores): the profile's fields, and for each variant (after
    candidate expansion) its backend's options with their defaults, its gates (the profile's with its
    overrides) and the capture methods its backend tries, in order. ``devices``: those measured on
    without --device (this machine when the profile names none)."""
    doc: dict[str, Any] = {"name": profile.name, "path": str(profile.path) if profile.path else None,
                           **profile.model_dump(mode="json", exclude={"name"})}
    for variant, out in zip(profile.variants, doc["variants"]):
        spec = SPECS[variant.backend]
        out["options"] = spec.parse_options(variant.options).model_dump(mode="json")
        out["gates"] = profile.gates_for(variant).model_dump(mode="json")
        out["capture"] = [m for m in variant.capture or profile.capture.methods if m in spec.capture_methods]
    doc["devices"] = profile.devices or ["host"]
    return doc
