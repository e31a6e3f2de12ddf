"""benchmarks/headline.py and candidates.py: precision classes (bf16 apart from fp32), the fastest
runtime per precision and the OpenVINO figures, on made-up timings (no runtime is run)."""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from candidates import plugin_compiled, precision_class  # noqa: E402
from harness import Timing  # noqa: E402
from headline import Figures, next_rounds, print_table, refine, summarize, use_peaks  # noqa: E402

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


# name -> each of its two processes' (load ms, first inference ms, MiB over the baseline); the rest: COLD_REST
COLD = {"x86/onnx-fp32": ((10.0, 1.0, 150.0), (11.0, 1.0, 152.0)),
        "peer: onnxruntime default": ((20.0, 1.0, 150.0), (22.0, 1.0, 151.0)),
        "peer: nncf default ptq": ((50.0, 5.0, 40.0), (51.0, 5.0, 60.0)),
        "x86/openvino-int8": ((50.0, 5.0, 50.0), (51.0, 5.0, 70.0))}
COLD_REST = ((50.0, 5.0, 200.0), (52.0, 5.0, 202.0))


def made_up() -> tuple[SimpleNamespace, Timing]:
    candidates = {name: {"kind": kind, "precision": precision, "runtime": runtime, "size_bytes": 100,
                         "sqnr_db": sqnr, "top1_drop": None, **extra}
                  for name, (kind, precision, runtime, _, sqnr, extra) in ROWS.items()}
    timing = Timing.__new__(Timing)  # only its log: p50, paired and spread read nothing else
    # nine rounds, each a little slower or faster for every candidate alike (the ratios stay exact)
    timing.log = [{name: {0: row[3] * (1 + 0.01 * (i % 3)), 1: row[3] * (1 + 0.01 * (i % 3))}
                   for name, row in ROWS.items()} for i in range(9)]
    timing.failed = {}
    timing.cold = {name: [{"import_ms": 100.0, "load_ms": load, "first_inference_ms": first,
                           "peak_rss_mb": 300.0 + over, "rss_over_baseline_mb": over}
                          for load, first, over in COLD.get(name, COLD_REST)] for name in ROWS}
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
    assert "m: starts fastest (load + first inference): x86/onnx-fp32 (onnxruntime) 11.5 [11.0-12.0] ms" in out
    assert "baseline): peer: nncf default ptq (openvino) 50.0 [40.0-60.0] MiB" in out


def test_headline_cold_start_fastest_start_and_least_memory_with_peers_side_by_side() -> None:
    found, timing = made_up()
    m = summarize(found, timing, {"x86": {"cold_build_seconds": 1.0, "rebuild_seconds": 0.5}})
    assert m["rows"]["x86/onnx-fp32"]["load_ms"] == 10.5 and m["rows"]["x86/onnx-fp32"]["start_ms"] == 11.5
    assert m["eager_cold"]["rss_over_baseline_mb"] == 201.0
    fastest, least = m["cold"]["fastest_start"], m["cold"]["least_memory"]
    assert (fastest["candidate"], fastest["runner_up"], fastest["apart"]) == (
        "x86/onnx-fp32", "peer: onnxruntime default", True)
    assert (least["candidate"], least["runner_up"], least["apart"]) == ("peer: nncf default ptq", "x86/openvino-int8",
                                                                        False)   # 40-60 and 50-70 overlap
    assert [r["candidate"] for r in m["cold"]["by_runtime"]["onnxruntime"]] == [
        "x86/onnx-fp32", "peer: onnxruntime default", "x86/onnx-int8"]
    assert next(iter(m["cold"]["by_runtime"])) == "onnxruntime"   # the runtime with the fastest start first
    assert m["cold"]["fastest_ready"]["candidate"] == "x86/onnx-fp32"   # every import took 100 ms here


def test_headline_cold_start_ready_first_counts_the_import() -> None:
    found, timing = made_up()
    for record in timing.cold["x86/onnx-fp32"]:
        record["import_ms"] = 1000.0
    m = summarize(found, timing, {"x86": {"cold_build_seconds": 1.0, "rebuild_seconds": 0.5}})
    assert m["cold"]["fastest_start"]["candidate"] == "x86/onnx-fp32"
    assert m["cold"]["fastest_ready"]["candidate"] == "peer: onnxruntime default"
    assert m["rows"]["x86/onnx-fp32"]["ready_ms"] == 1011.5


