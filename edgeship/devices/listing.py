"""What ``edgeship devices list`` and ``edgeship devices check NAME`` print."""
from __future__ import annotations

from pathlib import Path

from edgeship.config import raise_problems
from edgeship.devices.base import DeviceReport
from edgeship.devices.config import DeviceSet, load_devices
from edgeship.errors import DeviceError
from edgeship.progress import console

DEFAULT_FILE = Path("devices.toml")


def device_set(path: str | Path | None) -> DeviceSet:
    """The devices of ``path``; without one, ./devices.toml when it exists, else only the built-in ones.

    ./devices.toml is a file in whatever folder the command runs in (a repository just cloned), so
    using it is said on stderr, and it may not change a built-in device (DeviceError, exit 2): 'host'
    redefined there would run its own ``python``. A file named with --devices may (the user chose
    it); a note on stderr says what it changes."""
    if path is not None:
        devices = load_devices(path)
        for line in devices.built_in_problems():
            console.print(f"note: {path} redefines {line}", markup=False, soft_wrap=True)
        return devices
    if not DEFAULT_FILE.exists():
        return DeviceSet("(no devices file)", {})
    console.print(f"using ./{DEFAULT_FILE} (found in the working folder)", markup=False, soft_wrap=True)
    devices = load_devices(DEFAULT_FILE)
    problems = devices.built_in_problems()
    if problems:
        problems[-1] += (f"; ./{DEFAULT_FILE} was found in the working folder, not named, so it may not change a "
                         f"built-in device: name it with --devices {DEFAULT_FILE} to use it, or give the device "
                         "another name")
        raise_problems(f"./{DEFAULT_FILE}", problems, DeviceError)
    return devices


def list_text(devices: DeviceSet) -> str:
    """One line per device: name, transport, address and what it runs."""
    lines = [f"devices in {devices.source}:"]
    for name in devices.names:
        config = devices.configs[name]
        device = config.device(name)
        runs = "the runner (numpy + each runtime's Python package)"
        if config.transport == "adb":
            runs = ", ".join(f"{r}: {p}" for r, p in config.programs.items()) or "no benchmark programs set"
        elif device.emulation is not None:
            runs = "the runner, emulated (this machine's runtimes; outputs count, times are the emulator's)"
        lines.append(f"  {name:<12} {config.transport:<6} {device.address:<28} {runs}")
    return "\n".join(lines)


def check_text(report: DeviceReport) -> str:
    """The facts a check found, or why the device could not be reached."""
    head = f"{report.name} ({report.transport} {report.address}): "
    if not report.reachable:
        return head + f"NOT reachable: {report.error}"
    lines = [head + ("reachable" if report.error is None else f"reachable, but {report.error}")]
    facts = dict(report.facts)
    if facts.get("free_disk_bytes") is not None:
        facts["free_disk"] = f"{facts.pop('free_disk_bytes') / (1 << 30):.1f} GiB"
    lines += [f"  {key:<10} {value}" for key, value in facts.items()]
    lines += ["  runtimes:"] + [f"    {name:<15} {state}" for name, state in report.runtimes.items()]
    return "\n".join(lines + [f"  note: {n}" for n in report.notes])
