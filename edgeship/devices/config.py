"""``devices.toml``: where artifacts are measured (this machine, ssh boards, adb phones, a browser).

    [devices.orin]
    transport = "ssh"
    host = "orin.local"
    user = "nvidia"
    known_hosts = "~/.ssh/known_hosts"

Every entry is checked before a build starts: unknown keys, a bad transport, a missing identity
or known_hosts file are one DeviceError (exit 2) naming the file, the key and what is allowed.
``host`` (this machine), ``browser`` (this machine's Chromium, for onnxruntime-web) and
``x86-avx2-emulated`` (an AVX2 CPU without VNNI, emulated by qemu-user) are always defined; a file
may redefine them (``DeviceSet.built_in_changes`` says how; a file nobody named may not: listing.py).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import pydantic
from pydantic import Field, field_validator

from edgeship.config import (
    PathField,
    StrictModel,
    existing_file,
    format_error,
    raise_problems,
    read_toml,
    render_loc,
)
from edgeship.devices.base import Device
from edgeship.devices.native import declared_programs
from edgeship.errors import DeviceError, did_you_mean, one_of

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class RemoteSettings(StrictModel):
    """Timeouts and retries shared by every remote transport."""

    connect_timeout_s: float = Field(10.0, gt=0, le=3600, description="Seconds to wait for the device to answer.")
    transfer_timeout_s: float = Field(300.0, gt=0, le=86400,
                                      description="Seconds one copy to or from the device may take.")
    retries: int = Field(2, ge=0, le=10, description="Times a job is started again after its connection dropped.")
    backoff_s: float = Field(2.0, ge=0, le=3600,
                             description="Seconds before the first retry; doubled before each next one.")
    lock_timeout_s: float = Field(
        3600.0, gt=0, le=7 * 86400, description="Seconds to wait for another build to finish timing on the device.")

    @field_validator("workdir", check_fields=False)
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must be an absolute path on the device (~ and $HOME are not expanded)")
        return value.rstrip("/") or "/"


class LocalConfig(StrictModel):
    """This machine."""

    transport: Literal["local"] = Field(description="local: the machine edgeship runs on.")
    python: str | None = Field(None, description="Python that runs the runner; unset: the one running edgeship.")

    def device(self, name: str) -> Device:
        from edgeship.devices.local import LocalDevice

        return LocalDevice(name, self.python)


def _local_file(value: Path | None, info: pydantic.ValidationInfo) -> Path | None:
    if value is None:
        return None
    try:
        expanded = value.expanduser()
    except RuntimeError:  # ~user with no such user, or no home folder at all
        raise ValueError("cannot expand ~ here: no such user or no home folder; give the full path") from None
    return existing_file(expanded, info)


class SshConfig(RemoteSettings):
    """A device with sshd and Python: a Jetson, a Raspberry Pi, a Mac."""

    transport: Literal["ssh"] = Field(description="ssh: reached with the OpenSSH client.")
    host: str = Field(min_length=1, description="Host name or address.")
    port: int = Field(22, ge=1, le=65535, description="sshd's port.")
    user: str | None = Field(None, description="Login name; unset: the ssh client's default.")
    identity: PathField | None = Field(None, description="Private key file; unset: the ssh agent or ssh config.")
    known_hosts: PathField | None = Field(
        None, description="known_hosts file holding the device's host key; unset: ssh's default. "
                          "Host keys are always checked.")
    python: str = Field(
        "python3", description="Python on the device that runs the runner (needs numpy and the runtimes).")
    workdir: str = Field(
        "/tmp/edgeship", description="Absolute folder on the device under which each job gets its own folder.")
    ssh: str = Field("ssh", description="The OpenSSH client to run.")
    multiplex: bool = Field(True, description="Share one connection between a job's steps (OpenSSH ControlMaster).")

    _files = field_validator("identity", "known_hosts")(_local_file)

    @field_validator("host", "user")
    @classmethod
    def _not_an_option(cls, value: str | None) -> str | None:
        if value is not None and value.startswith("-"):
            raise ValueError(f"{value!r} begins with '-': the ssh client would read it as an option; "
                             "give a host name or address (and a login name) that does not")
        return value

    def device(self, name: str) -> Device:
        from edgeship.devices.ssh import SshDevice

        return SshDevice(name, self)


class AdbConfig(RemoteSettings):
    """An Android device: no Python there, so native benchmark programs time the artifacts."""

    transport: Literal["adb"] = Field(description="adb: reached with the Android adb client.")
    serial: str = Field(min_length=1, description="The device's serial (adb devices lists them).")
    adb: str = Field("adb", description="The adb client to run.")
    workdir: str = Field("/data/local/tmp/edgeship", description="Absolute folder on the device for job files.")
    programs: dict[str, str] = Field(
        default_factory=dict, description="Runtime -> path on the device of its benchmark program: "
                                          f"{', '.join(f'{r} -> {p}' for r, p in declared_programs().items())}.")

    @field_validator("programs")
    @classmethod
    def _known_runtimes(cls, value: dict[str, str]) -> dict[str, str]:
        known = declared_programs()
        for runtime in value:
            if runtime not in known:
                raise ValueError(f"no native benchmark program for runtime {runtime!r}; "
                                 f"{one_of(known)}{did_you_mean(runtime, known)}")
        return value

    def device(self, name: str) -> Device:
        from edgeship.devices.adb import AdbDevice

        return AdbDevice(name, self)


class BrowserConfig(StrictModel):
    """A web browser on this machine: Chromium driven by playwright runs onnxruntime-web artifacts."""

    transport: Literal["browser"] = Field(description="browser: Chromium on this machine, driven by playwright.")
    executable: str | None = Field(
        None, min_length=1, description="The Chromium to run; unset: /usr/bin/chromium, else chromium on PATH "
                                        "(Debian's package; edgeship never downloads a browser).")
    threads: int | None = Field(
        None, ge=1, le=64, description="wasm threads when the profile's latency.threads is unset; unset: every "
                                       "core the browser reports (navigator.hardwareConcurrency).")
    headless: bool = Field(True, description="Run Chromium without a window.")
    launch_timeout_s: float = Field(60.0, gt=0, le=3600, description="Seconds Chromium may take to start.")

    def device(self, name: str) -> Device:
        from edgeship.devices.browser import BrowserDevice

        return BrowserDevice(name, self)


class QemuConfig(StrictModel):
    """A CPU this machine lacks, emulated by qemu-user: real outputs of that CPU's kernels, the
    emulator's time (latency rows say "emulated" and never count as a speed)."""

    transport: Literal["qemu"] = Field(description="qemu: the runner under qemu-user on this machine.")
    arch: Literal["x86_64", "aarch64"] = Field(
        "x86_64", description="The emulated architecture: x86_64 (this machine's Python and runtimes, on the CPU "
                              "model `cpu`) or aarch64 (an aarch64 Python and runtimes in `root`, made by `make "
                              "setup-arm`).")
    cpu: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._,+=-]*$",
                     description="qemu's CPU model (-cpu): Haswell (AVX2 without VNNI or AVX-512), Nehalem "
                                 "(SSE4.2), ...; aarch64: max (every feature qemu has: dotprod, i8mm, bf16, SVE2), "
                                 "neoverse-n1 (dotprod), cortex-a72 (Armv8.0); `qemu-ARCH -cpu help` lists them.")
    qemu: str | None = Field(None, min_length=1, description="The emulator to run; unset: qemu-<arch> (Debian's "
                                                             "qemu-user package).")
    python: str | None = Field(
        None, description="Python that runs the runner; unset: x86_64, the one running edgeship; aarch64, the "
                          "root's python3.11.")
    root: str | None = Field(
        None, min_length=1, description="aarch64: the folder with the aarch64 Python and runtimes (qemu -L); unset: "
                                        "the one `make setup-arm` makes (~/.cache/edgeship/arm64-root-<pins>, or "
                                        "$EDGESHIP_ARM_ROOT).")
    warmup: int = Field(1, ge=0, le=1_000_000,
                        description="Untimed runs before the timed ones (at most the profile's).")
    iterations: int = Field(3, ge=1, le=100_000_000, description="Timed runs (at most the profile's): emulated time "
                                                                "shows only what the run took, so a few are enough.")
    timeout_factor: float = Field(
        20.0, ge=1, le=1000, description="The profile's latency.timeout_s is multiplied by this: emulation runs "
                                "10-50x slower than the CPU.")

    def device(self, name: str) -> Device:
        from edgeship.devices.qemu import QemuDevice

        return QemuDevice(name, self)


