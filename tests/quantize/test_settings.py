"""Profile checks for quantization: every unsupported scheme is refused at plan time, listing what
the backend supports; candidates expand into named variants."""
from __future__ import annotations

import subprocess
import sys

import pytest

from edgeship.errors import ProfileError
from edgeship.profile import load_profile
from tests.conftest import write_profile


def _variant(backend: str, precision: str = "int8", extra: str = "", name: str = "v") -> str:
    return f'\n[[variants]]\nname = "{name}"\nbackend = "{backend}"\nprecision = "{precision}"\n{extra}\n'


@pytest.mark.parametrize("backend, extra, message", [
    ("executorch", 'quantization = { method = "entropy" }',
     'quantization.method = "entropy": backend executorch calibrates with one of: histogram, minmax'),
    ("onnx", 'quantization = { method = "histogram" }',
     'backend onnx calibrates with one of: entropy, minmax, percentile'),
    ("pytorch-mobile", 'quantization = { scheme = "dynamic", method = "minmax" }',
     "dynamic quantization has no calibration method"),
    ("onnx", 'quantization = { scheme = "dynamic", keep_float = 2 }',
     "layers are kept in float only by static quantization"),
    ("onnx", 'quantization = { scheme = "weights" }', "not allowed; one of: dynamic, static"),
    ("coreml", 'quantization = { scheme = "static" }', "backend coreml quantizes int8 with its own options"),
])
def test_settings_unsupported_quantization_is_a_profile_error(tmp_path, backend, extra, message) -> None:
    with pytest.raises(ProfileError) as e:
        load_profile(write_profile(tmp_path, _variant(backend, extra=extra)))
    assert message in str(e.value) and str(tmp_path) in str(e.value)


@pytest.mark.parametrize("backend", ["pytorch-mobile", "executorch", "onnx"])
def test_settings_weight_only_w8_is_refused_listing_precisions(tmp_path, backend) -> None:
    with pytest.raises(ProfileError, match=rf'precision = "w8": backend {backend} supports one of: ') as e:
        load_profile(write_profile(tmp_path, _variant(backend, "w8")))
    allowed = str(e.value).split("supports one of: ")[1].split(", ")
    assert "int8" in allowed and "fp32" in allowed and "w8" not in allowed


def test_settings_quantization_on_an_fp32_variant_is_refused(tmp_path) -> None:
    with pytest.raises(ProfileError, match="quantization settings apply to precision int8, but precision is fp32"):
        load_profile(write_profile(tmp_path, _variant("onnx", "fp32", 'quantization = { method = "minmax" }')))


def test_settings_candidates_expand_with_calibration_defaults(tmp_path) -> None:
    extra = 'candidates = { per_channel = [true, false], method = ["minmax", "entropy"] }'
    profile = load_profile(write_profile(tmp_path, _variant("onnx", extra=extra, name="onnx-int8"),
                                         extra="[calibration]\nsamples = 48\nseed = 3\n"))
    names = [v.name for v in profile.variants]
    assert names == ["onnx-int8-per-channel-minmax", "onnx-int8-per-channel-entropy",
                     "onnx-int8-per-tensor-minmax", "onnx-int8-per-tensor-entropy"]
    last = profile.variants[-1].quantization
    assert (last.per_channel, last.method, last.samples, last.seed) == (False, "entropy", 48, 3)


def test_settings_candidate_methods_are_checked_too(tmp_path) -> None:
    extra = 'candidates = { method = ["minmax", "entropy"] }'
    with pytest.raises(ProfileError, match='"entropy": backend executorch calibrates with one of: histogram, minmax'):
        load_profile(write_profile(tmp_path, _variant("executorch", extra=extra)))


def test_settings_refusal_exits_2_before_loading_anything(tmp_path) -> None:
    profile = write_profile(tmp_path, _variant("executorch", extra='quantization = { method = "percentile" }'))
    proc = subprocess.run([sys.executable, "-m", "edgeship", "build", "--target", str(profile)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "calibrates with one of: histogram, minmax" in proc.stderr
    assert not (tmp_path / "artifacts").exists()
