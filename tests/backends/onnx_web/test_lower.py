"""onnx-web: the ONNX a page runs with onnxruntime-web (measured in Chromium: tests/devices/test_browser.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from edgeship.backends.onnx_web.lower import WEB_REDUCE_RANGE
from edgeship.backends.registry import BACKENDS
from edgeship.devices.base import BROWSER_ONLY
from edgeship.errors import ProfileError
from tests.lowering.conftest import sqnr_against_eager
from tests.quantize.conftest import calib_data  # noqa: F401 (a fixture)
from tests.quantize.test_cpu_choice import EPYC, _widest_weight


def test_onnx_web_fp32_is_a_static_batch_onnx_at_the_float_models_outputs(lower, tiny_model) -> None:
    artifact, predict = lower("onnx-web", "export")
    assert artifact.path.suffix == ".onnx" and artifact.details["opset"] == 20
    assert artifact.details["inputs"][0] == {"name": "image", "shape": [1, 3, 16, 16], "dtype": "float32"}
    assert sqnr_against_eager(tiny_model, predict) >= 60


def test_onnx_web_refuses_an_ir_version_the_wasm_backend_cannot_load(lower) -> None:
    import onnx

    from edgeship.backends.onnx_web.lower import WEB_MAX_IR_VERSION, check_ir_version
    from edgeship.errors import LoweringError

    artifact, _ = lower("onnx-web", "export")
    model = onnx.load(str(artifact.path))
    assert model.ir_version <= WEB_MAX_IR_VERSION
    model.ir_version = WEB_MAX_IR_VERSION + 1
    with pytest.raises(LoweringError, match="IR version 14: onnxruntime-web loads IR versions up to 13"):
        check_ir_version(model)


def test_onnx_web_int8_keeps_8_bit_weights_whatever_the_build_cpu(tiny_model, calib_data, tmp_path) -> None:  # noqa: F811
    """A build machine without VNNI would give the native onnx backend 7-bit weights; the page runs
    wasm kernels that do not saturate, so onnx-web stays at 8 bits and says why."""
    from edgeship.backends.base import LowerRequest
    from edgeship.lowering.capture import Capturer
    from edgeship.profile import Variant

    backend = BACKENDS["onnx-web"]
    variant = Variant(name="w8", backend="onnx-web", precision="int8", quantization={"samples": 16, "seed": 0})
    parsed = backend.parse_options({})
    captured = Capturer(tiny_model).get("export", False)
    request = LowerRequest(captured, variant, parsed, tmp_path / "model.onnx", lambda: calib_data, None,
                           [("edge", EPYC)])
    artifact = backend.lower(request)
    assert artifact.details["quantization"]["reduce_range"] is False and WEB_REDUCE_RANGE in artifact.notes
    assert _widest_weight(artifact.path) > 64


def test_onnx_web_runs_only_in_a_browser_and_refuses_fp16_with_the_reason(tmp_path: Path) -> None:
    from edgeship.profile import load_profile

    assert BACKENDS["onnx-web"].available() == BROWSER_ONLY
    (tmp_path / "p.toml").write_text('[[variants]]\nname = "h"\nbackend = "onnx-web"\nprecision = "fp16"\n')
    with pytest.raises(ProfileError, match='precision "fp16" is refused for onnx-web: .*measured in Chromium'):
        load_profile(tmp_path / "p.toml")


def test_web_profile_measures_in_the_built_in_browser_and_times_eager_on_the_host() -> None:
    from edgeship.pipeline.plan import BuildRequest, make_plan

    plan = make_plan(BuildRequest(target="web"))
    assert [d.name for d in plan.devices] == ["browser", "host"]
    assert [d.transport for d in plan.devices] == ["browser", "local"]
    assert {v.backend for v in plan.profile.variants} == {"onnx-web"}
