"""Settings chosen by the CPUs an int8 artifact will run on (ONNX Runtime's reduce_range, NNCF's
overflow_fix for OpenVINO): the choosers, the lowering, the stage key."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from edgeship.backends.onnx.cpu import choose_reduce_range
from edgeship.backends.openvino.cpu import choose_overflow_fix
from edgeship.backends.registry import cpu_dependence, depends_on_cpu
from edgeship.devices.cpu import parse_cpuinfo
from edgeship.quantize.cpu_choice import cpu_verdict
from tests.devices.test_cpu import EPYC_NO_VNNI, GRAVITON3, RPI4_AARCH64, XEON_VNNI_AMX

EPYC = parse_cpuinfo(EPYC_NO_VNNI)
XEON = parse_cpuinfo(XEON_VNNI_AMX)
PI4 = parse_cpuinfo(RPI4_AARCH64)
GRAVITON = parse_cpuinfo(GRAVITON3)


def test_choose_reduce_range_keeps_7_bit_weights_on_a_cpu_without_vnni() -> None:
    chosen, note = choose_reduce_range(None, "uint8", [("host", EPYC)])
    assert chosen is True
    assert note == ("7-bit weights (reduce_range): host's CPU has no VNNI (AMD EPYC 7B13: AVX2 without VNNI: "
                    "u8 x s8 pairs can saturate int16)")


def test_choose_reduce_range_takes_8_bit_weights_where_every_cpu_has_vnni() -> None:
    chosen, note = choose_reduce_range(None, "uint8", [("host", XEON)])
    assert chosen is False
    assert note == ("8-bit weights: every target CPU has VNNI, where u8 x s8 pairs do not saturate (host: Intel(R) "
                    "Xeon(R) Platinum 8480+ with VNNI (avx512_vnni, avx_vnni, amx_int8))")


def test_choose_reduce_range_takes_8_bit_weights_on_arm() -> None:
    chosen, note = choose_reduce_range(None, "uint8", [("pi", PI4), ("graviton", GRAVITON)])
    assert chosen is False and note.startswith("8-bit weights: every target CPU is ARM")
    assert "pi: Raspberry Pi 4 Model B Rev 1.4 (Cortex-A72), ARM" in note


def test_choose_reduce_range_one_cpu_without_vnni_among_several_decides() -> None:
    chosen, note = choose_reduce_range(None, "uint8", [("host", XEON), ("pi", PI4), ("edge", EPYC)])
    assert chosen is True and "edge's CPU has no VNNI" in note and "host" not in note


@pytest.mark.parametrize("cpus", [[("host", XEON)], [("host", EPYC)]])
@pytest.mark.parametrize("explicit", [True, False])
def test_choose_reduce_range_profile_setting_always_wins(explicit, cpus) -> None:
    chosen, note = choose_reduce_range(explicit, "uint8", cpus)
    assert chosen is explicit and note.startswith(f"reduce_range = {str(explicit).lower()} set in the profile")
    assert ("no VNNI on host" in note) == (not explicit and cpus[0][1] is EPYC)


def test_choose_reduce_range_s8s8_follows_the_cpu_since_x86_runs_it_as_u8s8() -> None:
    chosen, note = choose_reduce_range(None, "int8-symmetric", [("host", EPYC)])
    assert chosen is True and note.startswith("7-bit weights (reduce_range; ONNX Runtime runs S8S8 on its U8S8 "
                                              "kernels on x86 at graph optimization extended or all): host's CPU")
    assert choose_reduce_range(None, "int8-symmetric", [("host", XEON)])[0] is False


def test_choose_reduce_range_unknown_cpu_is_7_bits_to_be_safe() -> None:
    unreachable = {"model": None, "arch": None, "flags": [], "source": "unknown", "error": "probe failed: timeout"}
    chosen, note = choose_reduce_range(None, "uint8", [("host", XEON), ("orin", unreachable)])
    assert chosen is True
    assert note == ("7-bit weights (reduce_range): CPU of device orin unknown (probe failed: timeout), "
                    "so 7 bits to be safe")
    assert choose_reduce_range(None, "uint8", [])[0] is True


@pytest.mark.parametrize(("facts", "verdict"), [
    ({"model": "x", "arch": "x86_64", "flags": [], "source": "unknown"}, None),   # flags not read
    ({"model": "x", "arch": "riscv64", "flags": [], "source": "/proc/cpuinfo"}, None),
    ({"model": "Apple M1", "arch": "arm64", "flags": [], "source": "unknown"}, False),  # ARM needs no flags
    (None, None),
])
def test_cpu_verdict_without_usable_flags(facts, verdict) -> None:
    assert cpu_verdict(facts)[0] is verdict


# The CPU an emulated x86-avx2-emulated device reports (cpu.py reading CPUID under qemu-x86_64 -cpu Haswell).
HASWELL_CPUID = {"model": "Intel Core Processor (Haswell)", "arch": "x86_64", "source": "cpuid",
                 "flags": ["aes", "avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "movbe", "pclmulqdq", "popcnt",
                           "sse4_2"]}
AVX512_NO_VNNI = {"model": "Intel(R) Xeon(R) Gold 6148 (Skylake-SP)", "arch": "x86_64", "source": "/proc/cpuinfo",
                  "flags": ["avx", "avx2", "avx512bw", "avx512f", "avx512vl", "fma"]}
ZEN4 = {"model": "AMD EPYC 9B14", "arch": "x86_64", "source": "/proc/cpuinfo",
        "flags": ["avx", "avx2", "avx512_bf16", "avx512_vnni", "avx512bw", "avx512f", "avx512vl", "fma"]}
ALDER_LAKE = {"model": "12th Gen Intel(R) Core(TM) i7-1265U", "arch": "x86_64", "source": "/proc/cpuinfo",
              "flags": ["avx", "avx2", "avx_vnni", "fma"]}


@pytest.mark.parametrize(("facts", "chosen", "why"), [
    (EPYC, "enable", "host's CPU has no VNNI (AMD EPYC 7B13: AVX2 without VNNI: u8 x s8 pairs can saturate int16)"),
    (HASWELL_CPUID, "enable", "host's CPU has no VNNI (Intel Core Processor (Haswell): AVX2 without VNNI"),
    (AVX512_NO_VNNI, "enable", "(Skylake-SP): AVX-512 without VNNI"),
    (ZEN4, "first_layer_only", "every target CPU has VNNI, where u8 x s8 pairs do not saturate (host: AMD EPYC 9B14 "
                               "with VNNI (avx512_vnni))"),
    (ALDER_LAKE, "first_layer_only", "with VNNI (avx_vnni)"),
    (XEON, "first_layer_only", "with VNNI (avx512_vnni, avx_vnni, amx_int8)"),
    (PI4, "first_layer_only", "every target CPU is ARM"),
    ({"model": None, "arch": None, "flags": [], "source": "unknown", "error": "probe failed: timeout"}, "enable",
     "CPU of device host unknown (probe failed: timeout), so 7 bits to be safe"),
])
def test_choose_overflow_fix_by_cpu_kind(facts, chosen, why) -> None:
    value, note = choose_overflow_fix(None, [("host", facts)])
    assert value == chosen and why in note
    assert note.startswith("overflow_fix enable (NNCF: 7-bit weights in every layer): " if chosen == "enable" else
                           "overflow_fix first_layer_only (NNCF's default: 8-bit weights after the first layer): ")


def test_choose_overflow_fix_without_any_known_cpu_is_enable() -> None:
    assert choose_overflow_fix(None, [])[0] == "enable"
    assert choose_overflow_fix(None, [("host", XEON), ("edge", EPYC)])[0] == "enable"


@pytest.mark.parametrize("explicit", ["enable", "first_layer_only", "disable"])
def test_choose_overflow_fix_profile_setting_always_wins(explicit) -> None:
    value, note = choose_overflow_fix(explicit, [("edge", EPYC)])
    assert value == explicit and note.startswith(f"overflow_fix = {explicit} set in the profile")
    assert ("no VNNI on edge" in note) == (explicit != "enable")
    assert "no VNNI" not in choose_overflow_fix(explicit, [("server", XEON)])[1]


def test_openvino_int8_depends_on_the_cpu_unless_overflow_fix_is_set() -> None:
    from edgeship.profile import Variant

    def variant(precision: str = "int8", **options) -> Variant:
        return Variant(name="o", backend="openvino", precision=precision, options=options)

    def overflow_fix(v: Variant, cpus) -> str | None:
        return ((cpu_dependence(v, cpus) or {}).get("overflow_fix") or {}).get("value")

    assert depends_on_cpu(variant()) and overflow_fix(variant(), [("edge", EPYC)]) == "enable"
    assert overflow_fix(variant(), [("server", XEON)]) == "first_layer_only"
    assert not depends_on_cpu(variant(overflow_fix="enable")) and overflow_fix(variant(overflow_fix="enable"),
                                                                               [("edge", EPYC)]) is None
    assert not depends_on_cpu(variant("fp32")) and cpu_dependence(variant("fp16"), None) is None


def test_stage_key_of_an_openvino_int8_artifact_holds_the_overflow_choice(tmp_path, tiny_project) -> None:
    from edgeship.pipeline.plan import BuildRequest, make_plan
    from edgeship.pipeline.stagecache import StageKeys
    from tests.conftest import write_profile

    profile = write_profile(tmp_path, '[[variants]]\nname = "q"\nbackend = "openvino"\nprecision = "int8"\n')
    plan = make_plan(BuildRequest(target=str(profile), model=str(tiny_project / "model.toml")))
    (q,) = plan.profile.variants
    vnni, no_vnni = StageKeys(plan, [("host", XEON)]).artifact(q), StageKeys(plan, [("host", EPYC)]).artifact(q)
    assert vnni["cpu"]["overflow_fix"]["value"] == "first_layer_only"
    assert no_vnni["cpu"]["overflow_fix"]["value"] == "enable"
    assert vnni != no_vnni


def _variant(**options):
    from edgeship.profile import Variant

    return Variant(name="q", backend="onnx", precision="int8", options=options)


def test_depends_on_cpu_only_for_onnx_static_int8_left_unset() -> None:
    from edgeship.profile import Variant

    assert depends_on_cpu(_variant()) and depends_on_cpu(_variant(activations="int8-symmetric"))
    assert not depends_on_cpu(_variant(reduce_range=True))
    assert not depends_on_cpu(Variant(name="t", backend="tensorrt", precision="int8"))
    assert not depends_on_cpu(Variant(name="f", backend="onnx", precision="fp32"))
    assert not depends_on_cpu(Variant(name="d", backend="onnx", precision="int8", quantization={"scheme": "dynamic"}))
    assert cpu_dependence(_variant(), [("host", EPYC)])["reduce_range"]["value"] is True
    assert cpu_dependence(Variant(name="f", backend="onnx", precision="fp32"), [("host", EPYC)]) is None


def _lower(tiny_model, calib_data, folder: Path, cpus):
    """The tiny model lowered to static int8 ONNX (U8S8, reduce_range unset) for ``cpus``."""
    from edgeship.backends.base import LowerRequest
    from edgeship.backends.registry import BACKENDS
    from edgeship.lowering.capture import Capturer

    backend, variant = BACKENDS["onnx"], _variant()
    parsed = backend.parse_options({})
    captured = Capturer(tiny_model).get("export", True)
    request = LowerRequest(captured, variant, parsed, folder / "model.onnx", lambda: calib_data, None, cpus)
    return backend.lower(request)


def _widest_weight(path: Path) -> int:
    """The largest |value| of the model's int8 weight initializers (64 with 7-bit weights, 127 with 8)."""
    model = onnx.load(str(path))
    weights = [onnx.numpy_helper.to_array(i) for i in model.graph.initializer if i.data_type == onnx.TensorProto.INT8]
    return int(max(np.abs(w.astype(np.int32)).max() for w in weights if w.size > 1))


