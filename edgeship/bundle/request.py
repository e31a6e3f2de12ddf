"""What ``edgeship bundle`` bundles: a finished build found the way ``edgeship build`` writes it
(profile + model spec -> ``artifacts/<target>/<model>/results.json``), and the bundle settings
from the profile's ``[bundle]`` section, overridden by ``--platform`` and ``--variants``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from edgeship.bundle.make import BundleInputs
from edgeship.bundle.platforms import PLATFORMS, settings_problems
from edgeship.config import raise_problems, validate
from edgeship.errors import BundleError
from edgeship.profile import BundleSettings, Profile, load_profile
from edgeship.results import Results
from edgeship.spec import demo_spec_path, load_spec


def bundle_inputs(target: str, model: str | None = None, input_shape: str | None = None,
                  out: str | Path | None = None, platforms: list[str] | None = None,
                  variants: str | None = None) -> BundleInputs:
    """Read the profile, the spec and the build's results.json; BundleError (exit 2) on a mistake."""
    profile = load_profile(target)
    spec = load_spec(model or demo_spec_path(), input_shape)
    build_dir = Path(out) if out else Path("artifacts") / profile.name / spec.name
    results = read_results(build_dir / "results.json", profile.name)
    if results.model.name != spec.name:
        raise BundleError(f"{build_dir / 'results.json'}: holds model {results.model.name!r}, not {spec.name!r}")
    return BundleInputs(profile, spec, results, build_dir, settings(profile, platforms, variants))


def read_results(path: Path, target: str) -> Results:
    try:
        return Results.read(path)
    except FileNotFoundError:
        raise BundleError(f"{path}: no results.json: build first (edgeship build --target {target} ...), "
                          "or point --out at the build's folder") from None
    except ValidationError as e:
        raise BundleError(f"{path}: not a results.json (schema 1): {e.errors(include_url=False)[0]['msg']}") from None


def settings(profile: Profile, platforms: list[str] | None, variants: str | None) -> BundleSettings:
    """The profile's ``[bundle]`` settings with the command line's overrides applied."""
    base: dict[str, Any] = profile.bundle.model_dump(exclude_unset=True) if profile.bundle else {}
    if platforms:
        base["platforms"] = platforms
    if variants:
        base["variants"] = variants if variants in ("passing", "fastest") else [v.strip() for v in variants.split(",")]
    if not base.get("platforms"):
        raise BundleError(f"{profile.path}: the profile has no [bundle] section; pass --platform "
                          f"{' | '.join(PLATFORMS)}")
    source = f"{profile.path} [bundle] with --platform/--variants"
    chosen = validate(base, BundleSettings, source, BundleError, context={"base_dir": Path(str(profile.path)).parent})
    problems = settings_problems(chosen, profile.variants)
    if problems:
        raise_problems(source, problems, BundleError)
    return chosen
