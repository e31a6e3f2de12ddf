"""The app platforms a bundle is made for: where each one's artifacts go in the zip, its loading
snippet, whether it takes the variant's whole folder (scripts and settings beside the model) and
whether it is also written unpacked (a static site). Which backends' artifacts go into which
platform each backend declares (``bundle_platforms``, ``platform_problem`` in its ``spec.py``).

android: ``assets/`` with a Kotlin loading snippet; ios: ``Models/`` with a Swift snippet; jetson:
the variants' whole folders (an engine is built on the device from what they hold) and the device
runner; web: a static site (a demo page, an ES module that loads and runs the model, the runtime's
wasm files) under ``models/``, unpacked beside the zip by ``edgeship bundle``; linux: ``models/``
with a C++ application (``cpp/``: CMake, LibTorch; linux.py); x86: ``models/<variant>/`` with
Python programs and a C++ one (x86.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgeship.backends.registry import SPECS


@dataclass(frozen=True)
class Platform:
    """Where a platform's artifacts go in the zip; the backends it takes are those that name it
    (``BackendSpec.bundle_platforms``)."""

    name: str
    folder: str
    snippet: str | None       # template under bundle/templates, rendered to the same name without .j2
    whole_folder: bool        # copy the variant's folder (scripts beside the model), not only the artifact
    unpacked: bool = False    # also written as a folder beside the zip (a static site, ready to serve)
    by_variant: bool = False  # each artifact (file or folder) under <folder>/<variant>/ by its own name

    @property
    def backends(self) -> tuple[str, ...]:
        """The backends whose artifacts go into this platform's bundles."""
        return tuple(name for name, spec in SPECS.items() if self.name in spec.bundle_platforms)

    def refuses(self, backend: str, options: dict[str, Any]) -> str | None:
        """None when this platform takes such an artifact, else why not."""
        if backend not in self.backends:
            return f"{self.name} bundles take {' and '.join(self.backends)} artifacts, not {backend}"
        return SPECS[backend].platform_problem(self.name, options)


PLATFORMS: dict[str, Platform] = {
    "android": Platform("android", "assets", "ModelLoader.kt.j2", False),
    "ios": Platform("ios", "Models", "ModelLoader.swift.j2", False),
    "jetson": Platform("jetson", "models", None, True),
    "web": Platform("web", "models", None, False, unpacked=True),
    "linux": Platform("linux", "models", None, False),
    "x86": Platform("x86", "models", None, False, by_variant=True),
}


def settings_problems(bundle: Any, variants: list[Any]) -> list[str]:
    """Problems of a profile's ``[bundle]`` section against its variants, one line each."""
    by_name = {v.name: v for v in variants}
    problems = []
    named = bundle.variants if isinstance(bundle.variants, list) else None
    for i, name in enumerate(named or []):
        if name not in by_name:
            from edgeship.errors import did_you_mean

            problems.append(f"bundle.variants[{i}] = \"{name}\": no such variant; the profile has "
                            f"{', '.join(by_name)}{did_you_mean(name, by_name)}")
        elif all(PLATFORMS[p].refuses(by_name[name].backend, by_name[name].options) for p in bundle.platforms):
            reasons = "; ".join(PLATFORMS[p].refuses(by_name[name].backend, by_name[name].options) or ""
                                for p in bundle.platforms)
            problems.append(f"bundle.variants[{i}] = \"{name}\": no platform listed takes it ({reasons})")
    pool = [by_name[n] for n in named if n in by_name] if named else variants
    for i, platform in enumerate(bundle.platforms):
        if all(PLATFORMS[platform].refuses(v.backend, v.options) for v in pool):
            problems.append(f"bundle.platforms[{i}] = \"{platform}\": no variant of this profile goes into it; "
                            f"{platform} bundles take {' and '.join(PLATFORMS[platform].backends)} artifacts")
    return problems
