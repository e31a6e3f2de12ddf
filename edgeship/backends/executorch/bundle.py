"""What an app bundle needs to know of the executorch backend's artifact (model.json's ``runtime``)."""
from __future__ import annotations

from typing import Any

from edgeship.backends.executorch.spec import ExecutorchSpec
from edgeship.results import VariantResult

DELEGATES = {"xnnpack": "XNNPACK", "coreml": "Core ML", "mps": "MPS", "portable": None}


def runtime_needs(row: VariantResult, options: ExecutorchSpec.Options, toolchain: dict[str, str]) -> dict[str, Any]:
    """What runs this backend's artifact, for the bundle's model.json: the runtime, the version that wrote
    it and what it needs."""
    details = row.lowering.details
    version = toolchain.get("executorch", "unknown")
    minor = ".".join(version.split(".")[:2])
    delegate = DELEGATES.get(options.partitioner, options.partitioner)
    return {"runtime": "ExecuTorch", "written_by": f"executorch {version}",
            "needs": f"an ExecuTorch runtime {minor}.x or the next minor release (the .pte compatibility "
                     "policy guarantees no more; an older runtime may not load it)",
            "delegate": delegate if details.get("delegated_subgraphs") else None,
            "delegated_subgraphs": details.get("delegated_subgraphs"),
            "non_delegated_ops": details.get("non_delegated_ops"),
            "android_package": "org.pytorch:executorch-android", "ios_package": "ExecuTorch (Swift package)"}