def test_onnx_int8_lowering_for_a_cpu_without_vnni_writes_7_bit_weights(tiny_model, calib_data, tmp_path) -> None:
    artifact = _lower(tiny_model, calib_data, tmp_path / "epyc", [("edge", EPYC)])
    quantization = artifact.details["quantization"]
    assert quantization["reduce_range"] is True
    assert quantization["reduce_range_reason"] in artifact.notes
    assert quantization["reduce_range_reason"].startswith("7-bit weights (reduce_range): edge's CPU has no VNNI")
    assert quantization["cpus"] == [{"device": "edge", **EPYC}]
    assert _widest_weight(artifact.path) <= 64


def test_onnx_int8_lowering_for_a_vnni_cpu_writes_8_bit_weights(tiny_model, calib_data, tmp_path) -> None:
    artifact = _lower(tiny_model, calib_data, tmp_path / "xeon", [("server", XEON)])
    quantization = artifact.details["quantization"]
    assert quantization["reduce_range"] is False
    assert quantization["reduce_range_reason"].startswith("8-bit weights: every target CPU has VNNI")
    assert quantization["reduce_range_reason"] in artifact.notes
    assert _widest_weight(artifact.path) > 64


def test_stage_key_of_an_onnx_int8_artifact_holds_the_choice(tmp_path, tiny_project) -> None:
    from edgeship.pipeline.plan import BuildRequest, make_plan
    from edgeship.pipeline.stagecache import StageKeys
    from tests.conftest import write_profile

    profile = write_profile(tmp_path, '[[variants]]\nname = "u8"\nbackend = "onnx"\nprecision = "int8"\n'
                                      '[[variants]]\nname = "f"\nbackend = "onnx"\n')
    plan = make_plan(BuildRequest(target=str(profile), model=str(tiny_project / "model.toml")))
    u8, fp32 = plan.profile.variants
    vnni, no_vnni = StageKeys(plan, [("host", XEON)]), StageKeys(plan, [("host", EPYC)])
    assert vnni.artifact(u8)["cpu"]["reduce_range"]["value"] is False
    assert no_vnni.artifact(u8)["cpu"]["reduce_range"]["value"] is True
    assert vnni.artifact(fp32) == no_vnni.artifact(fp32) and "cpu" not in vnni.artifact(fp32)
    assert vnni.build() != no_vnni.build()


def test_target_cpu_stage_reads_the_cpus_only_when_a_variant_chooses_by_them(tmp_path, tiny_project) -> None:
    from edgeship.devices.cpu import cpu_facts
    from edgeship.pipeline.plan import BuildRequest, make_plan
    from edgeship.pipeline.run import target_cpu_stage
    from edgeship.progress import Progress
    from tests.conftest import write_profile

    def plan(variants: str, name: str):
        profile = write_profile(tmp_path, variants, name=name)
        return make_plan(BuildRequest(target=str(profile), model=str(tiny_project / "model.toml")))

    int8 = plan('[[variants]]\nname = "u8"\nbackend = "onnx"\nprecision = "int8"\n', "int8")
    fixed = plan('[[variants]]\nname = "u8"\nbackend = "onnx"\nprecision = "int8"\noptions = { reduce_range = true }\n',
                 "fixed")
    assert target_cpu_stage(int8, Progress(quiet=True)) == [("host", cpu_facts())]
    assert target_cpu_stage(fixed, Progress(quiet=True)) is None
