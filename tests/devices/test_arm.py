"""The emulated Arm device (built-in arm64-emulated): the shipped runner in an aarch64 Python under
qemu-aarch64, with the aarch64 builds of ExecuTorch, ONNX Runtime and torch from the root folder
``make setup-arm`` makes. The build test skips, with the reason, where the root is not set up
(.ci/run sets it up); the rest runs everywhere."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from edgeship import api, cli
from edgeship.backends.registry import SPECS
from edgeship.devices import armroot
from edgeship.devices.base import Job
from edgeship.devices.config import BUILT_IN, QemuConfig, load_devices
from edgeship.devices.cpu import hwcap_names, parse_cpuinfo
from edgeship.devices.qemu import arm_runtimes
from edgeship.errors import DeviceError
from tests import system
from tests.conftest import REPO, build_on, shipped_variants_profile

ARM = "arm64-emulated"
ROOT_PROBLEM = armroot.root_problem(armroot.default_root())
needs_root = pytest.mark.skipif(ROOT_PROBLEM is not None or system.qemu("aarch64") is not None,
                                reason=str(system.qemu("aarch64") or system.reason("arm64-root", str(ROOT_PROBLEM))))


def _job(runtime: str) -> Job:
    return Job(runtime=runtime, artifact=None, sha256=None, inputs=Path(), input_names=[], batch=1, warmup=0,
               iterations=0, threads=None, timeout_s=1)


def test_arm64_emulated_is_built_in_and_runs_the_roots_python(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(armroot.ROOT_ENV, str(tmp_path / "root"))
    device = BUILT_IN[ARM].device(ARM)
    assert device.arm and device.python == str(tmp_path / "root" / "usr/bin/python3.11")
    assert device.emulator() == ["qemu-aarch64", "-L", str(tmp_path / "root"), "-cpu", "max"]


def test_without_its_root_every_row_says_how_to_set_it_up(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(armroot.ROOT_ENV, str(tmp_path / "nothing"))
    device = BUILT_IN[ARM].device(ARM)
    reason = device.skip_reason(_job("executorch"), None)
    if shutil.which("qemu-aarch64") is None:
        assert "qemu-aarch64 is not installed here" in reason
    else:
        assert reason == (f"the aarch64 root {tmp_path / 'nothing'} is not set up here: run make setup-arm (or: "
                          "edgeship devices setup arm64-emulated) (about 1 minute, 0.9 GB)")
    assert not device.check().reachable


def test_a_runtime_the_root_does_not_have_is_named_with_the_reason(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(armroot.ROOT_ENV, str(tmp_path))
    device = BUILT_IN[ARM].device(ARM)
    assert device.skip_reason(_job("openvino"), None) == (
        "openvino has no aarch64 runtime on arm64-emulated (the emulated root has executorch, onnxruntime, "
        "pytorch-mobile, tensorrt, torchscript)")
    assert device.skip_reason(_job("eager"), None).startswith("the eager float model runs only on the host")


def test_the_roots_runtimes_are_those_of_the_backends_declaring_runs_in_arm_root(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(armroot.ROOT_ENV, str(tmp_path))
    device = BUILT_IN[ARM].device(ARM)
    assert arm_runtimes() == sorted({spec.runtime for spec in SPECS.values() if spec.runs_in_arm_root})
    monkeypatch.setattr(SPECS["openvino"], "runs_in_arm_root", True)
    assert "openvino" in arm_runtimes() and "no aarch64 runtime" not in str(device.skip_reason(_job("openvino"), None))


def test_a_change_of_pins_makes_a_new_root(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(armroot.ROOT_ENV, raising=False)
    before = armroot.default_root()
    before.mkdir(parents=True)
    (before / armroot.MARKER).write_text(json.dumps({"pins": armroot.pins_hash()}))
    assert armroot.root_problem(before) is None
    monkeypatch.setattr(armroot, "WHEELS", (*armroot.WHEELS, ("extra-1.0-py3-none-any.whl", "0" * 64)))
    after = armroot.default_root()
    assert after != before and after.parent == before.parent
    assert "is not set up here" in armroot.root_problem(after)
    after.mkdir()  # a folder of these pins whose marker says otherwise (made by another version)
    (after / armroot.MARKER).write_text(json.dumps({"pins": "0123456789abcdef"}))
    assert "was made for other pins" in armroot.root_problem(after)


def test_the_roots_cpuinfo_names_qemus_cpu_and_its_features(tmp_path) -> None:
    names = hwcap_names((1 << 0) | (1 << 1) | (1 << 20), (1 << 13) | (1 << 14))
    assert names == ["fp", "asimd", "asimddp", "i8mm", "bf16"]
    armroot.write_cpu_files(tmp_path, names, 2)
    facts = parse_cpuinfo((tmp_path / "proc/cpuinfo").read_text())
    assert facts["model"] == "QEMU max (emulated)" and facts["arch"] == "aarch64"
    assert set(facts["flags"]) == {"neon", "dotprod", "i8mm", "bf16"}
    assert (tmp_path / "sys/devices/system/cpu/cpu1/regs/identification/midr_el1").read_text() == armroot.MIDR + "\n"


def test_devices_setup_refuses_a_device_that_needs_none() -> None:
    with pytest.raises(DeviceError, match="'host' needs no setup"):
        api.setup_device("host")


def test_a_devices_file_takes_an_aarch64_qemu_device(tmp_path) -> None:
    path = tmp_path / "devices.toml"
    path.write_text(f'[devices.pi]\ntransport = "qemu"\narch = "aarch64"\ncpu = "cortex-a72"\nroot = "{tmp_path}"\n')
    device = load_devices(path).device("pi")
    assert device.emulator() == ["qemu-aarch64", "-L", str(tmp_path), "-cpu", "cortex-a72"]
    assert isinstance(BUILT_IN[ARM], QemuConfig)


def _arm_profile(folder: Path) -> Path:
    """The android profile's int8 variants and host.toml's onnx-int8 and openvino-int8."""
    android = tomllib.loads((REPO / "targets" / "android.toml").read_text())
    host = tomllib.loads((REPO / "targets" / "host.toml").read_text())
    variants = [v for v in android["variants"] if v.get("precision") == "int8"]
    variants += [v for v in host["variants"] if v["name"] in ("onnx-int8", "openvino-int8")]
    return shipped_variants_profile(folder, "arm", "int8 on x86 and on aarch64 kernels", variants, "android")


@pytest.mark.slow
@needs_root
def test_the_demos_int8_variants_run_on_aarch64_kernels(tmp_path) -> None:
    out = tmp_path / "out"
    proc = build_on(_arm_profile(tmp_path), out, ["host", ARM])
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {r["name"]: r for r in json.loads((out / "results.json").read_text())["variants"]}
    for name in ("executorch-xnnpack-int8", "mobile-int8-qnnpack", "onnx-int8"):
        host, arm = rows[name]["latency"]
        assert (host["device"], arm["device"]) == ("host", ARM) and rows[name]["gates"]["passed"]
        assert arm["emulated"].startswith("qemu-aarch64 ") and arm["emulated"].endswith("-cpu max (TCG)")
        assert arm["cpu"]["model"] == "qemu -cpu max (emulated aarch64)" and arm["cpu"]["source"] == "hwcap"
        assert arm["cpu"]["arch"] == "aarch64" and {"dotprod", "i8mm", "bf16"} <= set(arm["cpu"]["flags"])
        assert arm["accuracy"]["top1_drop"] <= 1.0 and arm["accuracy"]["sqnr_db"] >= 20
        assert abs(arm["accuracy"]["sqnr_db"] - host["accuracy"]["sqnr_db"]) < 3  # other kernels, same model
        agree = arm["vs_first_device"]  # the aarch64 outputs against x86's, of the same file
        assert agree["device"] == "host" and (agree["equal"] or agree["sqnr_db"] > 25)
        assert host["vs_first_device"] is None
    report = (out / "report.md").read_text()
    table = report.split("## Accuracy on each device")[1].split("## ")[0]
    assert (f"| variant | top-1 host | SQNR (dB) host | vs host, SQNR host | top-1 {ARM} | SQNR (dB) {ARM} | "
            f"vs host, SQNR {ARM} |") in table
    assert "| executorch-xnnpack-int8 | " in table and f"{ARM} is emulated (qemu-aarch64" in report
    openvino = rows["openvino-int8"]
    assert [lat["device"] for lat in openvino["latency"]] == ["host"]
    assert f"{ARM}: not measured here: openvino has no aarch64 runtime on {ARM} (the emulated root has " \
           "executorch, onnxruntime, pytorch-mobile, tensorrt, torchscript)" in openvino["notes"]


@needs_root
def test_each_emulated_arm_cpu_model_reports_its_own_features(tmp_path) -> None:
    """The root's /proc/cpuinfo is written once (for -cpu max); the CPU facts come from HWCAP, so a
    device emulating an older core reports that core's features, as the runtimes see them."""
    old = QemuConfig(transport="qemu", arch="aarch64", cpu="cortex-a72").device("pi4")
    facts = old.own_cpu()
    assert facts["source"] == "hwcap" and facts["model"] == "qemu -cpu cortex-a72 (emulated aarch64)"
    assert "neon" in facts["flags"] and not {"dotprod", "i8mm", "bf16", "sve"} & set(facts["flags"])
    new = BUILT_IN[ARM].device(ARM).own_cpu()
    assert {"neon", "dotprod", "i8mm", "bf16", "sve", "sve2"} <= set(new["flags"])


