"""The pure part of benchmarks/runtime_profile.py (make bench-profile): what kind of work a
runtime's profiled node is, which of the model's layers it computes, and how far each layer lies
from its GEMM-only time. No runtime is imported here (tests/benchmarks/test_profile_layers.py runs
it on made-up profiles).

A node is a dict: ``name``, ``kind`` (KINDS), ``ms`` (its median per inference), and for a GEMM
node its ``shape`` (m, k, n) where the runtime says it (OpenVINO's execution graph does, XNNPACK's
operator names do not). A layer is a row of ceiling.gemm_shapes: ``layer``, ``kind``, ``m``, ``k``,
``n``, in the order the model's forward runs them, with ``gemm_ms`` (ceiling.layer_gemm_ms).
"""
from __future__ import annotations

import math
import statistics
from collections import defaultdict

GEMM = ("conv", "linear")
KINDS = (*GEMM, "pooling", "add", "reorder", "quantize", "other")

# OpenVINO CPU plugin node types (ProfilingInfo.node_type) by kind; anything else is "other".
OV_KINDS = {"Convolution": "conv", "FullyConnected": "linear", "FullyConnectedQuantizedLegacy": "linear",
            "MatMul": "linear", "MaxPool": "pooling", "AvgPool": "pooling", "ReduceMean": "pooling",
            "Pooling": "pooling", "Eltwise": "add", "Add": "add", "Reorder": "reorder", "Transpose": "reorder",
            "Reshape": "reorder", "FakeQuantize": "quantize", "Subgraph": "quantize", "Convert": "quantize"}
# XNNPACK operator names (the ETDump delegate events, "<name> #<count>") by their first word(s).
XNNPACK_KINDS = (("Convolution", "conv"), ("Deconvolution", "conv"), ("Fully Connected", "linear"),
                 ("Max Pooling", "pooling"), ("Average Pooling", "pooling"), ("Global Average Pooling", "pooling"),
                 ("Mean", "pooling"), ("Add", "add"), ("Clamp", "add"), ("Transpose", "reorder"),
                 ("Static Reshape", "reorder"), ("Copy", "reorder"), ("Convert", "quantize"))


def ov_kind(node_type: str) -> str:
    """The kind of an OpenVINO CPU plugin node (its ProfilingInfo.node_type)."""
    return OV_KINDS.get(node_type, "other")


def xnnpack_kind(op_name: str) -> str:
    """The kind of an XNNPACK operator from its ETDump event name ("Convolution (NHWC, QC8) IGEMM #3").
    Clamp is the ReLU after a residual add, so it counts with the add."""
    for prefix, kind in XNNPACK_KINDS:
        if op_name.startswith(prefix):
            return kind
    return "other"


def fused_ops(original_names: str) -> list[str]:
    """The operations an OpenVINO execution node computes besides its own, from its
    originalLayersNames ("Convolution_37,Multiply_1,bn_2/aten.x/BatchNormInference,add/aten.add.Tensor/Add,
    relu_2/aten.relu.default/Relu/fq_output_0"): the op type after the last "/" of each torch-named part
    (BatchNormInference, Add, Relu; "fq_output_0" is the requantization, FakeQuantize), once each, in order."""
    ops: list[str] = []
    for part in original_names.split(",")[1:]:
        requantized = part.endswith("/fq_output_0")
        part = part.removesuffix("/fq_output_0")
        for op in ([part.rsplit("/", 1)[1]] if "/" in part else []) + (["FakeQuantize"] if requantized else []):
            if op not in ops:
                ops.append(op)
    return ops


