"""aoti int8: PT2E with X86InductorQuantizer compiled frozen into oneDNN int8 kernels, checked in the
package's generated code; a package without an int8 kernel is refused and removed."""
from __future__ import annotations

import json
import re

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


def test_aoti_int8_of_a_dynamic_model_runs_at_each_size_and_is_not_held_to_fp32_parity(tmp_path) -> None:
    """An int8 package is run at the spec's min, opt and max sizes for its shapes, as every backend's
    int8 is, not refused for int8's own error against the float model on random inputs (the fp32
    check's 40 dB: MiniLM's aoti-int8 read 13.9 dB at 8 tokens and its linux build failed)."""
    import numpy as np

    from edgeship.calibration import Dataset
    from tests.lowering.test_dynamic_shapes import CONV, loaded
    from tests.quantize.conftest import lowerer

    # calibrated on inputs far narrower than the random ones the size check feeds: int8 clips them
    narrow = np.random.default_rng(0).random((16, 3, 16, 16), dtype=np.float32) * 0.05
    data = Dataset({"image": narrow}, None, "narrow samples")
    artifact, predict = lowerer(loaded(CONV), data, tmp_path)("aoti", "export", {"sensitivity": False})
    note = next(n for n in artifact.notes if n.startswith("ran at the spec's sizes"))
    worst = min(float(db) for db in re.findall(r"(-?[\d.]+) dB", note))
    assert worst < 40, note   # int8's error: the fp32 threshold would have refused this package
    assert predict([np.zeros((1, 3, 8, 24), np.float32)])[0].shape[0] == 1
