"""Candidate expansion: a variant's ``candidates`` table becomes one variant per combination.

    [[variants]]
    name = "q8"
    backend = "..."          # any backend with its own int8 quantizer
    precision = "int8"
    candidates = { per_channel = [true, false], method = ["minmax", "entropy"] }

gives ``q8-per-channel-minmax``, ``q8-per-channel-entropy``, ``q8-per-tensor-minmax`` and
``q8-per-tensor-entropy``: each is lowered and measured
like any variant, and ``[selection]`` picks among all of them. Expansion also writes the
profile's calibration sample count and seed into every int8 variant its backend quantizes, so a
variant carries everything its quantizer needs.
"""
from __future__ import annotations

import collections
import itertools

from edgeship.backends.registry import SPECS
from edgeship.config import raise_problems
from edgeship.errors import ProfileError
from edgeship.profile.models import Profile, Variant
from edgeship.quantize.settings import QuantizationSettings


def expand_candidates(profile: Profile, source: str) -> None:
    """Replace each variant that has candidates by its combinations; fill calibration defaults."""
    expanded = []
    for variant in profile.variants:
        for v in _combinations(variant):
            if v.precision == "int8" and SPECS[v.backend].quantization is not None:
                q = v.quantization or QuantizationSettings()
                v.quantization = q.model_copy(update={"samples": q.samples or profile.calibration.samples,
                                                      "seed": profile.calibration.seed if q.seed is None else q.seed})
            expanded.append(v)
    clashes = sorted(n for n, count in collections.Counter(v.name for v in expanded).items() if count > 1)
    if clashes:
        raise_problems(source, [f"variant name {n!r} is used twice after expanding candidates; rename the "
                                "variant or its candidate" for n in clashes], ProfileError)
    profile.variants = expanded


def _combinations(variant: Variant) -> list[Variant]:
    """The variant itself, or one copy per combination of its candidate values."""
    if variant.candidates is None or variant.precision != "int8":
        return [variant]  # candidates on a non-int8 variant are reported by the backend check
    fields = {k: v for k, v in variant.candidates.model_dump().items() if v is not None}
    base = variant.quantization or QuantizationSettings()
    out = []
    for values in itertools.product(*fields.values()):
        chosen = dict(zip(fields, values))
        suffix = "-".join(_label(k, v) for k, v in chosen.items())
        out.append(variant.model_copy(update={
            "name": f"{variant.name}-{suffix}" if suffix else variant.name,
            "quantization": base.model_copy(update=chosen), "candidates": None}))
    return out


def _label(field: str, value: bool | int | str) -> str:
    if field == "per_channel":
        return "per-channel" if value else "per-tensor"
    if field == "keep_float":
        return f"float{value}"
    return str(value)
