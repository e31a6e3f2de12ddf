"""Which operators static int8 quantizes (quantization.operators): a transformer's weighted layers
only by default, every operator the quantizer takes for other graphs."""
from __future__ import annotations

from pathlib import Path

import pytest

from edgeship.quantize.scope import choose_scope, transformer_evidence


@pytest.mark.parametrize(("ops", "found"), [
    ({"MatMul", "Softmax", "LayerNormalization", "Add"}, ("Softmax", "LayerNormalization")),            # ONNX
    ({"MatMul", "Softmax", "MVN", "Add"}, ("Softmax", "MVN")),                                         # OpenVINO
    ({"aten.linear.default", "aten.scaled_dot_product_attention.default", "aten.layer_norm.default"},
     ("aten.scaled_dot_product_attention.default", "aten.layer_norm.default")),                         # torch.export
    ({"Conv", "Relu", "Add", "GlobalAveragePool"}, None),                                              # a CNN
    ({"Conv", "Softmax", "BatchNormalization"}, None),                                                 # no layer norm
])
def test_transformer_evidence_reads_each_backends_operator_names(ops: set[str], found) -> None:
    assert transformer_evidence(ops) == found


def test_choose_scope_says_what_it_chose_and_why() -> None:
    auto = choose_scope("auto", {"MatMul", "Softmax", "LayerNormalization"}, "ONNX Runtime's quantize_static")
    assert auto.weighted and "attention (Softmax) and layer normalization (LayerNormalization)" in auto.reason
    assert auto.details() == {"operators": "weighted", "operators_reason": auto.reason}
    cnn = choose_scope("auto", {"Conv", "Relu"}, "ONNX Runtime's quantize_static")
    assert not cnn.weighted and cnn.reason.startswith("every operator ONNX Runtime's quantize_static quantizes")
    assert not choose_scope("all", {"Softmax", "LayerNormalization"}, "x").weighted
    assert choose_scope("weighted", {"Conv"}, "x").weighted


@pytest.fixture
def lower_former(tmp_path: Path):
    from edgeship.model import load_model
    from edgeship.spec import load_spec
    from tests.quantize.conftest import lowerer
    from tests.quantize.tinyformer import samples

    return lowerer(load_model(load_spec("tests.quantize.tinyformer:build", "1,8,16")), samples(), tmp_path)


def _quantized_onnx_ops(path: Path) -> set[str]:
    """The op types that read a DequantizeLinear of an activation (not of an initializer)."""
    import onnx

    graph = onnx.load(str(path)).graph
    weights = {i.name for i in graph.initializer}
    dq = {n.output[0] for n in graph.node if n.op_type == "DequantizeLinear" and n.input[0] not in weights}
    return {n.op_type for n in graph.node if n.op_type not in ("QuantizeLinear", "DequantizeLinear")
            and any(i in dq for i in n.input)}


def test_onnx_int8_of_a_transformer_quantizes_only_its_matmuls_unless_asked_for_all(lower_former) -> None:
    auto, _ = lower_former("onnx", "export", {"method": "minmax", "sensitivity": False}, name="auto")
    weighted = _quantized_onnx_ops(auto.path)  # MatMul, and what reads a MatMul input or output after its Q/DQ
    assert "MatMul" in weighted and not {"LayerNormalization", "Softmax", "Gelu", "Erf"} & weighted
    assert auto.details["quantization"]["operators"] == "weighted"
    assert any(n.startswith("int8 operators: weighted layers only: the graph has attention") for n in auto.notes)
    every, _ = lower_former("onnx", "export", {"method": "minmax", "sensitivity": False, "operators": "all"},
                            name="all")
    assert {"LayerNormalization", "Softmax"} <= _quantized_onnx_ops(every.path)


@pytest.mark.slow
def test_executorch_int8_of_a_transformer_quantizes_only_its_linear_layers(lower_former) -> None:
    auto, _ = lower_former("executorch", "export", {"sensitivity": False}, name="auto", partitioner="xnnpack")
    assert auto.details["quantization"]["operators"] == "weighted"
    every, _ = lower_former("executorch", "export", {"sensitivity": False, "operators": "all"}, name="all",
                            partitioner="xnnpack")
    assert every.details["quantization"]["operators"] == "all"
    assert every.path.stat().st_size != auto.path.stat().st_size  # the add's quantize-dequantize pairs


def test_openvino_int8_of_a_transformer_uses_nncfs_transformer_scheme(lower_former) -> None:
    auto, _ = lower_former("openvino", "export", {"sensitivity": False}, name="auto")
    quantization = auto.details["quantization"]
    assert quantization["model_type"] == "transformer" and quantization["smooth_quant"] is False
    assert "attention" in quantization["model_type_reason"]
    every, _ = lower_former("openvino", "export", {"sensitivity": False, "operators": "all"}, name="all")
    assert every.details["quantization"]["model_type"] is None
