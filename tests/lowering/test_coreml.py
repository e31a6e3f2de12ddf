"""coreml: packages are converted here, reloaded and their interface checked; prediction needs macOS."""
from __future__ import annotations

import sys

import pytest

from edgeship.errors import LoweringError
from edgeship.lowering.backends import BACKENDS


@pytest.fixture
def coreml_lower(tiny_model, tmp_path):
    from edgeship.lowering.base import LowerRequest
    from edgeship.lowering.capture import Capturer
    from edgeship.profile import Variant

    capturer = Capturer(tiny_model)

    def run(method: str, precision: str = "fp16", calibration=None, **options):
        backend = BACKENDS["coreml"]
        variant = Variant(name=f"cm-{precision}", backend="coreml", precision=precision, options=options)
        request = LowerRequest(capturer.get(method), variant, backend.parse_options(options),
                               tmp_path / variant.name / "model.mlpackage", calibration)
        return backend.lower(request)
    return run


@pytest.mark.parametrize("method", ["export", "trace"])
def test_coreml_fp16_package_reloads_with_the_spec_interface(coreml_lower, method: str) -> None:
    artifact = coreml_lower(method)
    assert artifact.path.is_dir() and (artifact.path / "Manifest.json").is_file()
    assert artifact.details["inputs"] == [{"name": "image", "shape": [1, 3, 16, 16], "dtype": "float32"}]
    assert artifact.details["outputs"][0]["name"] == "output" and artifact.details["operators"]["conv"] == 3


def test_coreml_w8_quantizes_weights_to_int8(coreml_lower) -> None:
    artifact = coreml_lower("export", precision="w8")
    assert artifact.details["operators"].get("constexpr_affine_dequantize", 0) > 0


def test_coreml_w8a8_calibrates_and_adds_quantize_ops(coreml_lower, tiny_spec, tiny_project) -> None:
    from edgeship.calibration import load_dataset

    data = load_dataset(tiny_project / "calib.npz", tiny_spec, "calibration").take(8)
    artifact = coreml_lower("export", precision="int8", calibration=lambda: data, minimum_deployment_target="iOS17")
    assert artifact.details["operators"].get("quantize", 0) > 0
    assert any("calibrated on 8 samples" in n for n in artifact.notes)


def test_coreml_w8a8_needs_an_ios17_target(coreml_lower) -> None:
    with pytest.raises(LoweringError, match="needs minimum_deployment_target of iOS17"):
        coreml_lower("trace", precision="int8", calibration=lambda: None)


def test_coreml_unknown_deployment_target_lists_the_allowed_ones() -> None:
    problems = BACKENDS["coreml"].option_problems({"minimum_deployment_target": "iOS15"})
    assert problems and "iOS16" in problems[0] and "macOS15" in problems[0]


@pytest.mark.skipif(sys.platform == "darwin", reason="on macOS Core ML runs")
def test_coreml_says_why_it_cannot_run_here() -> None:
    assert "needs macOS" in BACKENDS["coreml"].available()
