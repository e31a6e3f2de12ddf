"""What an app bundle needs to know of the coreml backend's artifact (model.json's ``runtime``) and
what the ios bundle's Swift loader (``MLModel(contentsOf:configuration:)``) is written from: the
package's feature names (recorded by lowering), its compute units and its inputs' MLMultiArray types."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edgeship.backends.coreml.spec import CoremlSpec
from edgeship.results import VariantResult

if TYPE_CHECKING:
    from edgeship.spec import ModelSpec

# dtype -> MLMultiArrayDataType: Core ML has no int64 arrays, its packages take int64 inputs as int32.
ARRAY_TYPES = {"float32": "float32", "int64": "int32", "int32": "int32", "uint8": "int32"}
# the profile's compute_units -> MLComputeUnits
SWIFT_COMPUTE_UNITS = {"ALL": "all", "CPU_ONLY": "cpuOnly", "CPU_AND_GPU": "cpuAndGPU",
                       "CPU_AND_NE": "cpuAndNeuralEngine"}


def runtime_needs(row: VariantResult, options: CoremlSpec.Options, toolchain: dict[str, str]) -> dict[str, Any]:
    """What runs this backend's artifact, for the bundle's model.json: the runtime, the version that wrote
    it and what it needs."""
    details = row.lowering.details
    target = options.minimum_deployment_target
    return {"runtime": "Core ML", "written_by": f"coremltools {toolchain.get('coremltools', 'unknown')}",
            "needs": f"{target} or later (ML program, specification version {details.get('spec_version')})",
            "minimum_deployment_target": target, "compute_units": options.compute_units,
            "inputs": details.get("inputs"), "outputs": details.get("outputs")}


def snippet_facts(artifact: dict[str, Any], spec: ModelSpec) -> dict[str, Any]:
    """What the Swift loader of this artifact (its model.json entry ``artifact``) is written from: the
    compute units, the package's input and output feature names, each input's MLMultiArray type."""
    runtime = artifact["runtime"]
    return {"compute_units": SWIFT_COMPUTE_UNITS.get(runtime.get("compute_units"), "all"),
            "input_names": [i["name"] for i in runtime.get("inputs") or []] or [i.name for i in spec.inputs],
            "output_name": ((runtime.get("outputs") or [{}])[0]).get("name", "output"),
            "array_types": [ARRAY_TYPES[i.dtype] for i in spec.inputs]}
