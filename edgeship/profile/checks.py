"""Plan-time checks of a profile against the backend registry and the bundle platforms, and of its
variants against the model spec (dynamic dimensions).

Every check collects all of its problems; the loader raises one ``ProfileError`` naming each.
Only declarations are consulted (``lowering.registry``), never a backend's implementation.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from edgeship import shapes
from edgeship.backends.registry import SPECS
from edgeship.errors import one_of
from edgeship.profile.models import Profile, Variant
from edgeship.quantize.settings import QuantizationSettings, QuantizationSupport

if TYPE_CHECKING:
    from edgeship.spec import ModelSpec


def backend_problems(profile: Profile) -> list[str]:
    """Every variant's precision, options, quantization and capture order against its backend."""
    problems: list[str] = []
    for i, v in enumerate(profile.variants):
        spec = SPECS[v.backend]
        where = f"variants[{i}] ({v.name})"
        if v.precision not in spec.precisions:
            problems.append(f"{where}.precision = \"{v.precision}\": backend {v.backend} supports "
                            f"{one_of(spec.precisions)}")
        problems.extend(f"{where}.options: {p}" for p in spec.option_problems(v.options))
        problems.extend(f"{where}: {p}" for p in spec.variant_problems(v.precision, v.options))
        problems.extend(f"{where}: {p}" for p in quantization_problems(v, spec.quantization))
        methods = v.capture or profile.capture.methods
        if not set(methods) & set(spec.capture_methods):
            problems.append(f"{where}: backend {v.backend} captures with {one_of(spec.capture_methods)}, "
                            f"but the capture order allows only {', '.join(methods)}")
    return problems


def dynamic_shape_problems(profile: Profile, spec: ModelSpec, only: list[str] | None = None) -> list[str]:
    """Variants (``only`` these names, when given: a build --variant) whose backend, precision or options
    cannot take the model spec's dynamic dimensions (none when the spec has no dynamic dimensions); each
    names the variant, the dimensions and why."""
    if not shapes.is_dynamic(spec):
        return []
    dims = shapes.describe(spec)
    return [f"variants[{i}] ({v.name}): backend {v.backend} cannot take the model's dynamic dimensions ({dims}): {p}"
            for i, v in enumerate(profile.variants) if only is None or v.name in only
            for p in SPECS[v.backend].dynamic_shape_problems(v.precision, v.options)]


def bundle_problems(profile: Profile) -> list[str]:
    """The ``[bundle]`` section names existing variants that its platforms take."""
    from edgeship.bundle.platforms import settings_problems  # the bundle package imports the profile

    return settings_problems(profile.bundle, profile.variants) if profile.bundle is not None else []


def quantization_problems(variant: Variant, support: QuantizationSupport | None) -> list[str]:
    """Every way ``variant``'s quantization does not fit its backend (empty when it fits)."""
    q, backend = variant.quantization, variant.backend
    if variant.precision != "int8":
        if q is not None or variant.candidates is not None:
            return [f"quantization settings apply to precision int8, but precision is {variant.precision}"]
        return []
    if support is None:
        if q is not None or variant.candidates is not None:
            takers = sorted(name for name, s in SPECS.items() if s.quantization is not None)
            return [f"backend {backend} quantizes int8 with its own options; quantization and candidates "
                    f"apply to {', '.join(takers)}"]
        return []
    q = q or QuantizationSettings()
    problems = []
    if q.scheme not in support.schemes:
        problems.append(f'quantization.scheme = "{q.scheme}": backend {backend} supports {one_of(support.schemes)}')
    methods = [q.method] + list((variant.candidates and variant.candidates.method) or [])
    for method in dict.fromkeys(m for m in methods if m is not None):
        if q.scheme == "dynamic":
            problems.append(f'quantization.method = "{method}": dynamic quantization has no calibration method')
        elif method not in support.methods:
            problems.append(f'quantization.method = "{method}": backend {backend} calibrates with '
                            f"{one_of(support.methods)}")
    if q.scheme == "dynamic" and (q.keep_float or (variant.candidates and variant.candidates.keep_float)):
        problems.append("quantization.keep_float: layers are kept in float only by static quantization")
    return problems
