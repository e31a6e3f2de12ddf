"""edgeship device CPU facts: the CPU's model, architecture and the instruction-set flags that decide
which int8 kernels a runtime uses on it.

    python cpu.py            # prints the facts as JSON

Standard library only, written for old device Pythons (no f-strings, no annotations): it is copied
to devices beside runner.py and probe.py, which import it as a sibling file, and it imports nothing
of edgeship. ``cpu_facts()`` never raises: what it cannot find out is None or left out, with
``source = "unknown"`` when nothing could be read.

Where the facts come from:

- Linux (x86 and ARM, Android included): ``/proc/cpuinfo``, as the kernel reports the CPU (inside a
  virtual machine, what the hypervisor exposes, which is also what the runtimes' CPUID checks see).
  x86: ``model name`` and ``flags``; ARM: ``Features``, the board (``Model``, ``Hardware``) and each
  distinct core type from ``CPU implementer`` / ``CPU part``.
- macOS: ``sysctl -n machdep.cpu.brand_string`` and, on arm64, ``hw.optional.arm.FEAT_DotProd`` /
  ``FEAT_I8MM`` / ``FEAT_BF16`` / ``FEAT_FP16``; on x86_64, the ``machdep.cpu.features`` and
  ``machdep.cpu.leaf7_features`` lists. Best effort: written from Apple's documented sysctl names,
  not checked on a Mac here.
- Anything else (Windows, BSD): the model from ``platform.processor()`` where it says one, no flags.
"""
import json
import os
import platform
import subprocess
import sys

CPUINFO = "/proc/cpuinfo"
# x86 flags (Linux's names) that decide int8 and bf16 kernels, and the instruction-set extensions a
# compiler targeting the CPU may emit (an AOTInductor package built with -march=native needs each of
# the build CPU's: lowering/aoti_isa.py); the rest of the list is left out.
X86_FLAGS = ("sse4_2", "popcnt", "avx", "avx2", "fma", "f16c", "bmi1", "bmi2", "movbe", "adx", "aes",
             "pclmulqdq", "sha_ni", "gfni", "vaes", "vpclmulqdq", "avx512f", "avx512bw", "avx512cd",
             "avx512dq", "avx512vl", "avx512ifma", "avx512vbmi", "avx512_vbmi2", "avx512_bitalg",
             "avx512_vpopcntdq", "avx512_vnni", "avx_vnni", "avx512_bf16", "avx512_fp16", "amx_tile",
             "amx_int8", "amx_bf16", "amx_fp16")
# ARM ``Features`` names -> the names reported (64-bit kernels say asimd, 32-bit ones neon).
ARM_FEATURES = {"asimd": "neon", "neon": "neon", "asimddp": "dotprod", "i8mm": "i8mm", "sve": "sve",
                "sve2": "sve2", "bf16": "bf16", "fphp": "fp16", "asimdhp": "fp16"}
# (CPU implementer, CPU part) -> core name, after Linux's arch/arm64/include/asm/cputype.h.
ARM_PARTS = {
    ("0x41", "0xc07"): "Cortex-A7", ("0x41", "0xc09"): "Cortex-A9", ("0x41", "0xc0f"): "Cortex-A15",
    ("0x41", "0xd03"): "Cortex-A53", ("0x41", "0xd04"): "Cortex-A35", ("0x41", "0xd05"): "Cortex-A55",
    ("0x41", "0xd07"): "Cortex-A57", ("0x41", "0xd08"): "Cortex-A72", ("0x41", "0xd09"): "Cortex-A73",
    ("0x41", "0xd0a"): "Cortex-A75", ("0x41", "0xd0b"): "Cortex-A76", ("0x41", "0xd0c"): "Neoverse-N1",
    ("0x41", "0xd0d"): "Cortex-A77", ("0x41", "0xd40"): "Neoverse-V1", ("0x41", "0xd41"): "Cortex-A78",
    ("0x41", "0xd42"): "Cortex-A78AE", ("0x41", "0xd44"): "Cortex-X1", ("0x41", "0xd46"): "Cortex-A510",
    ("0x41", "0xd47"): "Cortex-A710", ("0x41", "0xd48"): "Cortex-X2", ("0x41", "0xd49"): "Neoverse-N2",
    ("0x41", "0xd4b"): "Cortex-A78C", ("0x41", "0xd4f"): "Neoverse-V2", ("0x4e", "0x004"): "NVIDIA Carmel",
}
X86_MACHINES = ("x86_64", "amd64", "i386", "i486", "i586", "i686", "x86")
# macOS x86_64: machdep.cpu.features / leaf7_features names -> Linux's.
MAC_X86_FEATURES = {"SSE4.2": "sse4_2", "AVX1.0": "avx", "AVX2": "avx2", "FMA": "fma", "F16C": "f16c",
                    "AVX512F": "avx512f", "AVX512BW": "avx512bw", "AVX512VL": "avx512vl",
                    "AVX512VNNI": "avx512_vnni"}
# macOS arm64: hw.optional.arm.* sysctl -> flag (NEON is part of every arm64 CPU).
MAC_ARM_FEATURES = {"hw.optional.arm.FEAT_DotProd": "dotprod", "hw.optional.arm.FEAT_I8MM": "i8mm",
                    "hw.optional.arm.FEAT_BF16": "bf16", "hw.optional.arm.FEAT_FP16": "fp16"}


