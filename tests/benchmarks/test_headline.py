"""benchmarks/headline.py and candidates.py: precision classes (bf16 apart from fp32), the fastest
runtime per precision and the OpenVINO figures, on made-up timings (no runtime is run)."""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from candidates import plugin_compiled, precision_class  # noqa: E402
from harness import Timing  # noqa: E402
from headline import Figures, print_table, summarize, use_peaks  # noqa: E402

# name -> (kind, precision, runtime, p50 ms, sqnr dB, extra)
ROWS = {
    "eager": ("eager", "fp32", "eager", 10.0, None, {}),
    "x86/openvino-fp32": ("edgeship", "fp32", "openvino", 4.0, 126.0, {"backend": "openvino",
                                                                       "built_precision": "fp32"}),
    "x86/openvino-bf16": ("edgeship", "bf16", "openvino", 2.0, 47.0, {"backend": "openvino",
                                                                      "built_precision": "bf16"}),
    "x86/openvino-int8": ("edgeship", "int8", "openvino", 1.6, 35.0, {"backend": "openvino",
                                                                      "built_precision": "int8"}),
    "x86/onnx-fp32": ("edgeship", "fp32", "onnxruntime", 5.0, 118.0, {"backend": "onnx",
                                                                      "built_precision": "fp32"}),
    "x86/onnx-int8": ("edgeship", "int8", "onnxruntime", 1.5, 20.0, {"backend": "onnx",   # outside the budget
                                                                     "built_precision": "int8"}),
    "peer: onnxruntime default": ("peer", "fp32", "onnxruntime", 5.2, 118.0, {}),
    "peer: openvino default": ("peer", "bf16", "openvino", 2.1, 47.5, {}),   # the plugin computed in bf16
    "peer: nncf default ptq": ("peer", "int8", "openvino", 2.0, 30.0, {}),
    "peer: executorch xnnpack int8 default flow": ("peer", "int8", "executorch", 1.8, 28.0, {}),
}


def made_up() -> tuple[SimpleNamespace, Timing]:
    candidates = {name: {"kind": kind, "precision": precision, "runtime": runtime, "size_bytes": 100,
                         "sqnr_db": sqnr, "top1_drop": None, **extra}
                  for name, (kind, precision, runtime, _, sqnr, extra) in ROWS.items()}
    timing = Timing.__new__(Timing)  # only its log: p50, paired and spread read nothing else
    # nine rounds, each a little slower or faster for every candidate alike (the ratios stay exact)
    timing.log = [{name: {0: row[3] * (1 + 0.01 * (i % 3)), 1: row[3] * (1 + 0.01 * (i % 3))}
                   for name, row in ROWS.items()} for i in range(9)]
    return SimpleNamespace(candidates=candidates, flops=10 ** 9), timing


def test_headline_a_bf16_peer_is_compared_with_bf16_variants_only() -> None:
    found, timing = made_up()
    pairs = Figures(found.candidates, timing).headline_pairs()
    assert pairs["speedup_vs_best_fp32_peer"] == ("peer: onnxruntime default", "x86/openvino-fp32")
    assert pairs["speedup_vs_best_bf16_peer"] == ("peer: openvino default", "x86/openvino-bf16")
    assert pairs["speedup_vs_best_int8_peer"] == ("peer: executorch xnnpack int8 default flow", "x86/openvino-int8")


def test_headline_no_bf16_headline_without_bf16_candidates() -> None:
    found, timing = made_up()
    for name in ("x86/openvino-bf16", "peer: openvino default"):
        del found.candidates[name]
    assert "speedup_vs_best_bf16_peer" not in Figures(found.candidates, timing).headline_pairs()


