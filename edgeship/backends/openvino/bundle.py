"""What an app bundle needs to know of the openvino backend's artifact (model.json's ``runtime``)."""
from __future__ import annotations

from typing import Any

from edgeship.backends.openvino.spec import OpenvinoSpec
from edgeship.results import VariantResult


def runtime_needs(row: VariantResult, options: OpenvinoSpec.Options, toolchain: dict[str, str]) -> dict[str, Any]:
    """What runs this backend's artifact, for the bundle's model.json: the runtime, the version that wrote
    it and what it needs."""
    details = row.lowering.details
    version = str(details.get("openvino") or toolchain.get("openvino") or "unknown").split("-")[0]
    compute = details.get("inference_precision")
    weights = ", ".join(sorted(details.get("weight_constants") or {})) or "not recorded"
    needs = (f"the OpenVINO runtime {version} or later with its CPU plugin (an older one may lack operators of this "
             f"IR), compiling with INFERENCE_PRECISION_HINT {compute}, as recorded in the IR's runtime info "
             "edgeship/inference_precision")
    if compute == "bf16":
        needs += "; a CPU with AVX512-BF16 or AMX"
    return {"runtime": "OpenVINO runtime, CPU plugin", "written_by": f"openvino {version}",
            "format": f"OpenVINO IR (model.xml + model.bin; weights {weights})"
                      + (", int8 FakeQuantize by NNCF" if row.precision == "int8" else ""),
            "inference_precision": compute, "performance_hint": options.performance_hint,
            "converted_from": details.get("converted_from"), "needs": needs,
            "inputs": details.get("inputs"), "outputs": details.get("outputs")}
