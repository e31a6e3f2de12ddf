"""devices.toml: every mistake named with its key and what is allowed; 'host' always defined."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from edgeship.devices.config import load_devices
from edgeship.errors import DeviceError
from edgeship.pipeline.plan import BuildRequest, resolve_devices


def devices_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "devices.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_devices_file_reads_every_transport_and_always_has_host_and_browser(tmp_path) -> None:
    (tmp_path / "id_ed25519").write_text("key")
    path = devices_file(tmp_path, """\
        [devices.orin]
        transport = "ssh"
        host = "orin.local"
        user = "nvidia"
        identity = "id_ed25519"
        [devices.pixel8]
        transport = "adb"
        serial = "38011FDJH00ABC"
        programs = { executorch = "/data/local/tmp/executor_runner" }
        """)
    devices = load_devices(path)
    assert devices.names == ["host", "browser", "x86-avx2-emulated", "arm64-emulated", "orin", "pixel8"]
    orin, pixel, host = devices.select(["orin", "pixel8", "host", "orin"])
    assert ((orin.address, orin.config.identity, orin.config.port)
            == ("nvidia@orin.local:22", tmp_path / "id_ed25519", 22))
    assert (pixel.address, pixel.transport, host.transport) == ("38011FDJH00ABC", "adb", "local")
    assert orin.retries == 2 and orin.lock_key == "ssh-nvidia@orin.local:22"


def test_devices_file_lists_every_problem_with_its_key(tmp_path) -> None:
    path = devices_file(tmp_path, """\
        [devices.orin]
        transport = "ssh"
        hots = "orin.local"
        known_hosts = "missing_known_hosts"
        workdir = "~/edgeship"
        [devices.pixel8]
        transport = "adb"
        serial = "X"
        programs = { executorh = "/data/local/tmp/executor_runner" }
        [devices.mac]
        transport = "shh"
        """)
    with pytest.raises(DeviceError) as info:
        load_devices(path)
    message = str(info.value)
    assert message.startswith(f"{path}: 6 problems:")
    for expected in ('unknown key devices.orin.hots (did you mean "host"?); allowed here:',
                     "missing required key devices.orin.host",
                     "devices.orin.known_hosts", "path does not exist",
                     'devices.orin.workdir = "~/edgeship": must be an absolute path on the device',
                     "no native benchmark program for runtime 'executorh'", 'did you mean "executorch"',
                     'devices.mac.transport = "shh": not allowed; one of: adb, browser, local, qemu, ssh '
                     '(did you mean "ssh"?)'):
        assert expected in message


def test_devices_unknown_device_name_exits_2_listing_the_known_ones(tmp_path) -> None:
    path = devices_file(tmp_path, '[devices.orin]\ntransport = "ssh"\nhost = "o"\n')
    with pytest.raises(DeviceError, match=r"--device oirn: no device 'oirn' in .*"
                                          r"one of: arm64-emulated, browser, host, orin, x86-avx2-emulated "
                                          r"\(did you mean \"orin\"\?\)"):
        load_devices(path).select(["oirn"])


def test_devices_file_that_is_not_toml_names_the_file(tmp_path) -> None:
    path = devices_file(tmp_path, "[devices.orin\n")
    with pytest.raises(DeviceError, match="not valid TOML"):
        load_devices(path)


def test_plan_uses_the_profiles_devices_when_no_device_is_named(tmp_path) -> None:
    path = devices_file(tmp_path, '[devices.orin]\ntransport = "ssh"\nhost = "o"\n')
    request = BuildRequest(target="host", devices_file=path)
    assert [d.name for d in resolve_devices(request, ["orin", "host"])] == ["orin", "host"]
    request.device_names = ["host"]
    assert [d.name for d in resolve_devices(request, ["orin"])] == ["host"]


@pytest.mark.parametrize(("line", "match"), [
    ("connect_timeout_s = nan", r"devices.orin.connect_timeout_s = nan: not a finite number; finite numbers only"),
    ("backoff_s = inf", r"devices.orin.backoff_s = inf: not a finite number"),
    ("lock_timeout_s = 1e400", r"devices.orin.lock_timeout_s = inf: not a finite number"),
    ('port = "22"', r'devices.orin.port = "22": expected an integer, not a string'),
    ("multiplex = 1", r"devices.orin.multiplex = 1: expected true or false, not an integer"),
    ('known_hosts = "~no-such-user-here/known_hosts"', r"cannot expand ~ here: no such user"),
    ('known_hosts = "."', r'devices.orin.known_hosts = ".": not a file'),
])
def test_devices_bad_value_is_refused_naming_the_device_and_key(tmp_path, line: str, match: str) -> None:
    path = devices_file(tmp_path, f'[devices.orin]\ntransport = "ssh"\nhost = "orin.local"\n{line}\n')
    with pytest.raises(DeviceError, match=match):
        load_devices(path)


@pytest.mark.parametrize(("content", "match"), [
    (b'[devices.a]\ntransport = "local"\npython = "py\xff"\n', r"not UTF-8 text: byte 0xff at offset 44 \(line 3\)"),
    (b"a = " + b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'[devices."a\\n"]\ntransport = "local"\n', r"devices.'a\\n': a device name is letters"),
])
def test_devices_unreadable_file_is_a_device_error_naming_it(tmp_path, content: bytes, match: str) -> None:
    (tmp_path / "devices.toml").write_bytes(content)
    with pytest.raises(DeviceError, match=rf"devices.toml: {match}"):
        load_devices(tmp_path / "devices.toml")


def test_devices_file_built_in_changes_are_only_what_differs_from_the_built_in_device(tmp_path) -> None:
    same = load_devices(devices_file(tmp_path, '[devices.host]\ntransport = "local"\n'))
    assert same.built_in_changes() == {} and same.built_in_problems() == []
    changed = load_devices(devices_file(tmp_path, """\
        [devices.host]
        transport = "local"
        python = "./tools/py"
        [devices.browser]
        transport = "local"
        [devices.x86-avx2-emulated]
        transport = "qemu"
        cpu = "Haswell"
        """))
    assert changed.built_in_changes() == {"host": {"python": "./tools/py"}, "browser": {"transport": "local"}}
    assert changed.built_in_problems()[0].startswith("devices.host.python = \"./tools/py\": 'host' is a built-in")
