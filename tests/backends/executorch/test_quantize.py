"""ExecuTorch's int8 path: PT2E with the XNNPACK quantizer, static and dynamic, lowered to XNNPACK."""
from __future__ import annotations

import itertools
import json
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.quantize.conftest import keeps_the_culprit, sqnr_vs_eager


def test_executorch_static_int8_is_delegated_and_close_to_float(lower_int8, tiny_model, calib_data) -> None:
    artifact, predict = lower_int8("executorch", "export", partitioner="xnnpack")
    q = artifact.details["quantization"]
    assert (q["scheme"], q["method"], q["per_channel"], q["samples"]) == ("static", "histogram", True, 16)
    assert artifact.details["delegated_nodes"] > 0 and "quantize_per_tensor" not in " ".join(
        artifact.details["non_delegated_ops"])
    values = xnnpack_values(artifact.path)
    assert ("xnn_datatype_qcint8", True) in values  # per-channel int8 weights inside the delegate
    assert ("xnn_datatype_qint8", False) in values  # int8 activations with calibrated ranges
    report = json.loads((artifact.path.parent / "sensitivity.json").read_text())
    assert {row["layer"] for row in report["layers"]} == {"stem.0", "dw", "pw", "head"}
    assert sqnr_vs_eager(tiny_model, predict, calib_data) > 20


def test_executorch_dynamic_int8_needs_no_calibration(lower_int8, tiny_model, calib_data) -> None:
    artifact, predict = lower_int8("executorch", "export", {"scheme": "dynamic"})
    q = artifact.details["quantization"]
    assert q["scheme"] == "dynamic" and "calibration" not in q
    values = xnnpack_values(artifact.path)
    assert ("xnn_datatype_qcint8", True) in values  # per-channel int8 weights inside the delegate
    assert ("xnn_datatype_qdint8", False) in values  # activations quantized at run time
    assert sqnr_vs_eager(tiny_model, predict, calib_data) > 20


@pytest.mark.slow
def test_executorch_minmax_per_tensor_keeps_the_worst_layer_float(lower_int8, tiny_model, calib_data) -> None:
    artifact, predict = lower_int8("executorch", "export", {"method": "minmax", "per_channel": False, "keep_float": 1})
    q = artifact.details["quantization"]
    assert q["method"] == "minmax" and q["per_channel"] is False
    assert ("xnn_datatype_qint8", True) in xnnpack_values(artifact.path)  # per-tensor int8 weights
    assert q["kept_float"] == [q["sensitivity"]["worst"][0]["layer"]]
    assert sqnr_vs_eager(tiny_model, predict, calib_data) > 20


def xnnpack_values(pte: Path) -> set[tuple[str, bool]]:
    """(datatype, is a constant) of every value in the .pte's XNNPACK delegates: what the runtime
    really gets, whatever the quantizer reported."""
    values = set()
    for graph in xnnpack_graphs(pte):
        for value in graph["xvalues"]:
            tensor = value["xvalue_union"].get("tensor_value", value["xvalue_union"])
            values.add((tensor["datatype"], tensor["constant_buffer_idx"] != 0))
    assert values, f"{pte} has no XNNPACK delegate"
    return values


