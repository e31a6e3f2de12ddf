"""The build's calibration stage: loaded only when a variant calibrates; too few samples is exit 2."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeship.calibration.provider import RANDOM_NOTE, calibration_data
from edgeship.errors import DataError
from edgeship.pipeline.plan import BuildRequest, make_plan
from tests.conftest import write_profile

INT8 = """
[[variants]]
name = "onnx-int8"
backend = "onnx"
precision = "int8"
"""


def _calibration_args(plan):
    return plan.profile, plan.spec, plan.calibration_source


def _plan(tmp_path: Path, project: Path, variants: str, extra: str = ""):
    profile = write_profile(tmp_path, variants, extra=extra)
    return make_plan(BuildRequest(target=str(profile), model=str(project / "model.toml")))


def test_provider_loads_the_spec_calibration_npz(tmp_path, tiny_project) -> None:
    data = calibration_data(*_calibration_args(_plan(tmp_path, tiny_project, INT8, "[calibration]\nsamples = 8\n")))
    assert len(data) == 8 and "calib.npz" in data.source


def test_provider_needs_nothing_without_static_int8(tmp_path, tiny_project) -> None:
    dynamic = INT8 + 'quantization = { scheme = "dynamic" }\n'
    assert calibration_data(*_calibration_args(_plan(tmp_path, tiny_project, dynamic))) is None


def test_provider_random_inputs_stand_in_and_say_so(tmp_path, tiny_project) -> None:
    (tiny_project / "model.toml").write_text((tiny_project / "model.toml").read_text()
                                             .replace('calibration = "calib.npz"\n', ""))
    data = calibration_data(*_calibration_args(_plan(tmp_path, tiny_project, INT8, "[calibration]\nsamples = 5\n")))
    assert len(data) == 5 and RANDOM_NOTE in data.source


def test_provider_fewer_samples_than_one_batch_is_a_data_error(tmp_path, tiny_project) -> None:
    np.savez(tiny_project / "calib.npz", x=np.zeros((3, 3, 16, 16), np.float32))
    text = (tiny_project / "model.toml").read_text().replace("shape = [1, 3, 16, 16]", "shape = [4, 3, 16, 16]")
    (tiny_project / "model.toml").write_text(text)
    with pytest.raises(DataError,
                       match=r"calib\.npz.*onnx-int8 calibrates on 3 sample\(s\), fewer than one batch of 4"):
        calibration_data(*_calibration_args(_plan(tmp_path, tiny_project, INT8)))
