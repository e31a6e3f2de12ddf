"""``edgeship devices list`` and ``edgeship devices check NAME`` as a user runs them."""
from __future__ import annotations

import socket
import textwrap

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
