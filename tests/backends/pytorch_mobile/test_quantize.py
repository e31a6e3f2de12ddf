"""PyTorch Mobile's int8 path: FX static (qnnpack, x86), dynamic, fallback, cached calibration."""
from __future__ import annotations

import json

from edgeship.cache import Cache
from edgeship.quantize import observers
from tests.quantize.conftest import keeps_the_culprit, sqnr_vs_eager


def test_mobile_static_qnnpack_runs_in_the_lite_interpreter(lower_int8, tiny_model, calib_data) -> None:
    artifact, predict = lower_int8("pytorch-mobile", "trace", engine="qnnpack")
    q = artifact.details["quantization"]
    assert q["scheme"] == "static" and q["quantized_engine"] == "qnnpack" and q["method"] == "histogram"
    assert "quantized::conv2d" in " ".join(artifact.details["operators"]) or \
        any(op.startswith("quantized::conv") for op in artifact.details["operators"])
    assert "qnnpack engine; histogram calibration on 16 samples" in artifact.notes[0]
    assert sqnr_vs_eager(tiny_model, predict, calib_data) > 20


def test_mobile_static_x86_minmax_per_tensor_from_script(lower_int8, tiny_model, calib_data) -> None:
    artifact, predict = lower_int8("pytorch-mobile", "script", {"method": "minmax", "per_channel": False,
                                                               "sensitivity": False}, engine="x86")
    q = artifact.details["quantization"]
    assert (q["quantized_engine"], q["method"], q["per_channel"]) == ("x86", "minmax", False)
    assert sqnr_vs_eager(tiny_model, predict, calib_data) > 20


def test_mobile_dynamic_quantizes_only_linear(lower_int8, tiny_model, calib_data) -> None:
    artifact, predict = lower_int8("pytorch-mobile", "trace", {"scheme": "dynamic"})
    ops = artifact.details["operators"]
    assert "quantized::linear_dynamic" in ops and "aten::linear" not in ops  # the head runs int8 weights
    assert not any(op.startswith("quantized::conv") for op in ops)  # the convolutions stay float
    assert {"aten::_convolution", "aten::conv2d"} & set(ops)
    assert artifact.details["quantization"]["scheme"] == "dynamic"
    assert sqnr_vs_eager(tiny_model, predict, calib_data) > 30


def test_mobile_keep_float_keeps_the_worst_layer_float(lower_int8, tmp_path) -> None:
    artifact, _ = lower_int8("pytorch-mobile", "trace", {"method": "minmax", "keep_float": 1})
    q = artifact.details["quantization"]
    report = json.loads((artifact.path.parent / "sensitivity.json").read_text())
    assert q["kept_float"] == [report["layers"][0]["layer"]] == [q["sensitivity"]["worst"][0]["layer"]]
    assert {row["layer"] for row in report["layers"]} >= {"stem.0", "dw", "pw", "head"}
    sqnrs = [row["own_sqnr_db"] for row in report["layers"]]
    assert sqnrs == sorted(sqnrs) and all(row["sqnr_db"] is not None for row in report["layers"])


def test_mobile_second_build_restores_calibration_from_the_cache(lower_int8, calib_data, tmp_path, monkeypatch) -> None:
    runs = []
    real = observers.run_samples
    monkeypatch.setattr(observers, "run_samples", lambda *a: runs.append(1) or real(*a))
    cache = Cache(tmp_path / "cache")
    minmax = {"method": "minmax", "sensitivity": False}
    first, run_first = lower_int8("pytorch-mobile", "trace", minmax, cache, name="a")
    second, run_second = lower_int8("pytorch-mobile", "trace", minmax, cache, name="b")
    assert len(runs) == 1
    assert [a.details["quantization"]["calibration"]["cache"] for a in (first, second)] == ["miss", "hit"]
    x = [calib_data.inputs["image"][:1]]
    assert (run_first(x)[0] == run_second(x)[0]).all()


def test_mobile_int8_of_a_dict_output_model_is_traced_as_the_float_one() -> None:
    """The quantized module is traced again; a dict output must come out as the float trace's flat tuple."""
    from types import SimpleNamespace

    import torch

    from edgeship.backends.pytorch_mobile.quantize import capture_like

    class TwoHeads(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = torch.nn.Linear(8, 4)

        def forward(self, x):
            return {"features": x.relu(), "logits": self.head(x)}

    module = torch.ao.quantization.quantize_dynamic(TwoHeads().eval(), {torch.nn.Linear}, dtype=torch.qint8)
    x = torch.rand(1, 8)
    traced = capture_like(SimpleNamespace(method="trace", example_inputs=(x,)), module)
    features, logits = traced(x)
    assert torch.equal(features, x.relu()) and logits.shape == (1, 4)


def test_mobile_keep_float_keeps_the_layer_whose_own_error_costs_most(lower_culprit, culprit_model) -> None:
    kept, all_int8, one_float = keeps_the_culprit(lower_culprit, culprit_model, "pytorch-mobile", "trace",
                                                  engine="qnnpack")
    assert kept.details["quantization"]["kept_float"] == ["first"]
    assert one_float > all_int8 + 8, (all_int8, one_float)
