"""The calibration data a build needs, loaded once before anything slow and handed to lowering.

Loaded only when a variant needs it (static int8). Data from the profile's ``[data]`` or the
model spec's; without either, seeded random inputs stand in, and every int8 variant's notes say
so (representative data gives better int8 accuracy). Fewer samples than one batch is an error.
"""
from __future__ import annotations

from edgeship.calibration.dataset import Dataset
from edgeship.calibration.datasets import load_dataset, random_dataset
from edgeship.errors import DataError
from edgeship.profile.models import Profile, Variant
from edgeship.quantize.settings import needs_calibration
from edgeship.spec import ModelSpec

RANDOM_NOTE = "seeded random inputs: no calibration data in the model spec or the profile"


def calibration_variants(profile: Profile) -> list[Variant]:
    """The variants that are calibrated (static int8)."""
    return [v for v in profile.variants if needs_calibration(v.precision, v.quantization)]


def samples_wanted(profile: Profile) -> dict[str, int]:
    """How many calibration samples each calibrated variant draws (its own ``samples``, else the
    profile's ``[calibration] samples``), by variant name; empty when no variant calibrates."""
    default = profile.calibration.samples
    return {v.name: (v.quantization.samples if v.quantization and v.quantization.samples else default)
            for v in calibration_variants(profile)}


def calibration_data(profile: Profile, spec: ModelSpec, source: str | None) -> Dataset | None:
    """The calibration samples the profile's variants need (the most any of them asks for), from
    ``source`` or seeded random inputs; None when no variant calibrates."""
    wanted = samples_wanted(profile)
    if not wanted:
        return None
    settings = profile.calibration
    limit = max(wanted.values())
    if source:
        data = load_dataset(source, spec, "calibration", limit, settings.seed)
    else:
        data = random_dataset(spec, limit, settings.seed)
        data.source = f"{limit} {RANDOM_NOTE}"
    batch = int(spec.inputs[0].shape[0])
    short = {name: min(n, len(data)) for name, n in wanted.items() if min(n, len(data)) < batch}
    if short:
        name, n = next(iter(short.items()))
        raise DataError(f"{data.source}: variant {name} calibrates on {n} sample(s), fewer than one batch "
                        f"of {batch} (the model's input batch size); give more calibration samples")
    return data
