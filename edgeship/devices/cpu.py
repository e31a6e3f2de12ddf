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
- With ``EDGESHIP_CPU_FACTS=hwcap`` (aarch64 Linux): the features the kernel (or qemu-user) puts in
  the process's auxiliary vector (getauxval AT_HWCAP, AT_HWCAP2), which is what the runtimes'
  own dispatch reads; no model (an emulator names its CPU model itself).
- With ``EDGESHIP_CPU_FACTS=cpuid`` in the environment (x86-64 Linux): the CPUID instruction itself,
  run through ctypes, with the OS's XCR0 for the AVX/AVX-512/AMX register state. An emulator sets
  it: under qemu-user, /proc/cpuinfo is the host's file while CPUID answers as the emulated CPU,
  as it does to every runtime's own kernel dispatch.
"""
import json
import os
import platform
import struct
import subprocess
import sys

CPUINFO = "/proc/cpuinfo"
# x86 flags (Linux's names) that decide int8 and bf16 kernels, and the instruction-set extensions a
# compiler targeting the CPU may emit (code compiled with -march=native needs each of the build CPU's
# on the CPU that runs it); the rest of the list is left out.
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
    ("0x00", "0x051"): "QEMU max (emulated)",  # implementer 0x00: software; qemu's -cpu max
}
# (leaf, subleaf, register 0-3 = eax ebx ecx edx, bit) -> Linux's flag name, for X86_FLAGS (and
# osxsave, which says XGETBV may be run); from Intel's SDM vol. 2A, CPUID, and Linux's cpufeatures.h.
CPUID_BITS = {
    (1, 0, 2, 1): "pclmulqdq", (1, 0, 2, 12): "fma", (1, 0, 2, 20): "sse4_2",
    (1, 0, 2, 22): "movbe", (1, 0, 2, 23): "popcnt", (1, 0, 2, 25): "aes", (1, 0, 2, 27): "osxsave",
    (1, 0, 2, 28): "avx", (1, 0, 2, 29): "f16c",
    (7, 0, 1, 3): "bmi1", (7, 0, 1, 5): "avx2", (7, 0, 1, 8): "bmi2", (7, 0, 1, 16): "avx512f",
    (7, 0, 1, 17): "avx512dq", (7, 0, 1, 19): "adx", (7, 0, 1, 21): "avx512ifma", (7, 0, 1, 28): "avx512cd",
    (7, 0, 1, 29): "sha_ni", (7, 0, 1, 30): "avx512bw", (7, 0, 1, 31): "avx512vl",
    (7, 0, 2, 1): "avx512vbmi", (7, 0, 2, 6): "avx512_vbmi2", (7, 0, 2, 8): "gfni", (7, 0, 2, 9): "vaes",
    (7, 0, 2, 10): "vpclmulqdq", (7, 0, 2, 11): "avx512_vnni", (7, 0, 2, 12): "avx512_bitalg",
    (7, 0, 2, 14): "avx512_vpopcntdq",
    (7, 0, 3, 22): "amx_bf16", (7, 0, 3, 23): "avx512_fp16", (7, 0, 3, 24): "amx_tile", (7, 0, 3, 25): "amx_int8",
    (7, 1, 0, 4): "avx_vnni", (7, 1, 0, 5): "avx512_bf16", (7, 1, 0, 21): "amx_fp16",
}
# XCR0 bits the OS must have set for a group's registers: SSE|AVX (1, 2), + opmask/ZMM (5-7), + tiles (17, 18).
XCR0_NEEDS = {"avx": 0x6, "avx512": 0xE6, "amx": 0x60006}
SOURCE_ENV = "EDGESHIP_CPU_FACTS"  # "cpuid" / "hwcap": read the CPU itself (set by emulators)
# AT_HWCAP / AT_HWCAP2 bits, in order -> Linux's /proc/cpuinfo names (arch/arm64/include/uapi/asm/hwcap.h).
HWCAP = ("fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop "
         "sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs sb paca pacg").split()
HWCAP2 = ("dcpodp sve2 sveaes svepmull svebitperm svesha3 svesm4 flagm2 frint svei8mm svef32mm svef64mm svebf16 "
          "i8mm bf16 dgh rng bti mte ecv afp rpres mte3 sme sme_i16i64 sme_f64f64 sme_i8i32 sme_f16f32 sme_b16f32 "
          "sme_f32f32 sme_fa64").split()
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
    if os.environ.get(SOURCE_ENV) == "cpuid":
        return cpuid_facts(machine)
    if os.environ.get(SOURCE_ENV) == "hwcap":
        return hwcap_facts(machine)
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


def cpuid_facts(machine):
    """The facts as the CPUID instruction reports them (x86-64 only; elsewhere, or when it cannot
    be run, unknown facts with the reason in ``error``)."""
    if machine not in ("x86_64", "AMD64", "amd64"):
        return {"model": None, "arch": machine, "flags": [], "source": "unknown",
                "error": "CPUID asked for on a %s CPU: it is an x86-64 instruction" % machine}
    try:
        regs = _CpuidReader()
        return parse_cpuid(regs.cpuid, regs.xcr0(), machine)
    except Exception as e:  # no executable memory (a hardened kernel), no ctypes
        return {"model": None, "arch": machine, "flags": [], "source": "unknown",
                "error": "CPUID could not be run: %s: %s" % (type(e).__name__, e)}


def hwcap_facts(machine):
    """The facts from the auxiliary vector (aarch64 Linux only; elsewhere unknown, with the reason)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.getauxval.restype = ctypes.c_ulong
        libc.getauxval.argtypes = [ctypes.c_ulong]
        if machine not in ("aarch64", "arm64"):
            raise OSError("the auxiliary vector's HWCAP bits are read on aarch64, not %s" % machine)
        names = hwcap_names(libc.getauxval(16), libc.getauxval(26))  # AT_HWCAP, AT_HWCAP2
    except Exception as e:
        return {"model": None, "arch": machine, "flags": [], "source": "unknown",
                "error": "HWCAP could not be read: %s: %s" % (type(e).__name__, e)}
    return {"model": None, "arch": machine, "flags": sorted(set(ARM_FEATURES[n] for n in names if n in ARM_FEATURES)),
            "source": "hwcap"}