def test_a_matrix_can_name_the_emulated_arm_device(tmp_path) -> None:
    from edgeship.matrix.spec import load_matrix

    path = tmp_path / "matrix.toml"
    path.write_text(f'models = ["demo"]\ntargets = ["android"]\ndevices = ["host", "{ARM}"]\n')
    assert load_matrix(path).devices == ["host", ARM]


@pytest.fixture
def fake_steps(monkeypatch):
    """armroot.setup with its slow steps (mmdebstrap, pip, qemu: a minute and 230 MB) replaced by ones
    that write a few files; the list records the steps that ran."""
    ran: list[str] = []

    def debian(root: Path) -> None:
        ran.append("debian")
        (root / armroot.PYTHON).parent.mkdir(parents=True)
        (root / armroot.PYTHON).write_text("")

    monkeypatch.setattr(armroot, "_debian", debian)
    monkeypatch.setattr(armroot, "_wheels", lambda root: ran.append("wheels"))
    monkeypatch.setattr(armroot, "_cpu_files", lambda root, qemu: ran.append("cpu"))
    monkeypatch.setattr(armroot.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    return ran


def test_arm_root_setup_refuses_a_folder_of_the_users_and_deletes_nothing(monkeypatch, tmp_path, fake_steps,
                                                                          capsys) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("\\chapter{Years of work}")
    monkeypatch.setenv(armroot.ROOT_ENV, str(mine))
    assert cli.main(["devices", "setup", ARM]) == 2
    err = capsys.readouterr().err
    assert f"the aarch64 root folder {mine} holds files edgeship did not make" in err and "Traceback" not in err
    assert [p.name for p in mine.iterdir()] == ["thesis.tex"] and fake_steps == []   # refused before any work
    assert [p.name for p in tmp_path.iterdir()] == ["mine"]


def test_arm_root_setup_never_replaces_the_working_folder(monkeypatch, tmp_path, fake_steps, capsys) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "devices.toml").write_text('[devices.arm]\ntransport = "qemu"\narch = "aarch64"\ncpu = "max"\nroot = "."\n')
    monkeypatch.chdir(repo)
    assert cli.main(["devices", "--devices", "devices.toml", "setup", "arm"]) == 2
    assert f"the aarch64 root folder {repo} is the working folder" in capsys.readouterr().err
    assert [p.name for p in repo.iterdir()] == ["devices.toml"] and fake_steps == []


