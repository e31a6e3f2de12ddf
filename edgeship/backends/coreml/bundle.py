"""What an app bundle needs to know of the coreml backend's artifact (model.json's ``runtime``)."""
from __future__ import annotations

from typing import Any

from edgeship.backends.coreml.spec import CoremlSpec
from edgeship.results import VariantResult


def runtime_needs(row: VariantResult, options: CoremlSpec.Options, toolchain: dict[str, str]) -> dict[str, Any]:
    """What runs this backend's artifact, for the bundle's model.json: the runtime, the version that wrote
    it and what it needs."""
    details = row.lowering.details
    target = options.minimum_deployment_target
    return {"runtime": "Core ML", "written_by": f"coremltools {toolchain.get('coremltools', 'unknown')}",
            "needs": f"{target} or later (ML program, specification version {details.get('spec_version')})",
            "minimum_deployment_target": target, "compute_units": options.compute_units,
            "inputs": details.get("inputs"), "outputs": details.get("outputs")}
