"""Quantization settings picked from the CPUs an artifact will run on: ONNX Runtime's ``reduce_range``
and NNCF's ``overflow_fix`` for OpenVINO (both: 7-bit weights where u8 x s8 pairs can saturate).

Why it depends on the CPU (ONNX Runtime's documentation, docs/performance/model-optimizations/
quantization.md, "Data type selection" and the FAQ "When to use reduce-range"): on x86-64 with AVX2
or AVX-512, ONNX Runtime runs U8S8 (uint8 activations, int8 weights) with VPMADDUBSW, which adds
each pair of u8 x s8 products into a saturating int16, so full 8-bit weights can clip; reduce_range
(7-bit weights) "is designed for the U8S8 format on AVX2 and AVX512 (non-VNNI) machines to mitigate
saturation issues. This is not needed on machines supporting VNNI", and "there is no such issue on
other CPU architectures (x64 with VNNI and ARM)". VNNI (avx512_vnni, or avx_vnni) fuses the products
into int32 (MLAS's VNNI kernels use VPDPBUSD). 8-bit weights are better by up to about 6 dB of SQNR
(one bit; 2.4 dB on the demo model below, 1.1 dB on the demo and 3.1 dB on a random-weight resnet18
in make bench-cpu-kinds on an AMX CPU), so they are used wherever every target CPU takes them,
and 7 bits wherever one might not.

S8S8 (int8-symmetric activations) follows the same rule, although the documentation ties
reduce_range to U8S8 only: in ONNX Runtime's source, on x86 at graph optimization "extended" or "all"
(the default), the CPU provider's QDQS8ToU8Transformer turns int8 activation Q/DQ pairs into uint8
while Conv/MatMul/Gemm weights stay int8 (QDQIsInt8Allowed() is true only on ARM), so an S8S8 model
runs on the same U8S8 kernels. Measured on this project's AVX2 machine without VNNI (the demo model,
ONNX Runtime 1.32): S8S8 with 8-bit weights reads 26.8 dB unfused and 20.6 dB at "all", with 7-bit
weights 25.4 dB at both; U8S8 reads 30.0 / 14.6 dB with 8-bit weights and 27.6 / 27.6 dB with 7-bit.
(The tensorrt backend's S8S8 QDQ does not come through here: TensorRT and its host proxy at "basic"
run it unfused.)

OpenVINO's CPU plugin has the same hazard (NNCF's documentation of ``OverflowFix``: "the overflow
issue fix for the 8-bit quantization" on CPUs without VNNI): without VNNI its oneDNN int8 kernels
multiply u8 activations by s8 weights with VPMADDUBSW too. NNCF's default, ``first_layer_only``,
keeps 7-bit weights in the first layer only. Measured on an AVX2 CPU without VNNI (the demo model,
OpenVINO 2026.4, NNCF 3.4): first_layer_only 16.97 dB, disable 17.15 dB, enable 26.37 dB (ONNX
Runtime's U8S8 int8 on the same CPU: 28.8 dB); a small residual + attention CNN 15.02 / 15.09 /
39.92 dB. So ``enable`` wherever a target CPU has neither VNNI nor AMX or is not known, NNCF's
default where every one has them (or is ARM, whose int8 dot products accumulate in int32).

An explicit ``reduce_range`` or ``overflow_fix`` in the profile always wins; every choice comes with
a note saying what was chosen and why, which goes into the artifact's notes and
``lowering.details.quantization``.
"""
from __future__ import annotations

from typing import Any

from edgeship.devices.cpu import cpu_facts, int8_kernel_facts
from edgeship.lowering.registry import BF16_FLAGS, SPECS
from edgeship.profile.models import Variant
from edgeship.quantize.settings import needs_calibration

TargetCpu = tuple[str, dict[str, Any] | None]  # (device name, its cpu_facts(); None or "error" when unknown)
VNNI_FLAGS = ("avx512_vnni", "avx_vnni")
S8S8_AS_U8S8 = "; ONNX Runtime runs S8S8 on its U8S8 kernels on x86 at graph optimization extended or all"


def choose_reduce_range(explicit: bool | None, activations: str, cpus: list[TargetCpu]) -> tuple[bool, str]:
    """ONNX Runtime's ``reduce_range`` for an artifact run on ``cpus``, and the note saying why:
    the profile's value when set; else True when any target CPU is x86 without VNNI or not known,
    False when every one has VNNI or is ARM. ``activations`` ("uint8" or "int8-symmetric") only
    words the note: x86 runs both on the U8S8 kernels."""
    if explicit is not None:
        return explicit, _explicit_note(f"reduce_range = {str(explicit).lower()}", explicit, cpus)
    risky, why = saturation(cpus)
    if risky:
        return True, "7-bit weights (reduce_range" + (S8S8_AS_U8S8 if activations != "uint8" else "") + "): " + why
    return False, f"8-bit weights: {why}"


