"""OpenVINO's int8 path (NNCF): keep_float by each layer's own contribution, measured on the float
IR with one layer's FakeQuantize ranges, int8 weights and bias copied from the quantized IR."""
from __future__ import annotations

from tests.quantize.conftest import keeps_the_culprit


def test_openvino_keep_float_keeps_the_layer_whose_own_error_costs_most(lower_culprit, culprit_model) -> None:
    import openvino as ov

    kept, all_int8, one_float = keeps_the_culprit(lower_culprit, culprit_model, "openvino", "export")
    model = ov.Core().read_model(str(kept.path / "model.xml"))
    (first,) = [op for op in model.get_ordered_ops()
                if op.get_friendly_name() == kept.details["quantization"]["kept_float"][0]]
    assert first.input_value(0).get_node().get_type_name() == "Parameter"  # the first layer, reading float input
    assert one_float > all_int8 + 8, (all_int8, one_float)


def test_run_nncf_names_nncf_and_the_bias_correction_when_it_refuses_every_one(monkeypatch) -> None:
    import pytest

    from edgeship.backends.openvino import quantize as qov
    from edgeship.errors import LoweringError

    tried = []

    def refuse(*arguments: object) -> None:  # quantize_once(model, data, batch, args, ignored, bias)
        bias = arguments[-1]
        tried.append(bias)
        raise NotImplementedError(f"The BiasCorrection algorithm ({bias}) is not supported for this model.")

    monkeypatch.setattr(qov, "quantize_once", refuse)
    with pytest.raises(LoweringError, match=r"^NNCF nncf.quantize \(bias correction none\) crashed: "
                                            r"NotImplementedError in refuse: The BiasCorrection algorithm \(none\)"):
        qov.run_nncf(lambda: None, None, 1, {"fast_bias_correction": False}, [])
    assert tried == ["full", "fast", "none"]
