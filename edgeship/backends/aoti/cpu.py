"""Where an AOTInductor package is compiled, and for which instruction set, from the CPUs it will run on.

Inductor compiles a package's C++ with ``-march=native`` by default, and its vectorized loops for
the widest vector ISA of the build CPU (AVX-512 with VNNI, AMX, BF16 where it has them): such a
package dies with an illegal instruction on a CPU without them (pytorch/pytorch#121516). So the
level is chosen from the target devices' CPU facts (``devices/cpu.py``, probed like the ONNX
reduce_range choice), the flags it needs are written into the package's metadata, and the runner
refuses a package on a CPU that lacks one, naming it.

Where (``options.compile_on``): ``build`` compiles on this machine; ``device`` ships the exported
program and each device compiles it for itself at its first run (``backends/aoti/build.py``), since
AOTInductor does not cross-compile (an aarch64 board from an x86 build machine). ``auto``: on the
device when some target device is another architecture than this machine, else here.

Levels (``options.isa``): ``native`` (``-march=native``: every extension of the CPU that compiles,
so the package needs all of them), ``avx512`` (``-march=x86-64-v4``, 512-bit loops), ``avx2``
(``-march=x86-64-v3``, 256-bit loops), ``generic`` (``-march=x86-64-v2``, scalar loops; oneDNN's
convolutions and GEMMs still pick their kernels at run time). ``auto``: compiled here, native when
every target CPU has all of the build CPU's extensions (the usual case: the package runs where it
was built), else the best level every target CPU has, and ``generic`` when a target's CPU is not
known; compiled on the device, native there.

Pure Python (no torch): the stage cache keys a package on the choice without importing torch.
"""
from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

from edgeship.errors import LoweringError

# Level -> (-march, Inductor's cpp.simdlen, the CPU flags (Linux's names) the -march level needs,
# as far as devices/cpu.py reads them).
LEVELS: dict[str, tuple[str, int, tuple[str, ...]]] = {
    "generic": ("x86-64-v2", 0, ("sse4_2", "popcnt")),
    "avx2": ("x86-64-v3", 256, ("sse4_2", "popcnt", "avx", "avx2", "fma", "f16c", "bmi2", "movbe")),
    "avx512": ("x86-64-v4", 512, ("sse4_2", "popcnt", "avx", "avx2", "fma", "f16c", "bmi2", "movbe",
                                  "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")),
}
ORDER = ("avx512", "avx2", "generic")
X86 = ("x86_64", "amd64")


@dataclass(frozen=True)
class IsaChoice:
    """The level a package is compiled for, its -march and simdlen (None: Inductor's defaults), the
    CPU flags the -march level needs, and why it was chosen."""

    level: str
    march: str | None
    simdlen: int | None
    flags: tuple[str, ...]
    why: str


def compile_where(option: str, cpus: list[tuple[str, dict[str, Any] | None]], build: dict[str, Any]
                  ) -> tuple[str, str]:
    """Where the package is compiled for ``option`` ("auto", "build" or "device") and the target
    ``cpus``: "build" (this machine, with the CPU facts ``build``) or "device"; and why."""
    if option != "auto":
        return option, f"options.compile_on = {option}"
    foreign = _other_arch(cpus, build)
    if foreign:
        name, other, arch = foreign
        return "device", f"device {name} is {other}, this machine {arch}: AOTInductor does not cross-compile"
    return "build", "no target device is of another architecture than this machine"


def choose_isa(option: str, cpus: list[tuple[str, dict[str, Any] | None]], build: dict[str, Any],
               where: str = "build") -> IsaChoice:
    """The level for ``option`` ("auto" or a level) and the target ``cpus`` ((device, facts) each),
    compiled ``where`` (compile_where): on a machine with the CPU facts ``build``, or on each device.
    A LoweringError when a target cannot run it: another architecture than the build machine's
    (AOTInductor does not cross-compile), an x86 level for another, a CPU without a flag it needs."""
    if where == "device":
        return _device_isa(option, cpus)
    foreign = _other_arch(cpus, build)
    if foreign:
        name, other, arch = foreign
        raise LoweringError(f"device {name} is {other}, this machine {arch}: AOTInductor does not cross-compile; "
                            'set options.compile_on = "device" (or "auto") to compile it on the device')
    arch = (build.get("arch") or platform.machine()).lower()
    if arch not in X86:
        if option not in ("auto", "native"):
            raise LoweringError(f'options.isa = "{option}" is an x86 level; this machine is {arch} (use "native")')
        return IsaChoice("native", None, None, tuple(build.get("flags") or ()), f"{arch}: the build CPU's own")
    build_flags = tuple(build.get("flags") or ())
    known = [(name, facts) for name, facts in cpus if _known(facts)]
    unknown = [name for name, facts in cpus if not _known(facts)]
    if option == "native" or (option == "auto" and not unknown
                              and all(set(build_flags) <= set(f["flags"]) for _, f in known)):
        lacking = [(name, sorted(set(build_flags) - set(f["flags"]))) for name, f in known]
        lacking = [(name, flags) for name, flags in lacking if flags]
        if lacking:
            name, flags = lacking[0]
            raise LoweringError(f'options.isa = "native" compiles for this machine\'s CPU; device {name} lacks '
                                f'{", ".join(flags)}: set options.isa = "auto" (or a level the device has)')
        return IsaChoice("native", None, None, build_flags,
                         "every target CPU has all of the build CPU's extensions" if cpus else "this machine's CPU")
    if option != "auto":
        _check_level(option, known)
        return _level(option, f"options.isa = {option}" + _unknown_note(unknown))
    if unknown:
        return _level("generic", "the CPU of " + ", ".join(unknown) + " is not known")
    for level in ORDER:
        if all(set(LEVELS[level][2]) <= set(f["flags"]) for _, f in known):
            return _level(level, "the best level every target CPU has (" + ", ".join(n for n, _ in known) + ")")
    return _level("generic", "a target CPU lacks AVX2")


