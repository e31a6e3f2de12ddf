"""What an app bundle needs to know of the pytorch-mobile backend's artifact (model.json's ``runtime``)."""
from __future__ import annotations

from typing import Any

from edgeship.backends.pytorch_mobile.spec import PytorchMobileSpec
from edgeship.results import VariantResult


def runtime_needs(row: VariantResult, options: PytorchMobileSpec.Options, toolchain: dict[str, str]) -> dict[str, Any]:
    """What runs this backend's artifact, for the bundle's model.json: the runtime, the version that wrote
    it and what it needs."""
    details = row.lowering.details
    bytecode = details.get("bytecode_version")
    return {"runtime": "PyTorch Mobile lite interpreter", "written_by": f"torch {toolchain.get('torch', 'unknown')}",
            "bytecode_version": bytecode,
            "needs": f"a lite-interpreter runtime that reads bytecode version {bytecode} and has these operators",
            "operators": details.get("operators"), "android_package": "org.pytorch:pytorch_android_lite"}