def xnnpack_graphs(pte: Path) -> Iterator[dict]:
    """Each XNNPACK delegate's XNNGraph in the .pte, as JSON. ExecuTorch has no public reader for a
    delegate's payload, so this uses its private serialization helpers (as of executorch 1.5)."""
    from importlib.resources import files

    from executorch.backends.xnnpack.serialization.xnnpack_graph_serialize import XNNHeader
    from executorch.exir._serialize._flatbuffer import _flatc_decompile
    from executorch.exir._serialize._program import _extract_delegate_payload

    data = pte.read_bytes()
    schema = files("executorch.backends.xnnpack.serialization").joinpath("schema.fbs").read_bytes()
    for index in itertools.count():
        payload = _extract_delegate_payload(data, "xnnpack", index)
        if payload is None:
            return
        header = XNNHeader.from_bytes(payload[:XNNHeader.EXPECTED_LENGTH])
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "schema.fbs").write_bytes(schema)
            (Path(tmp) / "graph.bin").write_bytes(
                payload[header.flatbuffer_offset:header.flatbuffer_offset + header.flatbuffer_size])
            _flatc_decompile(tmp, str(Path(tmp) / "schema.fbs"), str(Path(tmp) / "graph.bin"), ["--raw-binary"])
            text = (Path(tmp) / "graph.json").read_text()
        yield json.loads(re.sub(r'(?<![\w"])(-?)inf\b', r"\1Infinity", text))  # flatc writes bare inf


def test_executorch_keep_float_keeps_the_layer_whose_own_error_costs_most(lower_culprit, culprit_model) -> None:
    kept, all_int8, one_float = keeps_the_culprit(lower_culprit, culprit_model, "executorch", "export",
                                                  partitioner="xnnpack")
    assert kept.details["quantization"]["kept_float"] == ["first"]
    assert one_float > all_int8 + 8, (all_int8, one_float)


@pytest.mark.parametrize("which", ["tinyformer", "conv"])
def test_weighted_xnnpack_quantizer_annotates_as_every_target_did_with_fewer_pattern_traces(
        which: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One operator type per weighted kind the graph calls annotates exactly the nodes that one per
    target of every kind did (the quantizer before), and traces no conv + batch-norm pattern for a
    graph without convolutions (before: 54 traces per prepare)."""
    import torch
    from executorch.backends.xnnpack.quantizer import xnnpack_quantizer_utils as utils
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        CONV_TARGETS,
        CONV_TRANSPOSE_TARGETS,
        LINEAR_TARGETS,
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    from edgeship.backends.executorch.quantize import xnnpack_quantizer
    from edgeship.quantize.pt2e import graph_ops
    from tests.quantize.tinyformer import build

    class ConvBlock(torch.nn.Module):   # conv + batch norm + relu, a transposed conv, a linear layer
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
            self.up = torch.nn.ConvTranspose2d(4, 4, 2)
            self.head = torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.head(self.up(self.conv(x)).mean((2, 3)))

    model, example = ((build(), (torch.randn(1, 8, 16),)) if which == "tinyformer"
                      else (ConvBlock().eval(), (torch.randn(1, 3, 8, 8),)))
    program = torch.export.export(model, example)
    every = XNNPACKQuantizer()
    for target in (*LINEAR_TARGETS, *CONV_TARGETS, *CONV_TRANSPOSE_TARGETS):
        every.set_operator_type(target, get_symmetric_quantization_config(is_per_channel=True))
    traces = []
    real = utils._get_aten_graph_module_for_pattern
    monkeypatch.setattr(utils, "_get_aten_graph_module_for_pattern",
                        lambda *a, **k: traces.append(1) or real(*a, **k))

    def annotated(quantizer) -> dict[str, tuple]:
        traces.clear()
        module = program.module()
        quantizer.annotate(module)
        return {n.name: (sorted((i.name, type(s).__name__) for i, s in a.input_qspec_map.items()),
                         type(a.output_qspec).__name__, a._annotated)
                for n in module.graph.nodes if (a := n.meta.get("quantization_annotation")) is not None}

    before, before_traces = annotated(every), len(traces)
    after = annotated(xnnpack_quantizer(True, None, [], weighted=graph_ops(program)))
    assert after == before and any("linear" in name for name in after)
    if which == "tinyformer":
        assert (before_traces, len(traces)) == (54, 0)
    else:   # conv, its batch norm and the transposed conv annotated; each kind's patterns traced once
        assert {"conv2d", "conv_transpose2d"} <= {name.rstrip("_0123456789") for name in after}
        assert len(traces) == 12 and before_traces == 36 + 18