DeviceConfig = LocalConfig | SshConfig | AdbConfig | BrowserConfig | QemuConfig   # a [devices.NAME] table
CONFIGS: dict[str, type[DeviceConfig]] = {"local": LocalConfig, "ssh": SshConfig, "adb": AdbConfig,
                                          "browser": BrowserConfig, "qemu": QemuConfig}
# Devices every build knows, devices file or not (a file may redefine them). x86-avx2-emulated: an
# x86-64 CPU with AVX2 and no VNNI or AVX-512 (most AMD Zen 1-3 machines, Intel client CPUs before
# Ice Lake), for the int8 kernels of CPUs a newer build machine does not have. arm64-emulated: an
# Armv9 CPU with every feature qemu emulates (dotprod, i8mm, bf16, SVE2), running the aarch64 builds
# of the runtimes android and jetson artifacts use (devices/armroot.py).
BUILT_IN: dict[str, DeviceConfig] = {"host": LocalConfig(transport="local"),
                                      "browser": BrowserConfig(transport="browser"),
                                      "x86-avx2-emulated": QemuConfig(transport="qemu", cpu="Haswell"),
                                      "arm64-emulated": QemuConfig(transport="qemu", arch="aarch64", cpu="max")}


class DeviceSet:
    """The devices a file defines, by name; the BUILT_IN ones are always there."""

    def __init__(self, source: str, configs: dict[str, DeviceConfig]) -> None:
        self.source = source
        self.configs = {**BUILT_IN, **configs}

    @property
    def names(self) -> list[str]:
        return list(self.configs)

    def built_in_changes(self) -> dict[str, dict[str, object]]:
        """The built-in devices this set's file redefines, each with the keys it changes and their
        values in the file (a table equal to the built-in one, as ``[devices.host] transport =
        "local"``, changes nothing)."""
        changes = {name: _changes(BUILT_IN[name], self.configs[name]) for name in BUILT_IN}
        return {name: changed for name, changed in changes.items() if changed}

    def built_in_problems(self) -> list[str]:
        """One line per key by which this set's file redefines a built-in device."""
        return [f"devices.{name}.{key} = {json.dumps(value, default=str)}: '{name}' is a built-in device "
                f"({', '.join(BUILT_IN)})" for name, changed in self.built_in_changes().items()
                for key, value in changed.items()]

    def device(self, name: str) -> Device:
        if name not in self.configs:
            raise DeviceError(f"--device {name}: no device {name!r} in {self.source}; "
                              f"{one_of(self.configs)}{did_you_mean(name, self.configs)}")
        return self.configs[name].device(name)

    def select(self, names: list[str]) -> list[Device]:
        """The named devices, in order, each once (DeviceError for an unknown name)."""
        return [self.device(n) for n in dict.fromkeys(names)]