def test_headline_fastest_runtime_per_precision() -> None:
    found, timing = made_up()
    by = Figures(found.candidates, timing).by_runtime()
    assert list(by) == ["fp32", "int8", "bf16"]
    assert by["fp32"]["fastest_runtime"] == "openvino" and list(by["fp32"]["runtimes"]) == ["openvino", "onnxruntime"]
    assert by["fp32"]["runtimes"]["onnxruntime"]["candidate"] == "x86/onnx-fp32"
    assert abs(by["fp32"]["runtimes"]["onnxruntime"]["fastest_speedup_over_it"]["value"] - 1.25) < 1e-9
    # ONNX Runtime's fastest int8 is outside the budget: it is not the fastest, and its row says so
    int8 = by["int8"]
    assert list(int8["runtimes"]) == ["openvino", "executorch", "onnxruntime"] and int8["fastest_runtime"] == "openvino"
    assert int8["runtimes"]["onnxruntime"]["within_budget"] is False
    assert int8["runtimes"]["openvino"]["candidate"] == "x86/openvino-int8"
    assert by["bf16"]["fastest_runtime"] == "openvino"


def test_headline_openvino_figures_with_targets() -> None:
    found, timing = made_up()
    summary = summarize(found, timing, {"x86": {"cold_build_seconds": 1.0, "rebuild_seconds": 0.5}})
    ov = summary["openvino"]
    assert ov["variants"]["int8"] == "x86/openvino-int8" and ov["variants"]["fp16"] is None
    assert abs(ov["int8_p50_over_fp32_p50"] - 0.4) < 1e-9
    assert ov["int8_over_fp32"]["verdict"] == "int8 faster"
    assert abs(ov["int8_vs_nncf_default_ptq"]["value"] - 1.25) < 1e-9
    assert abs(ov["int8_speedup_vs_eager"]["value"] - 6.25) < 1e-9
    assert (ov["int8_sqnr_db"], ov["bf16_sqnr_db"], ov["fp32_sqnr_db"]) == (35.0, 47.0, 126.0)
    assert ov["meets"] == {"int8_over_fp32": "met", "int8_vs_nncf_default_ptq": "met", "int8_sqnr_db": "met",
                           "bf16_sqnr_db": "met", "fp32_sqnr_db": "met"}


def test_headline_prints_and_leaves_bf16_without_a_peak(capsys) -> None:
    found, timing = made_up()
    results = {"machine": {"fp32_gflops": 100.0, "int8_gops": 400.0,
                           "after": {"fp32_gflops": 110.0, "int8_gops": 390.0}},
               "models": {"m": summarize(found, timing, {"x86": {"cold_build_seconds": 1.0, "rebuild_seconds": 0.5}})}}
    use_peaks(results)
    rows = results["models"]["m"]["rows"]
    assert rows["x86/openvino-bf16"]["fraction_of_peak"] is None and rows["x86/openvino-fp32"]["fraction_of_peak"]
    print_table(results)
    out = capsys.readouterr().out
    assert "speedup_vs_best_bf16_peer" in out and "fastest runtime per precision" in out
    assert "int8 p50 / fp32 p50: 0.40" in out and "target <= 0.45: met" in out


def test_candidates_precision_class_by_what_it_computes_in() -> None:
    assert precision_class("int8", {"inference_precision": "bf16"}) == "int8"
    assert precision_class("bf16", {"inference_precision": "bf16"}) == "bf16"
    assert precision_class("fp16", {"inference_precision": "f32"}) == "fp32"
    assert precision_class("fp32", {}) == "fp32"


def test_candidates_an_fp32_peer_the_plugin_computes_in_bf16_is_a_bf16_peer() -> None:
    bf16 = SimpleNamespace(precision="bf16", threads=2, hint="LATENCY")
    assert plugin_compiled(bf16, "fp32")["precision"] == "bf16"
    assert "precision" not in plugin_compiled(SimpleNamespace(precision="fp32", threads=2, hint="LATENCY"), "fp32")
    int8 = plugin_compiled(bf16, "int8")
    assert "precision" not in int8 and int8["plugin"]["inference_precision"] == "bf16"