def ov_gemm_shape(kind: str, input_shapes: list[list[int]], output_shape: list[int]) -> tuple[int, int, int]:
    """A GEMM node's (m, k, n) from its execution-graph port shapes: a convolution's weights are
    [n, c, kh, kw] (k = c kh kw) and its output [b, n, h, w] (m = b h w); a fully connected layer's
    input is [..., k] and output [..., n]."""
    if kind == "conv":
        weights = input_shapes[1]
        return (output_shape[0] * math.prod(output_shape[2:]), math.prod(weights[1:]), output_shape[1])
    n = output_shape[-1]
    return (math.prod(output_shape) // n, input_shapes[0][-1], n)


def match_by_shape(nodes: list[dict], layers: list[dict]) -> dict[str, str]:
    """Each GEMM node's layer: the k-th node of a shape (in the runtime's execution order) is the
    k-th layer of that shape (in forward order). Exact where layers of one shape depend on each
    other (a chain of blocks, as in resnet18), so their order cannot differ. Raises ValueError naming
    the nodes or layers left over."""
    by_shape: dict[tuple, list[str]] = defaultdict(list)
    for layer in layers:
        by_shape[layer["m"], layer["k"], layer["n"]].append(layer["layer"])
    matched = {}
    left: list[str] = []
    for node in (n for n in nodes if n["kind"] in GEMM):
        queue = by_shape.get(tuple(node["shape"]))
        if queue:
            matched[node["name"]] = queue.pop(0)
        else:
            left.append(f"{node['name']} {tuple(node['shape'])}")
    missing = [name for queue in by_shape.values() for name in queue]
    if left or missing:
        raise ValueError(f"GEMM nodes without a layer of their shape: {left or 'none'}; "
                         f"layers without a node: {missing or 'none'}")
    return matched


def match_in_order(nodes: list[dict], layers: list[dict]) -> dict[str, str]:
    """Each GEMM node's layer where the runtime gives no shape: the k-th convolution or linear node
    in execution order is the k-th layer of that kind in forward order. Raises ValueError when the
    counts differ (a fused or split layer would shift every later one)."""
    matched = {}
    for kind in GEMM:
        got = [n["name"] for n in nodes if n["kind"] == kind]
        want = [layer["layer"] for layer in layers if layer.get("kind", "conv") == kind]
        if len(got) != len(want):
            raise ValueError(f"{len(got)} {kind} nodes against {len(want)} {kind} layers: not matched in order")
        matched.update(zip(got, want))
    return matched


def layer_rows(layers: list[dict], nodes: list[dict], matched: dict[str, str]) -> list[dict]:
    """One row per layer: its GEMM shape, the runtime's time for it, its GEMM-only time, their ratio
    and the ms the runtime spends above the GEMM-only time (negative: faster than the GEMM kernels)."""
    node_of = {layer: name for name, layer in matched.items()}
    by_name = {n["name"]: n for n in nodes}
    rows = []
    for layer in layers:
        node = by_name[node_of[layer["layer"]]]
        rows.append({"layer": layer["layer"], "kind": layer.get("kind", "conv"),
                     "shape": [layer["m"], layer["k"], layer["n"]], "node": node["name"],
                     "kernel": node.get("exec_type"), "fused": node.get("fused", []),
                     "runtime_ms": node["ms"], "gemm_only_ms": layer["gemm_ms"],
                     "ratio": node["ms"] / layer["gemm_ms"], "ms_lost": node["ms"] - layer["gemm_ms"]})
    return rows


def furthest(rows: list[dict], count: int = 5) -> dict[str, list[dict]]:
    """The layers furthest from their GEMM-only time: by ratio, and by the absolute ms lost."""
    def brief(r: dict) -> dict:
        return {k: r[k] for k in ("layer", "shape", "runtime_ms", "gemm_only_ms", "ratio", "ms_lost")}

    return {"by_ratio": [brief(r) for r in sorted(rows, key=lambda r: -r["ratio"])[:count]],
            "by_ms_lost": [brief(r) for r in sorted(rows, key=lambda r: -r["ms_lost"])[:count]]}


def unattributed_ms(wall: list[float], node_times: list[list[float]]) -> float:
    """The inference's time no node accounts for (the runtime between its nodes, threads waiting):
    the median over inferences of each one's wall time less the sum of its nodes' times. Taken
    inference by inference, as a sum of per-node medians is not the median of the sums: on a busy
    machine a stall lands in some node of most inferences, and in none of the nodes' medians."""
    return statistics.median(w - sum(times[i] for times in node_times) for i, w in enumerate(wall))


def split_by_kind(nodes: list[dict], unattributed: float, total_ms: float) -> dict[str, dict]:
    """The inference's median time ``total_ms`` by kind of node (each node's median ms, summed by
    kind); what no node accounts for ("unattributed", from unattributed_ms); and what lies above the
    nodes' medians ("stalls": the total less both, the inferences a busy machine slowed, ~0 on a
    quiet one). Each with its share of the total."""
    ms = {kind: 0.0 for kind in KINDS}
    for node in nodes:
        ms[node["kind"]] += node["ms"]
    ms = {kind: value for kind, value in ms.items() if value > 0}
    ms["unattributed"] = max(0.0, unattributed)
    ms["stalls"] = max(0.0, total_ms - sum(ms.values()))
    return {kind: {"ms": value, "share": value / total_ms} for kind, value in ms.items()}


def outside_gemm(split: dict[str, dict]) -> dict:
    """The time outside the convolutions and linear layers (pooling, adds, reorders, quantization,
    other nodes and the unattributed time), as ms and as a share of the inference without stalls."""
    counted = {kind: v["ms"] for kind, v in split.items() if kind != "stalls"}
    outside = sum(ms for kind, ms in counted.items() if kind not in GEMM)
    return {"ms": outside, "share": outside / sum(counted.values())}


def achieved(total_ms: float, ops: int, peak_gops: float) -> dict:
    """The whole model's rate (GOP/s for its GEMM ops) and its share of the machine's int8 peak."""
    gops = ops / (total_ms / 1e3) / 1e9
    return {"ms": total_ms, "gop": ops / 1e9, "gops": gops, "peak_int8_gops": peak_gops, "of_peak": gops / peak_gops}
