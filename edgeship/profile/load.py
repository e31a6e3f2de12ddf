"""Finding and reading a target profile: ``host`` -> ``targets/host.toml``, validated whole."""
from __future__ import annotations

import re
from pathlib import Path

from edgeship.config import raise_problems, read_toml, validate
from edgeship.errors import ProfileError, did_you_mean
from edgeship.profile.candidates import expand_candidates
from edgeship.profile.checks import backend_problems, bundle_problems
from edgeship.profile.models import NAME_PATTERN, Profile

# edgeship's own profiles: the package's targets/ (package data), in a checkout a link to the top-level targets/.
PROJECT_TARGETS = Path(__file__).resolve().parents[1] / "targets"


def profile_folders() -> list[Path]:
    """Where ``--target NAME`` looks, first match first: the working folder's ``targets/`` (a project's
    own profiles), then edgeship's built-in ones."""
    return [Path.cwd() / "targets", PROJECT_TARGETS]


def profile_files(search: list[Path] | None = None) -> dict[str, Path]:
    """Every profile name ``--target NAME`` accepts, with the file it resolves to (a name in an earlier
    folder hides the same name in a later one), sorted by name."""
    found: dict[str, Path] = {}
    for folder in search or profile_folders():
        for path in sorted(folder.glob("*.toml")) if folder.is_dir() else []:
            if re.match(NAME_PATTERN, path.stem) and path.is_file():
                found.setdefault(path.stem, path)
    return dict(sorted(found.items()))


def resolve_profile_path(target: str, search: list[Path] | None = None) -> Path:
    """``host`` -> ``targets/host.toml`` (the working folder's first, then edgeship's own); a path stays a path."""
    if target.endswith(".toml") or "/" in target or "\\" in target:
        return Path(target)
    if not re.match(NAME_PATTERN, target):
        raise ProfileError(f"target {target!r}: not a profile name or a .toml path")
    dirs = search or profile_folders()
    for d in dirs:
        if (d / f"{target}.toml").is_file():
            return d / f"{target}.toml"
    known = list(profile_files(dirs))
    raise ProfileError(f"target {target!r}: no {target}.toml in {' or '.join(map(str, dirs))}; known targets: "
                       f"{', '.join(known) or 'none'}{did_you_mean(target, known)}")


def load_profile(target: str | Path) -> Profile:
    """Read and fully validate a profile, backend options included (ProfileError, exit 2)."""
    path = resolve_profile_path(str(target))
    data = read_toml(path, ProfileError)
    data.setdefault("name", path.stem)
    profile = validate(data, Profile, str(path), ProfileError, context={"base_dir": path.parent})
    profile.path = path
    expand_candidates(profile, str(path))
    for problems in (backend_problems(profile), bundle_problems(profile)):
        if problems:
            raise_problems(str(path), problems, ProfileError)
    return profile
