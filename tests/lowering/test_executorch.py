"""executorch: XNNPACK-delegated and portable .pte programs run in the ExecuTorch runtime."""
from __future__ import annotations

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
