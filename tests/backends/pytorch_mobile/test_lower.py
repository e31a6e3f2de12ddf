"""pytorch-mobile: lite-interpreter artifacts, bytecode versions, operator lists."""
from __future__ import annotations

import pytest

from edgeship.errors import LoweringError
from tests.lowering.conftest import sqnr_against_eager


@pytest.mark.parametrize("method", ["trace", "script"])
def test_mobile_fp32_matches_eager_in_the_lite_interpreter(lower, tiny_model, method: str) -> None:
    artifact, predict = lower("pytorch-mobile", method)
    assert artifact.path.suffix == ".ptl" and sqnr_against_eager(tiny_model, predict) >= 60


def test_mobile_records_whether_optimize_for_mobile_ran(lower) -> None:
    import torch.backends.xnnpack

    artifact, _ = lower("pytorch-mobile", "trace")
    ops = artifact.details["operators"]
    notes = [n for n in artifact.notes if "optimize_for_mobile" in n]
    prepacked = [op for op in ops if op.startswith("prepacked::")]
    if torch.backends.xnnpack.enabled:  # ran: conv and linear became XNNPACK's prepacked kernels
        assert len(notes) == 1 and "optimize_for_mobile applied" in notes[0]
        assert {"prepacked::conv2d_clamp_run", "prepacked::linear_clamp_run"} <= set(prepacked)
    else:  # skipped, and the note says why; the artifact is plain frozen TorchScript
        assert len(notes) == 1 and "skipped: this torch build has no XNNPACK" in notes[0]
        assert not prepacked and "aten::linear" in ops


def test_mobile_backports_to_the_requested_bytecode_version(lower) -> None:
    from torch.jit.mobile import _get_model_bytecode_version

    artifact, _ = lower("pytorch-mobile", "trace", bytecode_version=7)
    assert artifact.details["bytecode_version"] == 7 == _get_model_bytecode_version(str(artifact.path))
    (note,) = [n for n in artifact.notes if "backported" in n]
    # version 7 stores each tensor twice: the note says how much the file grew (the tiny model's
    # weights are most of it)
    assert "the file grew from" in note and "stored twice" in note


def test_mobile_too_old_bytecode_version_fails_without_leaving_a_file(lower, tmp_path) -> None:
    with pytest.raises(LoweringError, match="cannot bring bytecode version 8 down to 3"):
        lower("pytorch-mobile", "trace", bytecode_version=3)
    assert not list(tmp_path.rglob("*.ptl"))


def test_mobile_refuses_a_custom_operator_the_lite_runtime_lacks(tmp_path) -> None:
    from edgeship.backends.base import LowerRequest
    from edgeship.backends.registry import BACKENDS
    from edgeship.lowering.capture import Capturer
    from edgeship.model import load_model
    from edgeship.profile import Variant
    from edgeship.spec import load_spec

    model = load_model(load_spec("tests.models.tinynet:build_keeps_best", "1,6,4"))
    backend = BACKENDS["pytorch-mobile"]
    dest = tmp_path / "v" / "model.ptl"
    request = LowerRequest(Capturer(model).get("trace"), Variant(name="v", backend="pytorch-mobile"),
                           backend.parse_options({}), dest)
    with pytest.raises(LoweringError, match=r"calls torchvision::nms, which PyTorch Mobile's lite interpreter"):
        backend.lower(request)
    assert not dest.exists()


@pytest.mark.parametrize("backend,method", [("pytorch-mobile", "trace"), ("torchscript", "trace")])
def test_a_torch_jit_archive_is_rooted_in_the_artifacts_own_name(tiny_model, tmp_path, backend, method) -> None:
    """torch.jit's zip is rooted in a folder named after the file it is written to: written under
    atomic_output's temporary name it was '.model.tmp-<pid>-<random>/'. The bytes still differ
    between two saves of one module: torch writes a random .data/serialization_id into every
    archive (and numbers scripted classes from a process-wide counter)."""
    import zipfile

    from edgeship.backends.base import LowerRequest
    from edgeship.backends.registry import BACKENDS
    from edgeship.lowering.capture import Capturer
    from edgeship.profile import Variant

    impl = BACKENDS[backend]
    dest = tmp_path / "out" / f"model{impl.suffix}"
    impl.lower(LowerRequest(Capturer(tiny_model).get(method, False), Variant(name="v", backend=backend),
                            impl.parse_options({}), dest))
    assert {name.split("/")[0] for name in zipfile.ZipFile(dest).namelist()} == {"model"}
    assert sorted(p.name for p in dest.parent.iterdir()) == [dest.name]  # no temporary folder left