def test_arm_root_setup_replaces_a_root_it_made_for_other_pins_and_fills_an_empty_folder(monkeypatch, tmp_path,
                                                                                        fake_steps) -> None:
    old = tmp_path / "root"
    (old / "usr").mkdir(parents=True)
    (old / armroot.MARKER).write_text(json.dumps({"pins": "0123456789abcdef"}))
    monkeypatch.setattr(armroot, "root_problem", lambda root: "made for other pins")  # not named arm64-root-*
    assert armroot.setup(old, say=lambda line: None) == old
    assert json.loads((old / armroot.MARKER).read_text())["pins"] == armroot.pins_hash()
    assert fake_steps == ["debian", "wheels", "cpu"] and sorted(p.name for p in tmp_path.iterdir()) == ["root"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert armroot.setup(empty, say=lambda line: None) == empty and (empty / armroot.MARKER).is_file()


def test_arm_root_that_other_users_can_write_to_is_not_used(tmp_path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / armroot.MARKER).write_text(json.dumps({"pins": armroot.pins_hash()}))
    assert armroot.root_problem(root) is None
    root.chmod(0o777)
    assert armroot.root_problem(root) == (f"the aarch64 root {root} is writable by everyone (mode 0777): its Python "
                                          "and runtimes run as you, so it must be yours alone")


def test_arm_root_pip_imports_nothing_from_the_working_folder(monkeypatch, tmp_path) -> None:
    """A pip.py where edgeship is started: the pip that installs the aarch64 wheels must not be it.
    The real pip runs with the command's flags and folder, asked only for its version (no download)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pip.py").write_text("open('imported-from-cwd', 'w').close()\n")
    real = subprocess.run
    seen: list[str] = []

    def version_only(command, **kwargs):
        if command[0] == sys.executable:
            command = command[:command.index("pip") + 1] + ["--version"]
        proc = real(command, **kwargs)
        seen.append(proc.stdout)
        return proc

    monkeypatch.setattr(armroot.subprocess, "run", version_only)
    armroot._wheels(tmp_path / "root")
    assert not (tmp_path / "imported-from-cwd").exists() and seen[0].startswith("pip ")
    assert os.listdir(tmp_path) == ["pip.py"]
