"""What every backend declares, apart from how it lowers: the base of each ``backends/<name>/spec.py``.

A declaration (a ``BackendSpec`` subclass) names the backend, its file suffix, the runtime the
device runner uses for it, the capture methods it lowers from, its precisions, its own int8
quantizer (``QuantizationSupport``) and its ``Options`` model, and answers the hooks shared code
asks instead of branching on backend names (``reads_cpus``/``cpu_dependence``: what of the target
CPUs its artifact is made from; ``bundle_programs``/``bundle_templates``: what it adds to app
bundles). Declaring the class registers it in ``SPECS`` (``__init_subclass__``);
``backends/registry.py`` imports every backend's declaration, so read ``SPECS`` from there.
Nothing here imports an SDK, the pipeline or a backend.
"""
from __future__ import annotations

from typing import Any, ClassVar, Protocol

from edgeship.config import StrictModel, check
from edgeship.errors import ProfileError
from edgeship.quantize.settings import QuantizationSettings, QuantizationSupport

SPECS: dict[str, type[BackendSpec]] = {}
# A CPU an artifact will run on: (device name, its devices.cpu.cpu_facts(); None or with "error" when unknown).
TargetCpu = tuple[str, dict[str, Any] | None]


class Variant(Protocol):
    """What a backend reads of a profile's variant (``profile.models.Variant`` is one; this package
    does not import the profile, which reads the registry)."""

    name: str
    backend: str
    precision: str
    options: dict[str, Any]
    quantization: QuantizationSettings | None


class BackendSpec:
    """A backend's declaration: name, suffix, runtime, capture methods, precisions, options."""

    name: ClassVar[str]
    suffix: ClassVar[str]
    runtime: ClassVar[str]                      # runner runtime id
    capture_methods: ClassVar[tuple[str, ...]]  # the capture methods it can lower from
    precisions: ClassVar[tuple[str, ...]] = ("fp32",)
    # Its own int8 quantizer (schemes and methods a variant's [quantization] may name), or None.
    quantization: ClassVar[QuantizationSupport | None] = None
    # Whether its artifacts take a model spec's dynamic dimensions (every size from min to max):
    # None when they do, else why not. Precision- or option-specific refusals: dynamic_shape_problems.
    dynamic_shapes: ClassVar[str | None] = "this backend does not declare whether it takes dynamic dimensions"

    # The app bundle platforms (bundle/platforms.py) that take this backend's artifacts.
    bundle_platforms: ClassVar[tuple[str, ...]] = ()
    # The Python distributions besides torch whose versions shape its artifacts: recorded in
    # results.json's toolchain and keying the stage cache, so an upgrade builds them again.
    toolchain: ClassVar[tuple[str, ...]] = ()
    # The extra of edgeship (pyproject.toml's optional-dependencies: pip install "edgeship[<extra>]") that
    # installs what building its variants on this machine needs, and the Python distributions of it a build
    # checks for before any work (profile/runtimes.py, by their metadata: nothing is imported). None and ():
    # torch and the core package are enough. A device's runtime (TensorRT on a Jetson) is not among them.
    extra: ClassVar[str | None] = None
    requires: ClassVar[tuple[str, ...]] = ()
    # Its device-side modules, shipped beside runner.py as <package>_<module>.py: "device" holds its
    # Runner classes (standard library, numpy and its runtime only; the runner finds every
    # *_device.py beside it), others are companions they import (runner.companion).
    device_modules: ClassVar[tuple[str, ...]] = ()
    # The native benchmark program that times its artifacts on a device without Python (Android, over
    # adb), by the program's name; its ``native.py`` holds the class that writes the program's command
    # line and reads its output (a ``devices.native.NativeProgram``). None: no such program.
    native_program: ClassVar[str | None] = None
    # Whether its runner runs in the emulated aarch64 root (devices/armroot.py installs the aarch64
    # wheels of its runtime, or of the runtime its device module falls back to there).
    runs_in_arm_root: ClassVar[bool] = False
    # The programs a platform's bundle ships for this backend's artifacts: platform -> {path in the
    # bundle: path of the file inside this backend's package folder}. A program under ``cpp/`` gets
    # the bundle's shared C++ header beside it.
    bundle_programs: ClassVar[dict[str, dict[str, str]]] = {}
    # How its converter names an operator it cannot take (regular expressions with groups ``op`` and
    # optionally ``ns``), tried before the shared ones (errors.UNSUPPORTED_OP) on a lowering failure.
    unsupported_op_patterns: ClassVar[tuple[str, ...]] = ()
    # What this backend writes into the bundle's shared templates (bundle/fragments.py): slot -> path of a
    # Jinja template inside this backend's package folder, rendered with the shared template's context.
    # "ModelLoader.kt" and "ModelLoader.swift": one artifact's load and run functions (``a``: the
    # artifact); "ModelLoader.swift:imports": what the Swift snippet imports when the bundle holds its
    # artifacts; "README.md:<platform>[-<part>]": its part of the README's "Using it" for a platform.
    bundle_templates: ClassVar[dict[str, str]] = {}

    class Options(StrictModel):
        """No options."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:  # a declaration; implementations inherit their name
            if cls.name in SPECS:
                raise RuntimeError(f"backend {cls.name!r} declared twice")
            SPECS[cls.name] = cls

    @classmethod
    def toolchain_others(cls) -> dict[str, str]:
        """The installed versions of what shapes its artifacts or runs them and is not a Python
        distribution (an npm package), by name, as results.json's toolchain records them. Default: none."""
        return {}

    @classmethod
    def option_problems(cls, options: dict[str, Any]) -> list[str]:
        return check(options, cls.Options)[1]

    @classmethod
    def variant_problems(cls, precision: str, options: dict[str, Any]) -> list[str]:
        """Combinations of precision and options this backend cannot build (checked at plan time)."""
        return []

    @classmethod
    def dynamic_shape_problems(cls, precision: str, options: dict[str, Any]) -> list[str]:
        """Why a variant with this precision and these options cannot take a spec's dynamic
        dimensions (checked at plan time when the spec has some; empty when it can)."""
        return [cls.dynamic_shapes] if cls.dynamic_shapes else []

    @classmethod
    def parse_options(cls, options: dict[str, Any]) -> Any:
        parsed, problems = check(options, cls.Options)
        if problems:
            raise ProfileError("; ".join(problems))
        return parsed

    @classmethod
    def platform_problem(cls, platform: str, options: dict[str, Any]) -> str | None:
        """Why a variant with these options cannot go into a ``platform`` bundle although the backend's
        artifacts can (None: it can)."""
        return None

    @classmethod
    def bundle_ships_runner(cls, platform: str, artifact: dict[str, Any]) -> bool:
        """Whether a ``platform`` bundle holding this artifact (its model.json entry) also ships the device
        runner's files, e.g. for a program the device compiles before the app loads it. Default: no."""
        return False

    @classmethod
    def reads_cpus(cls, variant: Variant) -> bool:
        """Whether lowering ``variant`` chooses a setting by the CPUs its artifact will run on, or checks
        them (the build then probes the target devices' CPUs first). Default: it does not."""
        return False

    @classmethod
    def cpu_dependence(cls, variant: Variant, cpus: list[TargetCpu]) -> dict[str, Any] | None:
        """What of ``cpus`` (the target CPUs; this machine's when no device is named) the variant's
        artifact is made from, as the stage cache keys it: the setting chosen and why, the instruction
        set, the devices lacking an instruction. None: the artifact is the same whatever the CPUs."""
        return None
