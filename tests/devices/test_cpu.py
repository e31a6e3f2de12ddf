"""CPU facts: /proc/cpuinfo and macOS sysctl parsing, this machine's facts, and the per-device cache.

The /proc/cpuinfo texts below are recorded-style examples written for these tests (shortened to
two processors, the lines edgeship reads kept as the kernel prints them).
"""
from __future__ import annotations

import json
import platform
import sys

import pytest

from edgeship.cache import Cache
from edgeship.devices.base import Device, DeviceReport, Job, JobResult
from edgeship.devices.cpu import cpu_facts, int8_kernel_facts, isa_family, parse_cpuinfo, parse_sysctl
from edgeship.devices.targets import NAMESPACE, device_cpu, runs, target_cpus

# Recorded example: a cloud VM on AMD EPYC 7B13 (Zen 3): AVX2, no AVX-512, no VNNI of either kind.
EPYC_NO_VNNI = """\
processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC 7B13
stepping\t: 0
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht \
syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl nonstop_tsc cpuid extd_apicid tsc_known_freq \
pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand hypervisor lahf_lm \
cmp_legacy cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw topoext ssbd ibrs ibpb stibp vmmcall fsgsbase \
tsc_adjust bmi1 avx2 smep bmi2 erms invpcid rdseed adx smap clflushopt clwb sha_ni xsaveopt xsavec xgetbv1 xsaves \
clzero xsaveerptr arat npt nrip_save umip vaes vpclmulqdq rdpid fsrm
bogomips\t: 4899.99

processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht \
syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl nonstop_tsc cpuid extd_apicid tsc_known_freq \
pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand hypervisor lahf_lm \
cmp_legacy cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw topoext ssbd ibrs ibpb stibp vmmcall fsgsbase \
tsc_adjust bmi1 avx2 smep bmi2 erms invpcid rdseed adx smap clflushopt clwb sha_ni xsaveopt xsavec xgetbv1 xsaves \
clzero xsaveerptr arat npt nrip_save umip vaes vpclmulqdq rdpid fsrm
bogomips\t: 4899.99
"""

# Recorded example: Intel Xeon Platinum 8480+ (Sapphire Rapids): AVX-512 with VNNI and BF16, AVX-VNNI, AMX.
XEON_VNNI_AMX = """\
processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi mmx fxsr sse \
sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc art arch_perfmon pebs bts rep_good nopl xtopology \
nonstop_tsc cpuid aperfmperf tsc_known_freq pni pclmulqdq dtes64 monitor ds_cpl vmx smx est tm2 ssse3 sdbg fma cx16 \
xtpr pdcm pcid dca sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand lahf_lm abm \
3dnowprefetch cpuid_fault epb cat_l3 cat_l2 cdp_l3 invpcid_single intel_ppin cdp_l2 ssbd mba ibrs ibpb stibp \
ibrs_enhanced tpr_shadow flexpriority ept vpid ept_ad fsgsbase tsc_adjust bmi1 avx2 smep bmi2 erms invpcid cqm \
rdt_a avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb intel_pt avx512cd sha_ni avx512bw avx512vl \
xsaveopt xsavec xgetbv1 xsaves cqm_llc cqm_occup_llc cqm_mbm_total cqm_mbm_local split_lock_detect avx_vnni \
avx512_bf16 wbnoinvd dtherm ida arat pln pts hfi vnmi avx512vbmi umip pku ospke waitpkg avx512_vbmi2 gfni vaes \
vpclmulqdq avx512_vnni avx512_bitalg tme avx512_vpopcntdq la57 rdpid bus_lock_detect cldemote movdiri movdir64b \
enqcmd fsrm md_clear serialize tsxldtrk pconfig arch_lbr ibt amx_bf16 avx512_fp16 amx_tile amx_int8 flush_l1d \
arch_capabilities
"""

# Recorded example: Raspberry Pi 4 Model B under a 64-bit kernel: four Cortex-A72 (part 0xd08), NEON only.
RPI4_AARCH64 = """\
processor\t: 0
BogoMIPS\t: 108.00
Features\t: fp asimd evtstrm crc32 cpuid
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x0
CPU part\t: 0xd08
CPU revision\t: 3

processor\t: 1
BogoMIPS\t: 108.00
Features\t: fp asimd evtstrm crc32 cpuid
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x0
CPU part\t: 0xd08
CPU revision\t: 3

Hardware\t: BCM2835
Revision\t: c03114
Serial\t\t: 10000000a1b2c3d4
Model\t\t: Raspberry Pi 4 Model B Rev 1.4
"""

# Recorded example: an AWS Graviton3 instance (Neoverse-V1, part 0xd40): dot product, i8mm, SVE, BF16.
GRAVITON3 = """\
processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop \
sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs paca pacg dcpodp svei8mm svebf16 i8mm bf16 dgh rng
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x1
CPU part\t: 0xd40
CPU revision\t: 1
"""

