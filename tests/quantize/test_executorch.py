"""ExecuTorch's int8 path: PT2E with the XNNPACK quantizer, static and dynamic, lowered to XNNPACK."""
from __future__ import annotations

import json

import pytest

from tests.quantize.conftest import sqnr_vs_eager


def test_executorch_static_int8_is_delegated_and_close_to_float(lower_int8, tiny_model, calib_data) -> None:
    artifact, predict = lower_int8("executorch", "export", partitioner="xnnpack")
    q = artifact.details["quantization"]
    assert (q["scheme"], q["method"], q["per_channel"], q["samples"]) == ("static", "histogram", True, 16)
    assert artifact.details["delegated_nodes"] > 0 and "quantize_per_tensor" not in " ".join(
        artifact.details["non_delegated_ops"])
    report = json.loads((artifact.path.parent / "sensitivity.json").read_text())
    assert {row["layer"] for row in report["layers"]} == {"stem.0", "dw", "pw", "head"}
    assert sqnr_vs_eager(tiny_model, predict, calib_data) > 20


def test_executorch_dynamic_int8_needs_no_calibration(lower_int8, tiny_model, calib_data) -> None:
    artifact, predict = lower_int8("executorch", "export", {"scheme": "dynamic"})
    assert artifact.details["quantization"]["scheme"] == "dynamic" and "calibration" not in artifact.details["quantization"]
    assert sqnr_vs_eager(tiny_model, predict, calib_data) > 20


@pytest.mark.slow
def test_executorch_minmax_per_tensor_keeps_the_worst_layer_float(lower_int8, tiny_model, calib_data) -> None:
    artifact, predict = lower_int8("executorch", "export", {"method": "minmax", "per_channel": False, "keep_float": 1})
    q = artifact.details["quantization"]
    assert q["method"] == "minmax" and q["per_channel"] is False
    assert q["kept_float"] == [q["sensitivity"]["worst"][0]["layer"]]
    assert sqnr_vs_eager(tiny_model, predict, calib_data) > 20
