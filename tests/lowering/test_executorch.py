"""executorch: XNNPACK-delegated and portable .pte programs run in the ExecuTorch runtime."""
from __future__ import annotations

from edgeship.lowering.backends import BACKENDS
from edgeship.lowering.base import LowerRequest
from edgeship.lowering.capture import Capturer
from edgeship.profile import Variant
from tests.lowering.conftest import sqnr_against_eager


def test_executorch_xnnpack_fp32_matches_eager_and_reports_delegation(lower, tiny_model) -> None:
    artifact, predict = lower("executorch", "export", partitioner="xnnpack")
    assert artifact.path.read_bytes()[4:8] == b"ET12"  # the .pte flatbuffer identifier
    assert artifact.details["delegated_nodes"] > 0 and artifact.details["delegated_subgraphs"] >= 1
    assert sqnr_against_eager(tiny_model, predict) >= 60


def test_executorch_portable_delegates_nothing(lower, tiny_model) -> None:
    artifact, predict = lower("executorch", "export", partitioner="portable")
    assert artifact.details["delegated_nodes"] == 0 and artifact.details["non_delegated_ops"]
    assert sqnr_against_eager(tiny_model, predict) >= 60


def test_executorch_coreml_delegate_lowers_here_but_runs_only_on_apple(tiny_model) -> None:
    backend = BACKENDS["executorch"]
    options = {"partitioner": "coreml"}
    variant = Variant(name="et-coreml", backend="executorch", precision="fp16", options=options)
    parsed = backend.parse_options(options)
    dest = tiny_model.spec.base_dir / "et-coreml" / "model.pte"
    artifact = backend.lower(LowerRequest(Capturer(tiny_model).get("export"), variant, parsed, dest))
    assert artifact.details["delegated_nodes"] > 0 and artifact.path.stat().st_size > 0
    assert "Apple" in backend.available(parsed)


def test_executorch_fp16_without_the_coreml_partitioner_is_a_plan_error() -> None:
    problems = BACKENDS["executorch"].variant_problems("fp16", {"partitioner": "xnnpack"})
    assert problems and 'partitioner = "coreml"' in problems[0]