def cpu_facts():
    """This machine's CPU: {"model", "arch", "flags" (sorted), "source"}; never raises."""
    machine = platform.machine() or None
    try:
        if sys.platform.startswith("linux") and os.path.exists(CPUINFO):
            with open(CPUINFO) as f:
                facts = parse_cpuinfo(f.read())
            facts["arch"] = machine or facts["arch"]
            return facts
        if sys.platform == "darwin":
            keys = ["machdep.cpu.brand_string", "machdep.cpu.features", "machdep.cpu.leaf7_features"]
            return parse_sysctl(dict((k, _sysctl(k)) for k in keys + sorted(MAC_ARM_FEATURES)), machine)
    except Exception:  # an unreadable file, a sysctl that hangs: the facts are then unknown, not a failure
        pass
    return {"model": platform.processor() or None, "arch": machine, "flags": [], "source": "unknown"}


def parse_cpuinfo(text):
    """The facts in a Linux ``/proc/cpuinfo`` text. Flags are those every processor lists; the
    architecture is inferred from the text (``cpu_facts`` replaces it with ``platform.machine()``)."""
    blocks = [_fields(block) for block in text.split("\n\n") if block.strip()]
    blocks = [b for b in blocks if "flags" in b or "Features" in b] or blocks or [{}]
    first = blocks[0]
    if "flags" in first:
        flags = _common(b.get("flags", "") for b in blocks)
        return {"model": first.get("model name"), "arch": "x86_64" if "lm" in flags else "i686",
                "flags": sorted(f for f in flags if f in X86_FLAGS), "source": CPUINFO}
    if "Features" in first:
        features = _common(b.get("Features", "") for b in blocks)
        arch = {"8": "aarch64", "7": "armv7l"}.get(first.get("CPU architecture", "").split(" ")[0], "arm")
        return {"model": _arm_model(blocks, _fields(text)), "arch": arch,
                "flags": sorted(set(ARM_FEATURES[f] for f in features if f in ARM_FEATURES)), "source": CPUINFO}
    return {"model": first.get("model name"), "arch": None, "flags": [], "source": CPUINFO}


def parse_sysctl(values, machine):
    """The facts from macOS sysctl values (name -> text, None when the name is unknown there)."""
    model = values.get("machdep.cpu.brand_string") or None
    if machine == "arm64":
        flags = ["neon"] + [flag for key, flag in MAC_ARM_FEATURES.items() if (values.get(key) or "").strip() == "1"]
    else:
        listed = " ".join(values.get(k) or "" for k in ("machdep.cpu.features", "machdep.cpu.leaf7_features"))
        flags = [MAC_X86_FEATURES[name] for name in listed.split() if name in MAC_X86_FEATURES]
    return {"model": model, "arch": machine, "flags": sorted(set(flags)), "source": "sysctl"}


def isa_family(arch):
    """"x86", "arm" or None (another architecture, or not known) for an architecture name."""
    arch = (arch or "").lower()
    if arch in X86_MACHINES:
        return "x86"
    if arch.startswith("arm") or arch.startswith("aarch64"):
        return "arm"
    return None


def int8_kernel_facts(facts):
    """What decides a CPU's int8 kernels, from ``cpu_facts()``: the ISA family, whether its flags are
    known, and VNNI (x86: avx512_vnni or avx_vnni fuse u8 x s8 products into int32), AMX, dot product
    and i8mm (ARM)."""
    facts = facts or {}
    flags = set(facts.get("flags") or [])
    return {"isa": isa_family(facts.get("arch")), "flags_known": facts.get("source", "unknown") != "unknown",
            "vnni": bool(flags & {"avx512_vnni", "avx_vnni"}), "amx": "amx_int8" in flags,
            "dotprod": "dotprod" in flags, "i8mm": "i8mm" in flags}


def _fields(block):
    """``key : value`` lines of one block; the first of each key wins."""
    out = {}
    for line in block.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and key.strip() not in out:
            out[key.strip()] = value.strip()
    return out


def _common(lines):
    """The words every line has."""
    sets = [set(line.split()) for line in lines]
    return set.intersection(*sets) if sets else set()


def _arm_model(blocks, whole):
    """The board (``Model``, else ``Hardware``, else ``model name``) and each distinct core type."""
    cores = []
    for b in blocks:
        part = (b.get("CPU implementer", "").lower(), b.get("CPU part", "").lower())
        name = ARM_PARTS.get(part) or ("implementer %s part %s" % part if all(part) else None)
        if name and name not in cores:
            cores.append(name)
    board = whole.get("Model") or whole.get("Hardware") or blocks[0].get("model name")
    if board and cores:
        return "%s (%s)" % (board, " + ".join(cores))
    return board or (" + ".join(cores) if cores else None)


def _sysctl(name):
    """``sysctl -n name``, or None when it fails (an unknown name on this macOS)."""
    try:  # Python 3.6 has neither capture_output nor text
        proc = subprocess.run(["sysctl", "-n", name], stdout=subprocess.PIPE, stderr=subprocess.PIPE,  # noqa: UP022
                              universal_newlines=True, timeout=5)  # noqa: UP021
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


if __name__ == "__main__":
    print(json.dumps(cpu_facts()))
