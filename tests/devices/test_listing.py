"""``edgeship devices list`` and ``edgeship devices check NAME`` as a user runs them."""
from __future__ import annotations

import socket
import textwrap
from pathlib import Path

from edgeship.cli import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_devices_list_shows_each_device_transport_and_address(capsys, tmp_path) -> None:
    path = tmp_path / "devices.toml"
    path.write_text(textwrap.dedent("""\
        [devices.orin]
        transport = "ssh"
        host = "orin.local"
        port = 2222
        user = "nvidia"
        [devices.pixel8]
        transport = "adb"
        serial = "38011FDJH00ABC"
        programs = { executorch = "/data/local/tmp/executor_runner" }
        """))
    code, out, _ = run(capsys, "devices", "--devices", str(path), "list")
    lines = out.splitlines()
    assert code == 0 and lines[0] == f"devices in {path}:"
    assert lines[1].split()[:2] == ["host", "local"]
    assert lines[2].split()[:3] == ["browser", "browser", f"chromium@{socket.gethostname()}"]
    assert lines[3].split()[:4] == ["x86-avx2-emulated", "qemu", "qemu-x86_64", "-cpu"]
    assert "the runner, emulated" in lines[3]
    assert lines[4].split()[:5] == ["arm64-emulated", "qemu", "qemu-aarch64", "-cpu", "max"]
    assert lines[5].split()[:3] == ["orin", "ssh", "nvidia@orin.local:2222"]
    assert lines[6].split()[:4] == ["pixel8", "adb", "38011FDJH00ABC", "executorch:"]


def test_devices_check_host_reports_python_runtimes_and_disk(capsys) -> None:
    code, out, _ = run(capsys, "devices", "check", "host")
    assert code == 0 and "host (local " in out and "): reachable" in out
    assert "python" in out and "free_disk" in out and "onnxruntime     1." in out


def test_devices_check_of_an_unreachable_device_exits_3_saying_why(capsys, tmp_path, sshd) -> None:
    path = tmp_path / "devices.toml"
    path.write_text(sshd.device_toml("gone", port=1, connect_timeout_s=2))  # nothing listens on port 1
    code, out, _ = run(capsys, "devices", "--devices", str(path), "check", "gone")
    assert code == 3 and "gone (ssh root@127.0.0.1:1): NOT reachable: ssh to" in out.replace(sshd.user, "root")
    assert "Connection refused" in out


def test_devices_check_of_an_unknown_device_exits_2(capsys, tmp_path) -> None:
    code, _, err = run(capsys, "devices", "check", "orin")
    assert code == 2 and "no device 'orin'" in err and "Traceback" not in err


def _host_redefined(folder: Path) -> Path:
    """folder/devices.toml giving 'host' the Python ./tools/py, a script that leaves a marker; the marker."""
    tools, marker = folder / "tools", folder / "ran.txt"
    tools.mkdir()
    (tools / "py").write_text(f"#!/bin/sh\necho ran >> {marker}\nexit 1\n")
    (tools / "py").chmod(0o755)
    (folder / "devices.toml").write_text('[devices.host]\ntransport = "local"\npython = "./tools/py"\n')
    return marker


def test_devices_check_refuses_an_unnamed_devices_toml_that_redefines_a_built_in_device(capsys, tmp_path,
                                                                                        monkeypatch) -> None:
    marker = _host_redefined(tmp_path)
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "devices", "check", "host")
    assert code == 2 and not marker.exists() and "Traceback" not in err
    assert "using ./devices.toml" in err
    assert ("./devices.toml: devices.host.python = \"./tools/py\": 'host' is a built-in device" in err
            and "--devices devices.toml" in err)


def test_devices_list_announces_an_unnamed_devices_toml_when_it_uses_it(capsys, tmp_path, monkeypatch) -> None:
    (tmp_path / "devices.toml").write_text('[devices.host]\ntransport = "local"\n'
                                           '[devices.orin]\ntransport = "ssh"\nhost = "orin.local"\n')
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "devices", "list")
    assert code == 0 and "using ./devices.toml" in err and "redefines" not in err
    assert [line.split()[:2] for line in out.splitlines()[1:]][0::4] == [["host", "local"], ["orin", "ssh"]]


def test_devices_list_notes_a_built_in_device_a_named_file_redefines(capsys, tmp_path) -> None:
    marker = _host_redefined(tmp_path)
    code, _, err = run(capsys, "devices", "--devices", str(tmp_path / "devices.toml"), "list")
    assert code == 0 and not marker.exists()
    assert f"note: {tmp_path / 'devices.toml'} redefines devices.host.python = \"./tools/py\"" in err