# Recorded example: a phone SoC with two core types (Cortex-A76 big, Cortex-A55 little).
BIG_LITTLE = """\
processor\t: 0
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
CPU implementer\t: 0x41
CPU architecture: 8
CPU part\t: 0xd05

processor\t: 6
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
CPU implementer\t: 0x41
CPU architecture: 8
CPU part\t: 0xd0b
"""

# Recorded example: a Raspberry Pi 3 under a 32-bit kernel (armv7l): "neon", not "asimd".
RPI3_ARMV7 = """\
processor\t: 0
model name\t: ARMv7 Processor rev 4 (v7l)
BogoMIPS\t: 38.40
Features\t: half thumb fastmult vfp edsp neon vfpv3 tls vfpv4 idiva idivt vfpd32 lpae evtstrm crc32
CPU implementer\t: 0x41
CPU architecture: 7
CPU part\t: 0xd03

Hardware\t: BCM2835
Model\t\t: Raspberry Pi 3 Model B Plus Rev 1.3
"""


def test_parse_cpuinfo_epyc_keeps_avx2_and_has_no_vnni() -> None:
    facts = parse_cpuinfo(EPYC_NO_VNNI)
    assert facts == {"model": "AMD EPYC 7B13", "arch": "x86_64", "source": "/proc/cpuinfo",
                     "flags": ["adx", "aes", "avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "movbe", "pclmulqdq",
                               "popcnt", "sha_ni", "sse4_2", "vaes", "vpclmulqdq"]}
    assert int8_kernel_facts(facts) == {"isa": "x86", "flags_known": True, "vnni": False, "amx": False,
                                        "dotprod": False, "i8mm": False}


def test_parse_cpuinfo_xeon_lists_vnni_bf16_and_amx() -> None:
    facts = parse_cpuinfo(XEON_VNNI_AMX)
    assert facts["model"] == "Intel(R) Xeon(R) Platinum 8480+" and facts["arch"] == "x86_64"
    assert facts["flags"] == ["adx", "aes", "amx_bf16", "amx_int8", "amx_tile", "avx", "avx2", "avx512_bf16",
                              "avx512_bitalg", "avx512_fp16", "avx512_vbmi2", "avx512_vnni", "avx512_vpopcntdq",
                              "avx512bw", "avx512cd", "avx512dq", "avx512f", "avx512ifma", "avx512vbmi", "avx512vl",
                              "avx_vnni", "bmi1", "bmi2", "f16c", "fma", "gfni", "movbe", "pclmulqdq", "popcnt",
                              "sha_ni", "sse4_2", "vaes", "vpclmulqdq"]
    kernels = int8_kernel_facts(facts)
    assert kernels["vnni"] and kernels["amx"]


def test_parse_cpuinfo_raspberry_pi_4_names_the_board_and_the_core() -> None:
    assert parse_cpuinfo(RPI4_AARCH64) == {"model": "Raspberry Pi 4 Model B Rev 1.4 (Cortex-A72)", "arch": "aarch64",
                                           "flags": ["neon"], "source": "/proc/cpuinfo"}


def test_parse_cpuinfo_graviton3_maps_arm_features() -> None:
    facts = parse_cpuinfo(GRAVITON3)
    assert facts["model"] == "Neoverse-V1" and facts["arch"] == "aarch64"
    assert facts["flags"] == ["bf16", "dotprod", "fp16", "i8mm", "neon", "sve"]
    assert int8_kernel_facts(facts)["isa"] == "arm" and int8_kernel_facts(facts)["i8mm"]


def test_parse_cpuinfo_names_each_core_type_of_a_big_little_soc() -> None:
    facts = parse_cpuinfo(BIG_LITTLE)
    assert facts["model"] == "Cortex-A55 + Cortex-A76" and facts["flags"] == ["dotprod", "fp16", "neon"]


def test_parse_cpuinfo_32_bit_arm_reads_neon_and_armv7() -> None:
    facts = parse_cpuinfo(RPI3_ARMV7)
    assert facts == {"model": "Raspberry Pi 3 Model B Plus Rev 1.3 (Cortex-A53)", "arch": "armv7l",
                     "flags": ["neon"], "source": "/proc/cpuinfo"}


def test_parse_cpuinfo_keeps_only_flags_every_processor_has() -> None:
    text = "processor : 0\nflags : lm avx2 avx512_vnni\n\nprocessor : 1\nflags : lm avx2\n"
    assert parse_cpuinfo(text)["flags"] == ["avx2"]


