"""Target profiles: the models (``models``), candidate expansion (``candidates``), the checks
against the backend registry (``checks``) and the loader (``load``).

Modules below this layer (lowering, quantize, calibration) import ``edgeship.profile.models``;
everything else may import from here.
"""
from edgeship.profile.load import load_profile, resolve_profile_path
from edgeship.profile.models import (
                                     NAME_PATTERN,
                                     BundleSettings,
                                     CaptureMethod,
                                     CaptureSettings,
                                     DataOverride,
                                     EvaluationSettings,
                                     Gates,
                                     LatencySettings,
                                     Limits,
                                     Precision,
                                     Profile,
                                     Variant,
)

__all__ = ["NAME_PATTERN", "BundleSettings", "CaptureMethod", "CaptureSettings", "DataOverride",
           "EvaluationSettings", "Gates", "LatencySettings", "Limits", "Precision", "Profile", "Variant",
           "load_profile", "resolve_profile_path"]
