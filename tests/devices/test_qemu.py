"""The emulated CPU device (transport qemu, built-in x86-avx2-emulated): the CPU it reports is the
emulated one, jobs run the shipped runner under qemu-x86_64, rows say "emulated", and the device's
absence is said, not crashed on. Skips without qemu-user (Debian: apt-get install qemu-user; .ci/run
installs it)."""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgeship.devices.base import HERE, Job, MeasurementError
from edgeship.devices.config import BUILT_IN, QemuConfig, load_devices
from edgeship.devices.cpu import SOURCE_ENV, cpu_facts, parse_cpuid
from edgeship.devices.qemu import QemuDevice
from edgeship.errors import DeviceError
from tests import system

QEMU = shutil.which("qemu-x86_64")
NO_QEMU = system.qemu() if platform.machine() == "x86_64" else system.reason("cpu", "emulated x86 CPUs run on x86-64")
needs_qemu = pytest.mark.skipif(NO_QEMU is not None, reason=str(NO_QEMU))
HASWELL = "x86-avx2-emulated"


def _emulated() -> QemuDevice:
    return BUILT_IN[HASWELL].device(HASWELL)


@needs_qemu
def test_the_emulated_device_reports_the_emulated_cpu_not_the_hosts_cpuinfo() -> None:
    facts = _emulated().own_cpu()
    assert facts["source"] == "cpuid" and facts["model"] == "Intel Core Processor (Haswell)"
    assert {"avx2", "fma", "f16c"} <= set(facts["flags"])
    assert not {f for f in facts["flags"] if f.startswith(("avx512", "amx")) or f == "avx_vnni"}
    # Without CPUID the emulated process reads the host's /proc/cpuinfo: that is why the device asks for it.
    plain = subprocess.run([QEMU, "-cpu", "Haswell", sys.executable, str(HERE / "cpu.py")], capture_output=True,
                           text=True, timeout=120, env={k: v for k, v in os.environ.items() if k != SOURCE_ENV})
    assert json.loads(plain.stdout)["flags"] == cpu_facts()["flags"]


@pytest.mark.skipif(platform.machine() != "x86_64" or not sys.platform.startswith("linux"),
                    reason=system.reason("cpu", "CPUID is read on x86-64 Linux"))
def test_cpuid_gives_the_same_flags_as_the_kernel_on_this_machine(monkeypatch) -> None:
    kernel = cpu_facts()
    monkeypatch.setenv(SOURCE_ENV, "cpuid")
    cpuid = cpu_facts()
    assert cpuid["source"] == "cpuid" and kernel["source"] == "/proc/cpuinfo" and cpuid["arch"] == kernel["arch"]
    # The kernel may switch a feature off (a mitigation, an old kernel without AMX), never on.
    assert set(kernel["flags"]) <= set(cpuid["flags"]) and {"avx2", "sse4_2"} & set(cpuid["flags"])
    assert " ".join((kernel["model"] or "").split()) == cpuid["model"]


def test_parse_cpuid_leaves_out_what_the_os_does_not_save() -> None:
    """A CPU with AVX-512 VNNI and AMX whose OS saves only the SSE and AVX state (XCR0 = 0x7)."""
    regs = {(0, 0): (0xD, 0, 0, 0), (1, 0): (0, 0, (1 << 27) | (1 << 28) | (1 << 12) | (1 << 20), 0),
            (7, 0): (1, (1 << 5) | (1 << 16) | (1 << 30), 1 << 11, 1 << 25), (7, 1): (1 << 4, 0, 0, 0),
            (0x80000000, 0): (0, 0, 0, 0)}
    facts = parse_cpuid(lambda leaf, sub: regs[(leaf, sub)], xcr0=0x7)
    assert facts == {"model": None, "arch": "x86_64", "flags": ["avx", "avx2", "avx_vnni", "fma", "sse4_2"],
                     "source": "cpuid"}
    full = parse_cpuid(lambda leaf, sub: regs[(leaf, sub)], xcr0=0x600E7)
    assert {"avx512f", "avx512bw", "avx512_vnni", "amx_int8"} <= set(full["flags"])


@needs_qemu
def test_a_job_on_the_emulated_device_runs_the_runner_under_qemu_and_says_so(tmp_path) -> None:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    np.savez(tmp_path / "in.npz", x=x)
    job = Job(runtime="onnxruntime", artifact=tmp_path / "m.onnx", sha256=None, inputs=tmp_path / "in.npz",
              input_names=["x"], batch=1, warmup=10, iterations=100, threads=1, timeout_s=120)
    device = _emulated()
    result = device.run_job(job, tmp_path / "job")
    assert np.array_equal(result.outputs[0], np.maximum(x, 0))
    assert result.document["cpu"]["model"] == "Intel Core Processor (Haswell)"
    assert (result.document["warmup"], result.document["iterations"]) == (1, 3)
    assert any("1 warmup and 3 timed iterations instead of 10 and 100" in n for n in result.notes)
    assert device.emulation.startswith("qemu-x86_64 7.") and device.emulation.endswith("-cpu Haswell (TCG)")


def test_the_emulated_device_shares_the_hosts_lock_and_skips_eager() -> None:
    from edgeship.devices.local import LocalDevice

    device = _emulated()
    assert device.lock_key == LocalDevice("host").lock_key
    eager = Job(runtime="eager", artifact=None, sha256=None, inputs=Path(), input_names=[], batch=1, warmup=0,
                iterations=0, threads=None, timeout_s=1)
    assert "runs only on the host" in device.skip_reason(eager, None)
    ort = Job(**{**eager.__dict__, "runtime": "onnxruntime"})
    assert device.skip_reason(ort, None) is None
    assert device.skip_reason(ort, "onnxruntime is not installed") == "onnxruntime is not installed"


def test_an_emulated_device_without_qemu_says_how_to_install_it(tmp_path) -> None:
    device = QemuConfig(transport="qemu", cpu="Haswell", qemu="qemu-not-installed-here").device("old")
    report = device.check()
    assert not report.reachable and "qemu-not-installed-here is not installed here (Debian: apt-get install " \
                                   "qemu-user)" in report.error
    assert device.own_cpu()["source"] == "unknown" and "not installed" in device.own_cpu()["error"]
    job = Job(runtime="onnxruntime", artifact=None, sha256=None, inputs=Path(), input_names=[], batch=1, warmup=0,
              iterations=0, threads=None, timeout_s=1)
    with pytest.raises(MeasurementError, match="not installed here"):
        device.run_job(job, tmp_path)


def test_devices_file_takes_qemu_entries_and_checks_them(tmp_path) -> None:
    path = tmp_path / "devices.toml"
    path.write_text('[devices.old-pc]\ntransport = "qemu"\ncpu = "Nehalem"\niterations = 5\n')
    devices = load_devices(path)
    assert {"host", "browser", HASWELL, "old-pc"} <= set(devices.names)
    assert devices.device("old-pc").address.startswith("qemu-x86_64 -cpu Nehalem on ")
    path.write_text('[devices.bad]\ntransport = "qemu"\ncpu = "Haswell; rm -rf"\narch = "riscv64"\n')
    with pytest.raises(DeviceError) as e:
        load_devices(path)
    assert "devices.bad.cpu" in str(e.value) and "devices.bad.arch" in str(e.value)
