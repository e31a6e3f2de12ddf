"""NNCF's ``overflow_fix`` for OpenVINO int8, chosen from the target CPUs when the profile leaves it
unset, and which target CPUs lack the bf16 instructions the CPU plugin computes bf16 with.

OpenVINO's CPU plugin has the same hazard (NNCF's documentation of ``OverflowFix``: "the overflow
issue fix for the 8-bit quantization" on CPUs without VNNI): without VNNI its oneDNN int8 kernels
multiply u8 activations by s8 weights with VPMADDUBSW too. NNCF's default, ``first_layer_only``,
keeps 7-bit weights in the first layer only. Measured on an AVX2 CPU without VNNI (the demo model,
OpenVINO 2026.4, NNCF 3.4): first_layer_only 16.97 dB, disable 17.15 dB, enable 26.37 dB (ONNX
Runtime's U8S8 int8 on the same CPU: 28.8 dB); a small residual + attention CNN 15.02 / 15.09 /
39.92 dB. So ``enable`` wherever a target CPU has neither VNNI nor AMX or is not known, NNCF's
default where every one has them (or is ARM, whose int8 dot products accumulate in int32).
"""
from __future__ import annotations

from edgeship.quantize.cpu_choice import TargetCpu, explicit_note, saturation

# The CPU flags (Linux's names) the plugin computes bf16 with: without one it has no bf16 kernels.
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def choose_overflow_fix(explicit: str | None, cpus: list[TargetCpu]) -> tuple[str, str]:
    """NNCF's ``overflow_fix`` for an OpenVINO int8 IR run on ``cpus``, and the note saying why: the
    profile's value when set; else "enable" (7-bit weights in every layer) when any target CPU is
    x86 without VNNI or AMX, or not known; "first_layer_only" (NNCF's default) when every one has
    them or is ARM."""
    if explicit is not None:
        return explicit, explicit_note(f"overflow_fix = {explicit}", explicit != "disable", cpus,
                                        partly=explicit == "first_layer_only")
    risky, why = saturation(cpus)
    if risky:
        return "enable", "overflow_fix enable (NNCF: 7-bit weights in every layer): " + why
    return "first_layer_only", ("overflow_fix first_layer_only (NNCF's default: 8-bit weights after the first "
                                f"layer): {why}")


def lacking_bf16(cpus: list[TargetCpu]) -> list[str]:
    """The names of the devices among ``cpus`` whose flags are known and hold no bf16 instructions
    (BF16_FLAGS: AVX512-BF16, AMX-BF16); a CPU whose flags are unknown is not listed."""
    return [name for name, facts in cpus
            if (facts or {}).get("flags") and not (facts or {}).get("error")
            and not any(f in facts["flags"] for f in BF16_FLAGS)]