def choose_overflow_fix(explicit: str | None, cpus: list[TargetCpu]) -> tuple[str, str]:
    """NNCF's ``overflow_fix`` for an OpenVINO int8 IR run on ``cpus``, and the note saying why: the
    profile's value when set; else "enable" (7-bit weights in every layer) when any target CPU is
    x86 without VNNI or AMX, or not known; "first_layer_only" (NNCF's default) when every one has
    them or is ARM."""
    if explicit is not None:
        return explicit, _explicit_note(f"overflow_fix = {explicit}", explicit != "disable", cpus,
                                        partly=explicit == "first_layer_only")
    risky, why = saturation(cpus)
    if risky:
        return "enable", "overflow_fix enable (NNCF: 7-bit weights in every layer): " + why
    return "first_layer_only", ("overflow_fix first_layer_only (NNCF's default: 8-bit weights after the first "
                                f"layer): {why}")


def saturation(cpus: list[TargetCpu]) -> tuple[bool, str]:
    """Whether u8 x s8 int8 kernels may saturate on some CPU of ``cpus`` (x86 without VNNI or AMX, or
    not known; no CPU at all counts as not known), and why, naming each device."""
    if not cpus:
        return True, "no target CPU is known, so 7 bits to be safe"
    verdicts = [(name, *cpu_verdict(facts)) for name, facts in cpus]
    risky = [_risk(name, saturates, why) for name, saturates, why in verdicts if saturates is not False]
    if risky:
        return True, "; ".join(risky)
    isas = tuple(sorted({int8_kernel_facts(facts)["isa"] for _, facts in cpus}))
    lead = {("x86",): "every target CPU has VNNI", ("arm",): "every target CPU is ARM"}.get(
        isas, "every target CPU has VNNI or is ARM")
    return False, (f"{lead}, where u8 x s8 pairs do not saturate ("
                   + "; ".join(f"{name}: {why}" for name, _, why in verdicts) + ")")


def cpu_verdict(facts: dict[str, Any] | None) -> tuple[bool | None, str]:
    """Whether u8 x s8 with 8-bit weights can saturate on this CPU: True (x86 without VNNI or AMX),
    False (x86 with VNNI or AMX, or ARM), None (not known: no facts, unknown flags, another
    architecture); and why."""
    if not facts or facts.get("error"):
        return None, (facts or {}).get("error") or "not probed"
    model, kernels = facts.get("model") or "model unknown", int8_kernel_facts(facts)
    if kernels["isa"] == "arm":
        return False, f"{model}, ARM"
    if kernels["isa"] != "x86":
        return None, f"{model}: no rule for architecture {facts.get('arch') or 'unknown'}"
    if not kernels["flags_known"]:
        return None, f"{model}: its instruction-set flags could not be read"
    flags = facts.get("flags") or []
    if kernels["vnni"] or kernels["amx"]:
        return False, f"{model} with VNNI ({', '.join(f for f in (*VNNI_FLAGS, 'amx_int8') if f in flags)})"
    widest = "AVX-512" if "avx512bw" in flags else "AVX2" if "avx2" in flags else "SSE"
    return True, f"{model}: {widest} without VNNI"


def onnx_reduce_range(variant: Variant, cpus: list[TargetCpu] | None) -> tuple[bool, str] | None:
    """The choice an onnx variant's lowering makes on ``cpus`` (None: this machine), or None when the
    variant's artifact does not depend on the CPU (not static int8 ONNX with reduce_range unset).
    The stage cache keys the artifact on it."""
    if not onnx_chooses_by_cpu(variant):
        return None
    options = SPECS["onnx"].parse_options(variant.options)
    return choose_reduce_range(options.reduce_range, options.activations, this_machine() if cpus is None else cpus)


def depends_on_cpu(variant: Variant) -> bool:
    """Whether lowering ``variant`` chooses a setting by CPU or checks its targets' CPUs: static int8
    ONNX with reduce_range left unset; int8 OpenVINO with overflow_fix left unset; an AOTInductor
    package (native code for an instruction set: lowering/aoti_isa.py), unless each device compiles
    it for its own CPU (compile_on = "device" with isa auto or native: the artifact is then the
    exported program, whatever the CPUs); an OpenVINO variant computed in bf16 (its notes name the
    target CPUs without bf16 instructions)."""
    return (aoti_checks_cpus(variant) or onnx_chooses_by_cpu(variant) or openvino_checks_bf16(variant)
            or openvino_chooses_by_cpu(variant))


def openvino_chooses_by_cpu(variant: Variant) -> bool:
    """int8 OpenVINO with overflow_fix left unset: its quantization picks overflow_fix by CPU."""
    return (variant.backend == "openvino" and variant.precision == "int8"
            and SPECS["openvino"].parse_options(variant.options).overflow_fix is None)


