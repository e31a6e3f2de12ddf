"""What the CPUs an artifact will run on say about int8 kernels, for the backends that choose a
setting by them (``backends/<name>/cpu.py``; each answers ``BackendSpec.cpu_dependence``).

On x86-64 without VNNI, the u8 x s8 int8 kernels of the x86 runtimes (MLAS, oneDNN) multiply
with VPMADDUBSW, which adds each pair of products into a saturating
int16, so full 8-bit weights can clip; VNNI (avx512_vnni, avx_vnni) and AMX accumulate in int32,
as ARM's int8 dot products do. ``saturation`` is that verdict for a list of target CPUs, naming
each device; the backends turn it into their own setting (7-bit weights, an overflow fix) and say why in the
artifact's notes.

An explicit setting (``reduce_range``, ``overflow_fix``) in the profile always wins; every choice comes with
a note saying what was chosen and why, which goes into the artifact's notes and
``lowering.details.quantization``.
"""
from __future__ import annotations

from typing import Any

from edgeship.backends.spec import TargetCpu
from edgeship.devices.cpu import cpu_facts, int8_kernel_facts

VNNI_FLAGS = ("avx512_vnni", "avx_vnni")


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


def this_machine() -> list[TargetCpu]:
    """The target when none is named: the CPU lowering runs on."""
    return [("host", cpu_facts())]


def cpu_details(cpus: list[TargetCpu]) -> list[dict[str, object]]:
    """The target CPUs as ``lowering.details.quantization.cpus`` lists them."""
    return [{"device": name, **{k: (facts or {}).get(k) for k in ("model", "arch", "flags", "source", "error")
                                if (facts or {}).get(k) is not None}} for name, facts in cpus]


def _risk(name: str, saturates: bool | None, why: str) -> str:
    if saturates:
        return f"{name}'s CPU has no VNNI ({why}: u8 x s8 pairs can saturate int16)"
    return f"CPU of device {name} unknown ({why}), so 7 bits to be safe"


def explicit_note(setting: str, seven_bit: bool, cpus: list[TargetCpu], partly: bool = False) -> str:
    """The note on a setting the profile made: what it gives, and the target CPUs it exposes."""
    bits = "7-bit weights in the first layer only" if partly else f"{7 if seven_bit else 8}-bit weights"
    note = f"{setting} set in the profile ({bits})"
    exposed = [name for name, facts in cpus if cpu_verdict(facts)[0]]
    if (partly or not seven_bit) and exposed:
        note += f"; no VNNI on {', '.join(exposed)}: u8 x s8 pairs can saturate int16 there"
    return note