def hwcap_names(hwcap, hwcap2):
    """/proc/cpuinfo's feature names for AT_HWCAP and AT_HWCAP2 bits."""
    return ([n for i, n in enumerate(HWCAP) if hwcap >> i & 1]
            + [n for i, n in enumerate(HWCAP2) if hwcap2 >> i & 1])


def parse_cpuid(cpuid, xcr0, machine="x86_64"):
    """The facts from ``cpuid(leaf, subleaf) -> (eax, ebx, ecx, edx)`` and the XCR0 register (the
    state the OS saves: a feature whose registers it does not save is not usable, as Linux's flags
    leave it out). Flag names are Linux's (X86_FLAGS)."""
    top = cpuid(0, 0)[0]
    regs = {(1, 0): cpuid(1, 0)}
    if top >= 7:
        regs[(7, 0)] = cpuid(7, 0)
        if regs[(7, 0)][0] >= 1:
            regs[(7, 1)] = cpuid(7, 1)
    flags = set()
    for (leaf, sub, reg, bit), name in CPUID_BITS.items():
        value = regs.get((leaf, sub))
        if value is not None and value[reg] >> bit & 1:
            flags.add(name)
    state = xcr0 if "osxsave" in flags else 0
    for name in list(flags):
        needed = XCR0_NEEDS.get(_state_group(name), 0)
        if state & needed != needed:
            flags.discard(name)
    flags.discard("osxsave")
    model = None
    if cpuid(0x80000000, 0)[0] >= 0x80000004:
        raw = b"".join(struct.pack("<4I", *cpuid(leaf, 0)) for leaf in (0x80000002, 0x80000003, 0x80000004))
        model = " ".join(raw.split(b"\0")[0].decode("ascii", "replace").split()) or None
    return {"model": model, "arch": machine, "flags": sorted(flags), "source": "cpuid"}


def _state_group(flag):
    """Which register state a flag's instructions need the OS to save: avx, avx512, amx or none."""
    if flag.startswith("amx"):
        return "amx"
    if flag.startswith("avx512"):
        return "avx512"
    if flag in ("avx", "avx2", "fma", "f16c", "avx_vnni", "vaes", "vpclmulqdq"):
        return "avx"
    return None


class _CpuidReader:
    """CPUID and XGETBV run from a few bytes of machine code in executable memory (System V x86-64
    calling convention), as py-cpuinfo does; written here because the device side imports only the
    standard library."""

    # push rbx; mov eax, edi; mov ecx, esi; mov r8, rdx; cpuid; mov [r8], eax; mov [r8+4], ebx;
    # mov [r8+8], ecx; mov [r8+12], edx; pop rbx; ret
    CPUID = bytes(bytearray([0x53, 0x89, 0xF8, 0x89, 0xF1, 0x49, 0x89, 0xD0, 0x0F, 0xA2, 0x41, 0x89, 0x00,
                             0x41, 0x89, 0x58, 0x04, 0x41, 0x89, 0x48, 0x08, 0x41, 0x89, 0x50, 0x0C, 0x5B, 0xC3]))
    # mov ecx, edi; xgetbv; shl rdx, 32; or rax, rdx; ret
    XGETBV = bytes(bytearray([0x89, 0xF9, 0x0F, 0x01, 0xD0, 0x48, 0xC1, 0xE2, 0x20, 0x48, 0x09, 0xD0, 0xC3]))

    def __init__(self):
        import ctypes
        import mmap

        self._ctypes = ctypes
        self._memory = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        self._memory.write(self.CPUID + self.XGETBV)
        address = ctypes.addressof(ctypes.c_char.from_buffer(self._memory))
        self._cpuid = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_uint32,
                                       ctypes.POINTER(ctypes.c_uint32 * 4))(address)
        self._xgetbv = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_uint32)(address + len(self.CPUID))

    def cpuid(self, leaf, subleaf):
        out = (self._ctypes.c_uint32 * 4)()
        self._cpuid(leaf, subleaf, self._ctypes.byref(out))
        return tuple(out)

    def xcr0(self):
        if not self.cpuid(1, 0)[2] >> 27 & 1:  # OSXSAVE: XGETBV would fault without it
            return 0
        return self._xgetbv(0)


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