def _changes(built_in: DeviceConfig, config: DeviceConfig) -> dict[str, object]:
    """The keys of ``config`` whose values differ from ``built_in``'s: a key the built-in has, or
    one the file sets (another transport's defaults are not changes of their own)."""
    mine, theirs = config.model_dump(mode="json"), built_in.model_dump(mode="json")
    return {key: value for key, value in mine.items()
            if (key in theirs or key in config.model_fields_set) and theirs.get(key) != value}


def load_devices(path: Path | str) -> DeviceSet:
    """Read and fully validate a devices file (DeviceError, exit 2)."""
    path = Path(path)
    data = read_toml(path, DeviceError)
    extra = [k for k in data if k != "devices"]
    if extra:
        raise DeviceError(f"{path}: unknown key {extra[0]}{did_you_mean(extra[0], ['devices'])}; "
                          "a devices file holds only [devices.NAME] tables")
    table = data.get("devices", {})
    if not isinstance(table, dict):
        raise DeviceError(f"{path}: devices must be tables ([devices.NAME]), not {type(table).__name__}")
    problems: list[str] = []
    configs: dict[str, DeviceConfig] = {}
    for name, entry in table.items():
        config, found = _entry(name, entry, path.parent)
        problems += found
        if config is not None:
            configs[name] = config
    if problems:
        raise_problems(str(path), problems, DeviceError)
    return DeviceSet(str(path), configs)


def _entry(name: str, entry: object, base_dir: Path) -> tuple[DeviceConfig | None, list[str]]:
    """One [devices.NAME] table validated against its transport's model; problems name its keys."""
    where = f"devices.{name}" if name.isprintable() else f"devices.{name!r}"
    if not re.fullmatch(NAME_PATTERN, name):
        return None, [f"{where}: a device name is letters, digits, '.', '_' and '-'"]
    if not isinstance(entry, dict):
        return None, [f"{where}: must be a table, not {type(entry).__name__}"]
    if "transport" not in entry:
        return None, [f"missing required key {where}.transport ({one_of(CONFIGS)})"]
    transport = str(entry["transport"])
    if transport not in CONFIGS:
        return None, [f'{where}.transport = "{transport}": not allowed; {one_of(CONFIGS)}'
                      f"{did_you_mean(transport, CONFIGS)}"]
    model = CONFIGS[transport]
    try:
        return model.model_validate(entry, context={"base_dir": base_dir}, strict=True), []
    except pydantic.ValidationError as e:
        return None, [_prefixed(model, err, where) for err in e.errors(include_url=False)]


def _prefixed(model: type[StrictModel], err: ErrorDetails, where: str) -> str:
    """config.format_error's line with the key written as devices.NAME.key."""
    key = render_loc(tuple(err["loc"]))
    return format_error(model, err).replace(key, f"{where}.{key}", 1)