def openvino_overflow_fix(variant: Variant, cpus: list[TargetCpu] | None) -> tuple[str, str] | None:
    """The overflow_fix an openvino int8 variant's quantization chooses on ``cpus`` (None: this
    machine), or None for other variants and when the profile sets it (the variant's options are
    then in the stage cache key already)."""
    if not openvino_chooses_by_cpu(variant):
        return None
    return choose_overflow_fix(None, this_machine() if cpus is None else cpus)


def openvino_checks_bf16(variant: Variant) -> bool:
    """An openvino variant the CPU plugin computes in bf16: its lowering checks the target CPUs."""
    return variant.backend == "openvino" and SPECS["openvino"].computes_in(variant.precision, variant.options) == "bf16"


def lacking_bf16(cpus: list[TargetCpu]) -> list[str]:
    """The names of the devices among ``cpus`` whose flags are known and hold no bf16 instructions
    (BF16_FLAGS: AVX512-BF16, AMX-BF16); a CPU whose flags are unknown is not listed."""
    return [name for name, facts in cpus
            if (facts or {}).get("flags") and not (facts or {}).get("error")
            and not any(f in facts["flags"] for f in BF16_FLAGS)]


def openvino_bf16(variant: Variant, cpus: list[TargetCpu] | None) -> dict[str, Any] | None:
    """For an openvino variant computed in bf16, the target devices lacking bf16 (the stage cache keys
    the artifact on them: its notes name them, so a build for other targets is not restored with
    another build's notes); None for other variants."""
    if not openvino_checks_bf16(variant):
        return None
    return {"lacking_bf16": lacking_bf16(this_machine() if cpus is None else cpus)}


def aoti_checks_cpus(variant: Variant) -> bool:
    """An aoti variant whose lowering reads the target CPUs: where to compile (compile_on auto), the
    level to compile here for, or whether they have an x86 level's flags."""
    if variant.backend != "aoti":
        return False
    options = SPECS["aoti"].parse_options(variant.options)
    return options.compile_on != "device" or options.isa not in ("auto", "native")


def onnx_chooses_by_cpu(variant: Variant) -> bool:
    """Static int8 ONNX with reduce_range left unset: its lowering picks reduce_range by CPU."""
    if variant.backend != "onnx" or not needs_calibration(variant.precision, variant.quantization):
        return False
    return SPECS["onnx"].parse_options(variant.options).reduce_range is None


def aoti_isa(variant: Variant, cpus: list[TargetCpu] | None) -> dict[str, Any] | None:
    """What an aoti variant's artifact is made for on ``cpus`` (None: this machine), as the stage
    cache keys it: where it is compiled and, compiled here, the level, the flags it needs and the
    build CPU's flags; compiled on the device, the level only (the artifact is then the exported
    program, the same whatever this machine's CPU). The error's text when no level fits (lowering
    then fails the variant with it). None for other backends."""
    from edgeship.errors import LoweringError
    from edgeship.lowering.aoti_isa import choose_isa, compile_where

    if variant.backend != "aoti":
        return None
    options, build = SPECS["aoti"].parse_options(variant.options), cpu_facts()
    targets = this_machine() if cpus is None else cpus
    where = compile_where(options.compile_on, targets, build)[0]
    try:
        choice = choose_isa(options.isa, targets, build, where)
    except LoweringError as e:
        return {"compile_on": where, "error": str(e)}
    if where == "device":
        return {"compile_on": where, "level": choice.level, "flags": list(choice.flags)}
    return {"compile_on": where, "level": choice.level, "flags": list(choice.flags), "build_cpu": build.get("model"),
            "build_flags": build.get("flags")}


def this_machine() -> list[TargetCpu]:
    """The target when none is named: the CPU lowering runs on."""
    return [("host", cpu_facts())]


def cpu_details(cpus: list[TargetCpu]) -> list[dict[str, Any]]:
    """The target CPUs as ``lowering.details.quantization.cpus`` lists them."""
    return [{"device": name, **{k: (facts or {}).get(k) for k in ("model", "arch", "flags", "source", "error")
                                if (facts or {}).get(k) is not None}} for name, facts in cpus]


def _risk(name: str, saturates: bool | None, why: str) -> str:
    if saturates:
        return f"{name}'s CPU has no VNNI ({why}: u8 x s8 pairs can saturate int16)"
    return f"CPU of device {name} unknown ({why}), so 7 bits to be safe"


def _explicit_note(setting: str, seven_bit: bool, cpus: list[TargetCpu], partly: bool = False) -> str:
    """The note on a setting the profile made: what it gives, and the target CPUs it exposes."""
    bits = "7-bit weights in the first layer only" if partly else f"{7 if seven_bit else 8}-bit weights"
    note = f"{setting} set in the profile ({bits})"
    exposed = [name for name, facts in cpus if cpu_verdict(facts)[0]]
    if (partly or not seven_bit) and exposed:
        note += f"; no VNNI on {', '.join(exposed)}: u8 x s8 pairs can saturate int16 there"
    return note
