"""aoti int8: PT2E with X86InductorQuantizer compiled frozen into oneDNN int8 kernels, checked in the
package's generated code; a package without an int8 kernel is refused and removed."""
from __future__ import annotations

import json

import pytest

from edgeship.backends.aoti import lower as aoti_lower
from edgeship.backends.aoti.quantize import checked_int8
from edgeship.errors import LoweringError
from edgeship.quantize.cpu_choice import saturation, this_machine
from tests.quantize.conftest import sqnr_vs_eager


def test_aoti_static_int8_package_calls_onednn_int8_kernels_and_is_close_to_float(
        lower_int8, tiny_model, calib_data) -> None:
    artifact, predict = lower_int8("aoti", "export")
    q = artifact.details["quantization"]
    assert (q["scheme"], q["method"], q["per_channel"], q["samples"]) == ("static", "histogram", True, 16)
    assert q["reduce_range"] is saturation(this_machine())[0]  # 7-bit weights only where u8 x s8 saturates
    calls = aoti_lower.package_calls(artifact.path)  # what the compiled package really calls
    assert calls == artifact.details["kernels"]
    assert set(calls) >= {"_qconv_pointwise_tensor", "_qconv2d_pointwise_binary_tensor"}, calls  # conv(+add+relu)
    assert not any("convolution" in name for name in calls), calls  # no float convolution left
    assert any(note.startswith("oneDNN int8 kernels in the package: _qconv") for note in artifact.notes)
    report = json.loads((artifact.path.parent / "sensitivity.json").read_text())
    assert {row["layer"] for row in report["layers"]} == {"stem.0", "dw", "pw", "head"}
    assert sqnr_vs_eager(tiny_model, predict, calib_data) > 20


def test_aoti_int8_refuses_and_removes_a_package_that_holds_no_int8_kernel(
        lower_int8, tmp_path, monkeypatch) -> None:
    # The float program in place of the quantized one: what Inductor made of PT2E without freezing.
    from edgeship.quantize.quantized import Quantized

    monkeypatch.setattr(aoti_lower, "quantize_x86", lambda request: (
        request.captured.program, Quantized.describe("static", "none")))
    with pytest.raises(LoweringError, match=r"holds no oneDNN int8 kernel \(qconv / qlinear\): .*mkldnn__convolution"):
        lower_int8("aoti", "export", name="float")
    assert not (tmp_path / "float" / "model.pt2").exists()


def test_int8_kernel_check_counts_only_qconv_and_qlinear() -> None:
    assert checked_int8({"_qconv_pointwise_tensor": 2, "addmm_out": 1}) == {"_qconv_pointwise_tensor": 2}
    with pytest.raises(LoweringError, match="holds no oneDNN int8 kernel"):
        checked_int8({"mkldnn__convolution_pointwise": 3, "convolution": 1})
