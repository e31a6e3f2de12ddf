"""results.json is strict JSON: a non-finite number is never written as NaN or Infinity."""
from __future__ import annotations

import json

from edgeship.results import Accuracy, Latency, ModelInfo, Results, VariantResult


def _no_constants(token: str) -> None:
    raise AssertionError(f"{token} is not JSON")


def test_results_dump_writes_a_non_finite_number_as_null_with_a_note() -> None:
    lat = Latency(device="host", runtime="r", warmup=1, iterations=2, p50_ms=float("inf"), notes=["measured"])
    variant = VariantResult(name="ort", backend="onnx", precision="fp32", latency=[lat],
                            accuracy=Accuracy(samples=4, sqnr_db=float("nan"), cosine=1.0))
    results = Results(target="t", created="now", toolchain={}, variants=[variant],
                      model=ModelInfo(name="m", entry="m:b", inputs=[], params=1))
    doc = json.loads(results.dump(), parse_constant=_no_constants)
    ort = doc["variants"][0]
    assert ort["accuracy"]["sqnr_db"] is None and ort["accuracy"]["cosine"] == 1.0
    assert ort["notes"] == ["variants[0].accuracy.sqnr_db was nan (not a finite number): written as null"]
    assert ort["latency"][0]["p50_ms"] is None
    assert ort["latency"][0]["notes"] == ["measured", "variants[0].latency[0].p50_ms was inf (not a finite number): "
                                          "written as null"]
    assert results.variants[0].accuracy.cosine == 1.0  # the results themselves are left as they are


def test_results_id_problems_accept_every_profile_precision_and_what_a_build_writes() -> None:
    """The load check's precisions are the profile's (one list must not drift from the other), and a
    document as a build writes it has no problem; a newline in an id is one."""
    from typing import get_args

    from edgeship.profile import Precision
    from edgeship.results import PRECISIONS, id_problems

    assert set(PRECISIONS) == set(get_args(Precision))
    variants = [VariantResult(name=p, backend="pytorch-mobile", precision=p) for p in PRECISIONS]
    written = Results(target="t", created="2026-11-29T18:00:00Z", toolchain={}, variants=variants,
                      model=ModelInfo(name="m", entry="m:b", inputs=[], params=1))
    assert id_problems(written) == []
    written.variants[0].backend = "onnx\n# x"
    assert id_problems(written) == ['variants.0.backend "onnx\\n# x": a backend id (letters, digits, \'.\', \'_\', '
                                    "'-', such as eager)"]
