"""pytorch-mobile: lite-interpreter artifacts, bytecode versions, operator lists."""
from __future__ import annotations

import pytest

from edgeship.errors import LoweringError
from tests.lowering.conftest import sqnr_against_eager


@pytest.mark.parametrize("method", ["trace", "script"])
def test_mobile_fp32_matches_eager_in_the_lite_interpreter(lower, tiny_model, method: str) -> None:
    artifact, predict = lower("pytorch-mobile", method)
    assert artifact.path.suffix == ".ptl" and sqnr_against_eager(tiny_model, predict) >= 60
    assert "aten::linear" in artifact.details["operators"]
    assert any("optimize_for_mobile" in n for n in artifact.notes)  # this torch build lacks XNNPACK


def test_mobile_backports_to_the_requested_bytecode_version(lower) -> None:
    from torch.jit.mobile import _get_model_bytecode_version

    artifact, _ = lower("pytorch-mobile", "trace", bytecode_version=7)
    assert artifact.details["bytecode_version"] == 7 == _get_model_bytecode_version(str(artifact.path))
    assert any("backported" in n for n in artifact.notes)


def test_mobile_too_old_bytecode_version_fails_without_leaving_a_file(lower, tmp_path) -> None:
    with pytest.raises(LoweringError, match="cannot bring bytecode version 8 down to 3"):
        lower("pytorch-mobile", "trace", bytecode_version=3)
    assert not list(tmp_path.rglob("*.ptl"))