def test_headline_cold_start_not_measured_says_why() -> None:
    found, timing = made_up()
    timing.cold["x86/onnx-fp32"] = [{"not_measured": "runs elsewhere"}]
    m = summarize(found, timing, {"x86": {"cold_build_seconds": 1.0, "rebuild_seconds": 0.5}})
    row = m["rows"]["x86/onnx-fp32"]
    assert row["start_ms"] is None and row["cold_start"] == {"not_measured": "runs elsewhere"}
    assert m["cold"]["fastest_start"]["candidate"] == "peer: onnxruntime default"


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


def refined(ratios: list[float], max_rounds: int = 15) -> list[tuple[int, list[str]]]:
    """The rounds refine() adds to a headline pair (eager against one variant) whose rounds so far
    gave ``ratios`` (eager's time over the variant's); every added round gives a ratio of exactly 2."""
    candidates = {"eager": {"kind": "eager", "precision": "fp32", "runtime": "eager"},
                  "host/a": {"kind": "edgeship", "precision": "fp32", "runtime": "onnxruntime", "sqnr_db": 100.0}}
    timing = Timing.__new__(Timing)
    timing.log = [{"eager": {0: 2.0 * r}, "host/a": {0: 1.0}} for r in ratios]
    added = []

    def run(rounds: int, block: int, names: list[str]) -> None:
        added.append((rounds, names))
        timing.log.extend({"eager": {0: 2.0}, "host/a": {0: 1.0}} for _ in range(rounds))
    timing.run = run
    refine(timing, candidates, 15, max_rounds)
    return added


def test_refine_adds_rounds_where_the_rounds_so_far_predict_a_narrow_enough_interval() -> None:
    # seven rounds: one outlier makes the interval (the smallest to the largest) 14% wide, the rest lie within 2%
    added = refined([1.00, 1.01, 0.99, 1.00, 1.01, 0.99, 1.13])
    assert added == [(2, ["eager", "host/a"])]   # to 9 rounds, where the interval leaves out the extremes


def test_refine_adds_no_rounds_where_the_noise_would_keep_the_interval_wide() -> None:
    # seven rounds spread +-20%: even 15 rounds' interval (about the middle half of them) would be wider than 6%
    assert refined([0.80, 0.90, 1.00, 1.10, 1.20, 0.85, 1.15]) == []


def test_refine_adds_no_rounds_to_a_narrow_interval() -> None:
    assert refined([1.00, 1.01, 0.99, 1.00, 1.01, 0.99, 1.02]) == []


def test_refine_steps_to_the_counts_where_the_interval_narrows() -> None:
    assert [next_rounds(n, 15) for n in (5, 7, 9, 12, 14)] == [9, 9, 12, 15, 15]
    assert next_rounds(7, 8) == 8


def test_headline_a_same_file_with_its_own_loader_keeps_its_own_cold_start() -> None:
    found, timing = made_up()
    found.candidates["peer: onnx same file"] = {**found.candidates["peer: onnxruntime default"],
                                                "same_as": "x86/onnx-fp32"}   # loaded apart (cold_only)
    found.candidates["x86/onnx-fp32 again"] = {**found.candidates["x86/onnx-fp32"], "kind": "edgeship",
                                               "same_as": "x86/onnx-fp32"}    # the same loader: measured once
    timing.cold["peer: onnx same file"] = [{"import_ms": 50.0, "load_ms": 30.0, "first_inference_ms": 1.0,
                                            "peak_rss_mb": 400.0, "rss_over_baseline_mb": 100.0}]
    m = summarize(found, timing, {"x86": {"cold_build_seconds": 1.0, "rebuild_seconds": 0.5}})
    assert m["rows"]["peer: onnx same file"]["p50_ms"] == m["rows"]["x86/onnx-fp32"]["p50_ms"]
    assert m["rows"]["peer: onnx same file"]["load_ms"] == 30.0
    assert m["rows"]["x86/onnx-fp32 again"]["load_ms"] == m["rows"]["x86/onnx-fp32"]["load_ms"] == 10.5
    entries = {e["candidate"]: e for e in m["cold"]["by_runtime"]["onnxruntime"]}
    assert entries["peer: onnx same file"]["own_cold_start"] and not entries["x86/onnx-fp32 again"]["own_cold_start"]