def _device_isa(option: str, cpus: list[tuple[str, dict[str, Any] | None]]) -> IsaChoice:
    """The level each device compiles the exported program for: its own CPU's for auto and native;
    an x86 level only when no target is of another architecture and every known one has its flags."""
    if option in ("auto", "native"):
        return IsaChoice("native", None, None, (), "compiled on each device for its own CPU (-march=native there)")
    for name, facts in cpus:
        other = ((facts or {}).get("arch") or "").lower()
        if other and other not in X86:
            raise LoweringError(f'options.isa = "{option}" is an x86 level; device {name} is {other} '
                                f'(use "auto" or "native")')
    known = [(name, facts) for name, facts in cpus if _known(facts)]
    _check_level(option, known)
    unknown = [name for name, facts in cpus if not _known(facts)]
    return _level(option, f"options.isa = {option}, compiled on each device" + _unknown_note(unknown))


def _other_arch(cpus: list[tuple[str, dict[str, Any] | None]], build: dict[str, Any]) -> tuple[str, str, str] | None:
    """(device, its architecture, this machine's) for the first target of another architecture."""
    arch = (build.get("arch") or platform.machine()).lower()
    for name, facts in cpus:
        other = ((facts or {}).get("arch") or "").lower()
        if other and other != arch and not (other in X86 and arch in X86):
            return name, other, arch
    return None


def missing_flags(required: list[str], facts: dict[str, Any] | None) -> list[str] | None:
    """The flags in ``required`` that a CPU lacks; None when its flags are not known."""
    if not _known(facts):
        return None
    return [flag for flag in required if flag not in facts["flags"]]


def _known(facts: dict[str, Any] | None) -> bool:
    return bool(facts) and not facts.get("error") and facts.get("source", "unknown") != "unknown" \
        and bool(facts.get("flags"))


def _level(level: str, why: str) -> IsaChoice:
    march, simdlen, flags = LEVELS[level]
    return IsaChoice(level, march, simdlen, flags, why)


def _check_level(level: str, known: list[tuple[str, dict[str, Any]]]) -> None:
    for name, facts in known:
        lacking = [flag for flag in LEVELS[level][2] if flag not in facts["flags"]]
        if lacking:
            raise LoweringError(f'options.isa = "{level}" needs {", ".join(lacking)}, which device {name} '
                                f'({facts.get("model") or "model unknown"}) lacks: choose "auto" or a lower level')


def _unknown_note(unknown: list[str]) -> str:
    return f" (the CPU of {', '.join(unknown)} is not known: not checked)" if unknown else ""


@functools.lru_cache(maxsize=1)
def cxx_version() -> tuple[str | None, str]:
    """The C++ compiler Inductor calls ($CXX, else g++): its path (None when it is not installed) and
    the first line of its ``--version`` (or the reason there is none)."""
    cxx = os.environ.get("CXX") or "g++"
    path = shutil.which(cxx)
    if path is None:
        return None, f"{cxx}: not installed"
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return path, f"{cxx}: {type(e).__name__}"
    return path, (out.stdout.strip().splitlines() or [cxx])[0]


def target_isa(isa: str, compile_on: str, cpus: list[tuple[str, dict[str, Any] | None]],
               build: dict[str, Any]) -> dict[str, Any]:
    """What a package is made for on ``cpus``, as the stage cache keys it: where it is compiled and,
    compiled here, the level, the flags it needs, the build CPU's flags and the compiler; compiled on
    the device, the level only (the artifact is then the exported program, the same whatever this
    machine's CPU). The error's text when no level fits (lowering then fails the variant with it)."""
    where = compile_where(compile_on, cpus, build)[0]
    try:
        choice = choose_isa(isa, cpus, build, where)
    except LoweringError as e:
        return {"compile_on": where, "error": str(e)}
    if where == "device":
        return {"compile_on": where, "level": choice.level, "flags": list(choice.flags)}
    return {"compile_on": where, "level": choice.level, "flags": list(choice.flags), "build_cpu": build.get("model"),
            "build_flags": build.get("flags"), "compiler": cxx_version()[1]}
