"""The int8 variants of the shipped profiles on the CPU kinds they meet: the demo's host and x86 int8
variants built for this machine and the emulated AVX2 CPU without VNNI (x86-avx2-emulated), every
gate checked on both. Without VNNI the u8 x s8 int8 kernels of ONNX Runtime and OpenVINO's CPU
plugin can saturate, so the build must choose 7-bit weights for that target; the variant that keeps
NNCF's default (8-bit weights after the first layer) shows that the emulated device sees it.
Outputs only: the emulator's time is no latency. Skips without qemu-user."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import tomllib

from edgeship.devices.cpu import cpu_facts
from edgeship.quantize.cpu_choice import cpu_verdict
from tests.conftest import REPO, build_on, shipped_variants_profile
from tests.devices.test_qemu import HASWELL, needs_qemu


def int8_variants(target: str, prefix: str = "") -> list[dict]:
    profile = tomllib.loads((REPO / "targets" / f"{target}.toml").read_text())
    return [{**v, "name": prefix + v["name"]} for v in profile["variants"] if v.get("precision") == "int8"]


def cpu_kinds_profile(folder: Path) -> Path:
    """host.toml's and x86.toml's int8 variants as shipped, and openvino-int8 at NNCF's default."""
    variants = int8_variants("host") + int8_variants("x86", "x86-")
    default = next(v for v in variants if v["name"] == "openvino-int8")
    variants.append({**default, "name": "openvino-int8-nncf-default",  # no layer kept float: NNCF's default as is
                     "quantization": {**default["quantization"], "keep_float": 0},
                     "options": {**default.get("options", {}), "overflow_fix": "first_layer_only"}})
    return shipped_variants_profile(folder, "cpu-kinds", "the shipped int8 variants on two CPU kinds", variants)


@pytest.mark.slow
@needs_qemu
def test_the_shipped_int8_variants_pass_on_an_avx2_cpu_without_vnni_and_on_this_one(tmp_path) -> None:
    out = tmp_path / "out"
    proc = build_on(cpu_kinds_profile(tmp_path), out, ["host", HASWELL], timeout=1200)
    assert proc.returncode == 3, proc.stderr[-3000:]  # the NNCF-default variant fails, on the emulated CPU only
    rows = {r["name"]: r for r in json.loads((out / "results.json").read_text())["variants"]}
    shipped = [name for name in rows if name not in ("eager", "openvino-int8-nncf-default")]
    assert len(shipped) == 4
    for name in shipped:
        row = rows[name]
        assert row["gates"]["passed"], (name, row["gates"])
        host, emulated = row["latency"]
        assert (host["device"], emulated["device"]) == ("host", HASWELL)
        assert emulated["emulated"].endswith("-cpu Haswell (TCG)") and host["emulated"] is None
        assert emulated["cpu"]["source"] == "cpuid" and "avx512_vnni" not in emulated["cpu"]["flags"]
        assert emulated["accuracy"]["sqnr_db"] >= 20 and host["accuracy"]["sqnr_db"] >= 20
        chosen = row["lowering"]["details"]["quantization"]
        if row["backend"] == "openvino":
            assert chosen["overflow_fix"] == "enable"
            assert f"{HASWELL}'s CPU has no VNNI (Intel Core Processor (Haswell): AVX2 without VNNI" in \
                   chosen["overflow_fix_reason"] and chosen["overflow_fix_reason"] in row["lowering"]["notes"]
        else:
            assert chosen["reduce_range"] is True and f"{HASWELL}'s CPU has no VNNI" in chosen["reduce_range_reason"]
    default = rows["openvino-int8-nncf-default"]
    assert default["latency"][1]["accuracy"]["sqnr_db"] < 20  # saturated: 17.0 dB, 26.2 dB with 7-bit weights
    if cpu_verdict(cpu_facts())[0] is False:  # this CPU has VNNI: the default holds here, fails there only
        assert [f for f in default["gates"]["failures"] if not f.endswith(f"on {HASWELL}")] == []
    _emulated_time_is_never_a_speed(out)


def _emulated_time_is_never_a_speed(out: Path) -> None:
    report = (out / "report.md").read_text()
    assert "| emulated" in report and f"{HASWELL} is emulated (qemu-x86_64" in report
    chosen = report.split("## Chosen for the target CPUs")[1].split("## ")[0]
    line = next(ln for ln in chosen.splitlines() if ln.startswith("- openvino-int8: overflow_fix enable (NNCF: 7-bit"))
    assert f"{HASWELL}'s CPU has no VNNI" in line  # and the host's too, on a host without VNNI
    assert "- onnx-int8: 7-bit weights (reduce_range): " in chosen
    assert "- openvino-int8-nncf-default: overflow_fix = first_layer_only set in the profile" in chosen
    with open(out / "results.csv", newline="") as f:
        emulated = [r for r in csv.DictReader(f) if r["device"] == HASWELL and r["variant"] != "eager"]
    assert emulated and all(r["speedup_vs_eager"] == "" and r["emulated"] for r in emulated)
    assert all(f"{HASWELL} is emulated" in r["not_measured"] for r in emulated)


def test_emulated_rows_are_never_selected_or_gated_by_time() -> None:
    from edgeship.pipeline.gates import check_gates
    from edgeship.profile import Gates
    from edgeship.quantize.selection import select_variant
    from edgeship.quantize.settings import SelectionSettings
    from edgeship.results import Accuracy, GateResult, Latency, VariantResult

    def row(name: str, p50: float) -> VariantResult:
        lat = Latency(device="old-pc", runtime="onnxruntime", warmup=1, iterations=3, p50_ms=p50,
                      emulated="qemu-x86_64 7.2 -cpu Haswell (TCG)")
        return VariantResult(name=name, backend="onnx", precision="int8", latency=[lat], gates=GateResult(),
                             accuracy=Accuracy(samples=4, agreement=1.0, sqnr_db=40.0))

    settings = SelectionSettings(select="fastest-within-budget", max_top1_drop=1.0)
    chosen = select_variant(settings, [row("a", 9.0), row("b", 1.0)], "old-pc")
    assert chosen.selected is None
    assert {c.reason for c in chosen.candidates} == {"old-pc is emulated (qemu-x86_64 7.2 -cpu Haswell (TCG)): its "
                                                     "times are not the CPU's"}
    assert check_gates(Gates(max_p50_ms=0.5), None, row("a", 9.0).latency).passed
    from edgeship.matrix.report import best_on, no_best_why
    from edgeship.results import ModelInfo, Results

    results = Results(target="t", created="2026-01-01T00:00:00Z", toolchain={}, variants=[row("a", 9.0)],
                      model=ModelInfo(name="m", entry="m:build", weights_sha256="w", inputs=[], params=1))
    assert best_on(results, "old-pc") is None
    assert no_best_why(results, "old-pc").startswith("old-pc is emulated (qemu-x86_64 7.2 -cpu Haswell (TCG)): its "
                                                      "times are the emulator's")


@pytest.mark.parametrize("target", ["host", "x86"])
def test_the_shipped_int8_variants_leave_overflow_fix_and_reduce_range_to_the_cpus(target) -> None:
    """The profiles must not pin a setting that holds on one CPU kind only."""
    for variant in int8_variants(target):
        assert "overflow_fix" not in variant.get("options", {}) and "reduce_range" not in variant.get("options", {})