def test_parse_sysctl_apple_silicon_reads_arm_features() -> None:
    values = {"machdep.cpu.brand_string": "Apple M2 Pro", "hw.optional.arm.FEAT_DotProd": "1",
              "hw.optional.arm.FEAT_I8MM": "1", "hw.optional.arm.FEAT_BF16": "0", "hw.optional.arm.FEAT_FP16": None}
    assert parse_sysctl(values, "arm64") == {"model": "Apple M2 Pro", "arch": "arm64", "source": "sysctl",
                                             "flags": ["dotprod", "i8mm", "neon"]}


def test_parse_sysctl_intel_mac_reads_the_feature_lists() -> None:
    values = {"machdep.cpu.brand_string": "Intel(R) Core(TM) i9-9880H CPU @ 2.30GHz",
              "machdep.cpu.features": "FPU VME SSE SSE2 SSE3 SSSE3 FMA SSE4.1 SSE4.2 POPCNT AVX1.0 F16C",
              "machdep.cpu.leaf7_features": "RDWRFSGS TSC_THREAD_OFFSET BMI1 AVX2 SMEP BMI2 ERMS"}
    facts = parse_sysctl(values, "x86_64")
    assert facts["flags"] == ["avx", "avx2", "f16c", "fma", "sse4_2"] and not int8_kernel_facts(facts)["vnni"]


@pytest.mark.parametrize(("arch", "family"), [("x86_64", "x86"), ("AMD64", "x86"), ("aarch64", "arm"),
                                              ("arm64", "arm"), ("armv7l", "arm"), ("riscv64", None), (None, None)])
def test_isa_family_groups_machine_names(arch, family) -> None:
    assert isa_family(arch) == family


def test_cpu_facts_of_this_machine_are_read_from_its_os() -> None:
    facts = cpu_facts()
    assert set(facts) == {"model", "arch", "flags", "source"} and facts["arch"] == platform.machine()
    assert facts["flags"] == sorted(facts["flags"])
    if sys.platform.startswith("linux"):
        with open("/proc/cpuinfo") as f:
            assert facts == {**parse_cpuinfo(f.read()), "arch": platform.machine()}


class _Remote(Device):
    """A remote device whose probe reports ``cpu`` (or fails), counting how often it is probed."""

    transport = "ssh"

    def __init__(self, name: str, cpu: dict | None, error: str | None = None) -> None:
        super().__init__(name)
        self.cpu, self.error, self.probes = cpu, error, 0

    @property
    def address(self) -> str:
        return "pi@10.0.0.7:22"

    def run_job(self, job: Job, workdir) -> JobResult:
        raise NotImplementedError

    def check(self) -> DeviceReport:
        self.probes += 1
        facts = {"cpu": self.cpu} if self.cpu else {}
        return DeviceReport(self.name, self.transport, self.address, reachable=self.error is None,
                            error=self.error, facts=facts)

    def skip_reason(self, job: Job, host_unavailable: str | None) -> str | None:
        return None if job.runtime == "onnxruntime" else f"no program for {job.runtime}"


def test_device_cpu_probes_a_remote_device_once_and_caches_its_facts(tmp_path) -> None:
    cache, pi = Cache(tmp_path / "cache"), _Remote("pi", parse_cpuinfo(RPI4_AARCH64))
    assert device_cpu(pi, cache) == parse_cpuinfo(RPI4_AARCH64)
    again = _Remote("pi", None)  # the same device in a later build: the cache answers, no probe
    assert device_cpu(again, cache) == parse_cpuinfo(RPI4_AARCH64) and (pi.probes, again.probes) == (1, 0)
    assert len(list((tmp_path / "cache" / NAMESPACE).iterdir())) == 1


def test_device_cpu_of_an_unreachable_device_is_unknown_and_not_cached(tmp_path) -> None:
    cache = Cache(tmp_path / "cache")
    facts = device_cpu(_Remote("orin", None, error="ssh exited 255: connection refused"), cache)
    assert facts["source"] == "unknown" and facts["error"] == "probe failed: ssh exited 255: connection refused"
    assert not (tmp_path / "cache" / NAMESPACE).exists()
    old_probe = device_cpu(_Remote("orin", None), cache)
    assert "reported no CPU" in old_probe["error"]


def test_target_cpus_are_the_devices_that_run_the_runtime(tmp_path) -> None:
    from edgeship.devices import LocalDevice

    pi = _Remote("pi", parse_cpuinfo(RPI4_AARCH64))
    assert runs(pi, "onnxruntime") and not runs(pi, "executorch")
    cpus = target_cpus([LocalDevice("host"), pi], "onnxruntime", Cache(tmp_path / "cache"))
    assert cpus == [("host", cpu_facts()), ("pi", parse_cpuinfo(RPI4_AARCH64))]
    assert target_cpus([pi], "executorch", Cache(tmp_path / "cache")) == []
    assert json.loads(json.dumps(cpus)) == [list(item) for item in cpus]
