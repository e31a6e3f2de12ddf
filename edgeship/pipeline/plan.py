"""The plan: everything a build needs, read and checked before the first slow step.

A typo in a profile, a model spec or a devices file fails here, in about a second, before the
model is imported or anything is lowered.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from edgeship.cache import ROOT_ENV, default_cache
from edgeship.config import usable_folder
from edgeship.devices import Device
from edgeship.errors import DeviceError, ProfileError, did_you_mean
from edgeship.profile import Profile, load_profile
from edgeship.profile.checks import dynamic_shape_problems
from edgeship.profile.runtimes import require_runtimes
from edgeship.results import REFERENCE
from edgeship.spec import ModelSpec, demo_spec_path, load_spec
from edgeship.store import ResultsStore


@dataclass
class BuildRequest:
    """What the user asked for (the command line's ``build`` arguments)."""

    target: str
    model: str | None = None
    spec: ModelSpec | None = None  # a model spec already made (the object API: edgeship.api.build_module); not model
    input_shape: str | None = None
    out: Path | None = None
    devices_file: Path | None = None
    device_names: list[str] = field(default_factory=list)
    trust_weights: bool = False
    debug: bool = False
    quiet: bool = False
    resume: bool = False
    remeasure: bool = False
    no_wait: bool = False         # another build holding --out: stop (exit 2) instead of waiting
    db: str | None = None
    # build --variant: only these variants of the profile are lowered and measured (with the eager
    # reference); None: every variant.
    variants: list[str] | None = None
    # Replaces each resolved device (edgeship matrix on Ray: a device measured on the node that
    # owns it); None: the devices as the devices file makes them.
    device_wrapper: Callable[[Device], Device] | None = None
    matrix: str | None = None     # the matrix run this build belongs to (recorded in the results store)


@dataclass
class Plan:
    """A checked build: profile, model spec, output folder and the devices to measure on."""

    request: BuildRequest
    profile: Profile
    spec: ModelSpec
    out_dir: Path
    devices: list[Device]
    store: ResultsStore | None = None
    made: list[Path] = field(default_factory=list)  # the folders of out_dir this build made, innermost first
    # build --variant: the variants asked for, each once, in the profile's order; None: every variant.
    requested: list[str] | None = None

    def builds(self, name: str) -> bool:
        """Whether this build lowers and measures variant ``name`` (the eager reference: always)."""
        return self.requested is None or name == REFERENCE or name in self.requested

    @property
    def evaluation_source(self) -> str | None:
        return self.profile.data.evaluation or self.spec.data.evaluation

    @property
    def calibration_source(self) -> str | None:
        return self.profile.data.calibration or self.spec.data.calibration

    @property
    def sizes_source(self) -> str | None:
        return self.spec.data.sizes


def make_plan(request: BuildRequest) -> Plan:
    """Read and validate the profile, that the runtimes its variants are built with are installed, the
    model spec, the output and cache folders and the devices (ProfileError, MissingRuntimeError,
    ModelSpecError, OutputError, ... exit 2)."""
    profile = load_profile(request.target)
    requested = requested_variants(profile, request.variants)
    require_runtimes(profile, requested)
    spec = request.spec if request.spec is not None else load_spec(request.model or demo_spec_path(),
                                                                    request.input_shape)
    problems = dynamic_shape_problems(profile, spec, requested)
    if problems:
        raise ProfileError(f"profile {profile.name} with model {spec.source or spec.name}: " + "; ".join(problems)
                           + " (use another backend or precision for this model, or leave its dimensions fixed)")
    out_dir = Path(request.out) if request.out else Path("artifacts") / profile.name / spec.name
    devices, store = resolve_devices(request, profile.devices), ResultsStore(request.db)
    if request.device_wrapper is not None:
        devices = [request.device_wrapper(d) for d in devices]
    # Last, as they make the folders: a bad device or store leaves no empty output folder behind.
    usable_folder(default_cache().root, f"cache folder (${ROOT_ENV})" if os.environ.get(ROOT_ENV) else "cache folder")
    made = [p for p in (out_dir, *out_dir.parents) if not p.exists()]
    usable_folder(out_dir, "--out" if request.out else "output folder")
    return Plan(request, profile, spec, out_dir, devices, store, made, requested)


def requested_variants(profile: Profile, names: list[str] | str | None) -> list[str] | None:
    """The variants ``build --variant`` asks for, in the profile's order and each once; None for every
    variant. A name the profile does not have is a ProfileError (exit 2) naming the profile file and
    listing its variants, before any work."""
    if names is None:
        return None
    names = [names] if isinstance(names, str) else list(names)  # the Python API: one name is one variant
    known = [v.name for v in profile.variants]
    for name in names:
        if name not in known:
            always = f" (the {REFERENCE} reference is built with any of them)" if name == REFERENCE else ""
            raise ProfileError(f"--variant {name}: {profile.path or profile.name} has no variant {name!r}; its "
                               f"variants: {', '.join(known)}{did_you_mean(name, known)}{always}")
    if not names:
        raise ProfileError(f"--variant: no variant named; {profile.path or profile.name} has {', '.join(known)}")
    return [n for n in known if n in names]


def resolve_devices(request: BuildRequest, defaults: list[str] | None = None) -> list[Device]:
    """The devices to measure on: --device names, else the profile's ``devices``, else 'host'.
    Without a devices file only the built-in devices are known (devices/config.BUILT_IN); a profile whose
    devices are not all built in then measures on 'host' (its devices need --devices)."""
    from edgeship.devices.config import BUILT_IN, DeviceSet, load_devices

    if request.devices_file is not None:
        return load_devices(request.devices_file).select(request.device_names or defaults or ["host"])
    unknown = [n for n in request.device_names if n not in BUILT_IN]
    if unknown:
        raise DeviceError(f"--device {unknown[0]}: unknown device; without --devices FILE only "
                          f"the built-in devices are known ({', '.join(BUILT_IN)}){did_you_mean(unknown[0], BUILT_IN)}")
    built_in = defaults if defaults and all(n in BUILT_IN for n in defaults) else ["host"]
    return DeviceSet("the built-in devices", {}).select(request.device_names or built_in)
