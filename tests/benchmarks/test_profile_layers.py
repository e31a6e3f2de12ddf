"""benchmarks/profile_layers.py: which kind of work a profiled node is, which layer it computes and
how far each layer lies from its GEMM-only time, on made-up profiles (no runtime is run). The names
and shapes are as OpenVINO 2026.4's CPU plugin and ExecuTorch 1.5's XNNPACK delegate report them
for resnet18."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import profile_layers as pl  # noqa: E402

LAYERS = [{"layer": "layer1.0.conv2", "kind": "conv", "m": 3136, "k": 576, "n": 64, "gemm_ms": 0.2},
          {"layer": "layer1.1.conv1", "kind": "conv", "m": 3136, "k": 576, "n": 64, "gemm_ms": 0.2},
          {"layer": "layer2.0.conv1", "kind": "conv", "m": 784, "k": 576, "n": 128, "gemm_ms": 0.1},
          {"layer": "layer2.0.conv2", "kind": "conv", "m": 784, "k": 1152, "n": 128, "gemm_ms": 0.1},
          {"layer": "layer2.0.downsample.0", "kind": "conv", "m": 784, "k": 64, "n": 128, "gemm_ms": 0.02},
          {"layer": "fc", "kind": "linear", "m": 1, "k": 512, "n": 1000, "gemm_ms": 0.02}]


def node(name: str, kind: str, ms: float, shape: tuple | None = None) -> dict:
    return {"name": name, "kind": kind, "ms": ms, "shape": shape, "exec_type": "k"}


def test_match_by_shape_pairs_same_shaped_layers_in_order_whatever_the_runtime_runs_between():
    # OpenVINO runs the downsample before conv2; the two layer1 convs share a shape
    nodes = [node("Convolution_8", "conv", 0.1, (3136, 576, 64)), node("Reorder_1", "reorder", 0.01),
             node("Convolution_19", "conv", 0.1, (3136, 576, 64)), node("Convolution_88", "conv", 0.1, (784, 576, 128)),
             node("Convolution_113", "conv", 0.03, (784, 64, 128)),
             node("Convolution_101", "conv", 0.1, (784, 1152, 128)),
             node("fc/MatMul", "linear", 0.02, (1, 512, 1000))]
    assert pl.match_by_shape(nodes, LAYERS) == {
        "Convolution_8": "layer1.0.conv2", "Convolution_19": "layer1.1.conv1", "Convolution_88": "layer2.0.conv1",
        "Convolution_113": "layer2.0.downsample.0", "Convolution_101": "layer2.0.conv2", "fc/MatMul": "fc"}


def test_match_by_shape_names_the_node_and_the_layer_left_over():
    nodes = [node("Convolution_8", "conv", 0.1, (3136, 576, 64)), node("Convolution_19", "conv", 0.1, (3136, 576, 65))]
    with pytest.raises(ValueError, match=r"Convolution_19 \(3136, 576, 65\).*layer1.1.conv1"):
        pl.match_by_shape(nodes, LAYERS[:2])


def test_match_in_order_pairs_the_kth_convolution_with_the_kth_conv_layer():
    names = [f"Convolution (NHWC, QC8) IGEMM #{i}" for i in range(1, 6)]
    nodes = [node(names[0], "conv", 0.5), node("Add (ND) #1", "add", 0.04), *(node(n, "conv", 0.5) for n in names[1:]),
             node("Fully Connected (NC, QS8, QC8W) GEMM #1", "linear", 0.05)]
    matched = pl.match_in_order(nodes, LAYERS)
    assert matched[names[0]] == "layer1.0.conv2" and matched[names[4]] == "layer2.0.downsample.0"
    assert matched["Fully Connected (NC, QS8, QC8W) GEMM #1"] == "fc"


def test_match_in_order_refuses_when_a_runtime_ran_another_number_of_convolutions():
    nodes = [node(f"Convolution (NHWC, QC8) IGEMM #{i}", "conv", 0.5) for i in range(1, 5)]
    with pytest.raises(ValueError, match="4 conv nodes against 5 conv layers"):
        pl.match_in_order(nodes, LAYERS)


@pytest.mark.parametrize(("name", "kind"), [
    ("Convolution (NHWC, QC8) IGEMM #3", "conv"), ("Fully Connected (NC, QS8, QC8W) GEMM #1", "linear"),
    ("Max Pooling (NHWC, S8) #1", "pooling"), ("Mean (ND) #1", "pooling"), ("Add (ND) #2", "add"),
    ("Clamp (NC) #1", "add"), ("Transpose (ND, X8) #1", "reorder"), ("Static Reshape (NC) #1", "reorder"),
    ("Convert (NC) #1", "quantize"), ("Softmax (NC, F32) #1", "other")])
def test_xnnpack_kind_of_each_operator_name(name, kind):
    assert pl.xnnpack_kind(name) == kind


@pytest.mark.parametrize(("node_type", "kind"), [
    ("Convolution", "conv"), ("FullyConnected", "linear"), ("MaxPool", "pooling"), ("ReduceMean", "pooling"),
    ("Reorder", "reorder"), ("Subgraph", "quantize"), ("Eltwise", "add"), ("Interpolate", "other")])
def test_ov_kind_of_each_node_type(node_type, kind):
    assert pl.ov_kind(node_type) == kind


def test_ov_gemm_shape_reads_im2col_m_k_n_from_the_execution_graph_ports():
    conv = pl.ov_gemm_shape("conv", [[1, 256, 14, 14], [512, 256, 3, 3], [512]], [1, 512, 7, 7])
    linear = pl.ov_gemm_shape("linear", [[1, 512], [1000, 512], [0], [1, 1000], [0]], [1, 1000])
    assert (conv, linear) == ((49, 2304, 512), (1, 512, 1000))


def test_fused_ops_lists_what_a_convolution_computes_besides_itself():
    names = ("Convolution_37,Multiply_6067,bn_2/aten._native_batch_norm_legit_no_training.default/BatchNormInference,"
             "bn_2/aten._native_batch_norm_legit_no_training.default/BatchNormInference/fq_output_0,"
             "add/aten.add.Tensor/Add,relu_2/aten.relu.default/Relu/fq_output_0")
    assert pl.fused_ops(names) == ["BatchNormInference", "FakeQuantize", "Add", "Relu"]
    assert pl.fused_ops("Convolution_8") == []


def rows() -> list[dict]:
    nodes = [node("a", "conv", 0.2, (3136, 576, 64)), node("b", "conv", 1.5, (3136, 576, 64)),
             node("c", "conv", 0.05, (784, 576, 128))]
    layers = [dict(LAYERS[0], gemm_ms=0.02), dict(LAYERS[1], gemm_ms=0.5), dict(LAYERS[2], gemm_ms=0.1)]
    return pl.layer_rows(layers, nodes, {"a": "layer1.0.conv2", "b": "layer1.1.conv1", "c": "layer2.0.conv1"})


def test_layer_rows_give_ratio_and_ms_lost_against_the_gemm_only_time():
    got = {r["layer"]: (r["ratio"], r["ms_lost"], r["shape"]) for r in rows()}
    assert got["layer1.0.conv2"] == (pytest.approx(10.0), pytest.approx(0.18), [3136, 576, 64])
    assert got["layer2.0.conv1"] == (pytest.approx(0.5), pytest.approx(-0.05), [784, 576, 128])


def test_furthest_ranks_by_ratio_and_by_ms_lost_apart():
    far = pl.furthest(rows(), count=2)
    assert [f["layer"] for f in far["by_ratio"]] == ["layer1.0.conv2", "layer1.1.conv1"]
    assert [f["layer"] for f in far["by_ms_lost"]] == ["layer1.1.conv1", "layer1.0.conv2"]


def test_split_by_kind_sums_nodes_by_kind_beside_unattributed_time_and_stalls():
    nodes = [node("a", "conv", 3.0), node("b", "add", 0.4), node("c", "conv", 0.5)]
    split = pl.split_by_kind(nodes, 0.1, 5.0)
    assert split["conv"] == {"ms": 3.5, "share": pytest.approx(0.7)}
    assert split["unattributed"]["ms"] == pytest.approx(0.1) and "pooling" not in split
    assert split["stalls"]["ms"] == pytest.approx(1.0)
    assert pl.split_by_kind(nodes, 0.1, 4.0)["stalls"]["ms"] == pytest.approx(0.0)


def test_outside_gemm_counts_everything_but_convolutions_linear_layers_and_stalls():
    split = pl.split_by_kind([node("a", "conv", 3.0), node("b", "add", 0.4), node("c", "linear", 0.5)], 0.1, 5.0)
    assert pl.outside_gemm(split) == {"ms": pytest.approx(0.5), "share": pytest.approx(0.125)}


def test_unattributed_ms_is_taken_inference_by_inference_not_from_the_nodes_medians():
    # a stall hits a different node in each inference: no node's median shows it, every wall time does
    wall = [3.0, 3.0, 3.0]
    times = [[2.0, 1.0, 1.0], [1.0, 2.0, 1.0], [0.0, 0.0, 1.0]]
    assert pl.unattributed_ms(wall, times) == pytest.approx(0.0)
    assert pl.unattributed_ms([4.0, 4.5, 5.0], times) == pytest.approx(1.5)


def test_achieved_is_the_gemm_ops_rate_over_the_machine_peak():
    got = pl.achieved(3.0, 3_600_000_000, 1600.0)
    assert got["gops"] == pytest.approx(1200.0) and got["of_peak"] == pytest.approx(0.75)
