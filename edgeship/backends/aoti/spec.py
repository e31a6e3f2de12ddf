"""The aoti backend's declaration (AOTInductor packages for LibTorch): name, suffix, runtime, capture
methods, precisions, its int8 quantizer, its Options model and its answers to the shared hooks."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from edgeship.backends.spec import BackendSpec, TargetCpu, Variant
from edgeship.config import StrictModel
from edgeship.quantize.settings import QuantizationSupport

# int8 for AOTInductor: PT2E with torchao's X86InductorQuantizer (backends/aoti/quantize.py), compiled
# frozen into oneDNN qconv / qlinear kernels. Static, per-channel weights only.
AOTI_QUANTIZATION = QuantizationSupport(
    schemes=("static",), methods=("histogram", "minmax"), default_method="histogram",
    engines="PT2E with torchao's X86InductorQuantizer, compiled frozen to oneDNN int8 kernels")
# How far a package's code may go past the baseline x86-64 instruction set: -march and Inductor's
# vector ISA (what each level needs of the CPU it runs on is in backends/aoti/cpu.py).
AOTI_ISAS = ("auto", "native", "avx512", "avx2", "generic")


class AotiSpec(BackendSpec):
    """AOTInductor: a ``.pt2`` package of compiled kernels and weights for LibTorch C++ (and Python)."""

    name = "aoti"
    suffix = ".pt2"
    runtime = "aoti"
    device_modules = ("device", "build")  # build.py (aoti_build.py there) compiles exported programs
    capture_methods = ("export",)
    bundle_platforms = ("linux",)
    bundle_templates = {"README.md:linux-loads": "app/README.linux-loads.md.j2",
                        "README.md:linux-cpu": "app/README.linux-cpu.md.j2"}
    precisions = ("fp32", "int8")
    quantization = AOTI_QUANTIZATION
    dynamic_shapes = None  # torch.export's ranges are compiled in; lowering runs min, opt and max

    class Options(StrictModel):
        """Options of the aoti backend."""

        isa: Literal[AOTI_ISAS] = Field(  # type: ignore[valid-type]
            "auto", description="Instruction set the package is compiled for: native (-march=native, every "
                                "extension of the build CPU), avx512 (x86-64-v4), avx2 (x86-64-v3), generic "
                                "(x86-64-v2, scalar loops); auto: native when every target CPU has all of the "
                                "build CPU's extensions, else the best level all of them have; compiled on the "
                                "device (compile_on), auto is native there.")
        freezing: bool = Field(True, description="Fold weights into the graph as constants (batch norm into "
                                                 "convolutions, prepacked oneDNN weights).")
        threads: int | None = Field(
            None, ge=1, le=1024, description="Threads Inductor's own loops are compiled for; unset: the thread count "
                                    "the runtime sets (omp_get_max_threads, the job's threads).")
        max_autotune: bool = Field(False, description="Let Inductor benchmark kernel choices while compiling "
                                                      "(slower builds).")
        compile_on: Literal["auto", "build", "device"] = Field(
            "auto", description="Where the package is compiled: build (this machine), device (the artifact is the "
                                "exported program, compiled by each device for its own CPU at its first run and "
                                "kept beside it; needs torch and g++ there; that first run's compile counts against "
                                "[latency] timeout_s, so raise it for a slow board); auto: device when a target "
                                "device is another architecture than this machine (AOTInductor does not "
                                "cross-compile), else build.")

    @classmethod
    def bundle_ships_runner(cls, platform: str, artifact: dict[str, Any]) -> bool:
        """An exported program for the device to compile (compile_on "device"): the linux bundle ships
        runner/aoti_build.py, which turns it into the package the C++ app loads."""
        details = (artifact.get("runtime") or {}).get("details") or {}
        return platform == "linux" and details.get("compile_on") == "device"

    @classmethod
    def reads_cpus(cls, variant: Variant) -> bool:
        """Lowering reads the target CPUs (where to compile with compile_on auto, the level to compile
        here for, or whether they have an x86 level's flags) unless each device compiles the package
        for its own CPU (compile_on device, isa auto or native: the artifact is the exported program)."""
        options = cls.parse_options(variant.options)
        return options.compile_on != "device" or options.isa not in ("auto", "native")

    @classmethod
    def cpu_dependence(cls, variant: Variant, cpus: list[TargetCpu]) -> dict[str, Any] | None:
        """Native code: for which instruction set and, compiled here, by which compiler (cpu.target_isa);
        for int8, whether the weights are 7-bit (quantize/cpu_choice.saturation)."""
        from edgeship.backends.aoti.cpu import target_isa
        from edgeship.devices.cpu import cpu_facts

        if not cls.reads_cpus(variant):
            return None
        options = cls.parse_options(variant.options)
        found: dict[str, Any] = {"aoti_isa": target_isa(options.isa, options.compile_on, cpus, cpu_facts())}
        if variant.precision == "int8":  # 7-bit weights where a target's u8 x s8 kernels may saturate
            from edgeship.quantize.cpu_choice import saturation

            found["int8_reduce_range"] = saturation(cpus)[0]
        return found

    @classmethod
    def variant_problems(cls, precision: str, options: dict[str, Any]) -> list[str]:
        """int8 needs freezing (without it Inductor leaves the dequantized weights in float and calls no
        int8 kernel) and a package compiled here (its quantizer targets x86 oneDNN)."""
        if precision != "int8":
            return []
        problems = []
        if options.get("freezing") is False:
            problems.append("precision \"int8\" needs options.freezing = true for aoti: unfrozen, Inductor computes "
                            "the quantized program in float and the package holds no int8 kernel")
        if options.get("compile_on") == "device":
            problems.append("precision \"int8\" is compiled on the build machine for aoti (its quantizer targets x86 "
                            "oneDNN kernels): compile_on = \"device\" is not supported for it")
        return problems
