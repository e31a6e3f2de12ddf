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


def test_openvino_cached_quantization_is_read_only_as_its_entry_signed_it(tmp_path) -> None:
    """The quantized IR and the bias record kept in the stage cache: copied and read through the entry,
    each file checked as read; a .bin swapped after the entry was checked is never what OpenVINO reads."""
    import json

    import pytest

    from edgeship.backends.openvino.quantize import BIAS_FILE, QUANTIZED_BIN, QUANTIZED_XML, bias_used, checked_copy
    from edgeship.cache import Cache, EntryDamaged

    def compute(folder):
        (folder / QUANTIZED_XML).write_text("<net/>")
        (folder / QUANTIZED_BIN).write_bytes(b"\0" * 64)
        (folder / BIAS_FILE).write_text(json.dumps({"bias_correction": "fast", "bias_correction_refused": ["full"]}))

    entry = Cache(tmp_path / "cache").get_or_compute("openvino", {"k": 1}, compute)
    assert bias_used(entry, {"fast_bias_correction": False})["bias_correction_refused"] == ["full"]
    assert checked_copy(entry, tmp_path).read_text() == "<net/>"
    (entry.path / QUANTIZED_BIN).write_bytes(b"\1" * 64)   # after the check: another process's weights
    with pytest.raises(EntryDamaged):
        checked_copy(entry, tmp_path)
