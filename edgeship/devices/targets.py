"""The CPUs a build's artifacts will run on, for settings a quantizer picks by CPU.

This machine's CPU is read in-process (``devices/cpu.py``). A remote device's comes from its probe
(``Device.check()``, which runs probe.py there), cached per device in the stage cache (namespace
``devices``, keyed by the device's name, transport and address), so a device is probed once, not
once per build. A board swapped behind the same address keeps its cached facts until
``edgeship cache clear``. A device that cannot be probed is not cached: its CPU is unknown for this
build (the quantizer then takes the conservative setting and says which device it did not know).
"""
from __future__ import annotations

import json
from pathlib import Path

from edgeship.cache import Cache
from edgeship.devices.base import Device, Job

NAMESPACE = "devices"
FACTS_FILE = "cpu.json"


def target_cpus(devices: list[Device], runtime: str, cache: Cache) -> list[tuple[str, dict[str, object]]]:
    """(device name, CPU facts) of each device that runs ``runtime``; a device whose CPU could not
    be found has facts with ``source = "unknown"`` and the reason in ``error``. Empty when no
    device runs it (the caller then takes this machine's)."""
    return [(device.name, device_cpu(device, cache)) for device in devices if runs(device, runtime)]


def runs(device: Device, runtime: str) -> bool:
    """Whether ``device`` runs ``runtime``'s artifacts (an adb phone runs only the native programs)."""
    # skip_reason reads only the job's runtime here; a job with nothing in it asks just that.
    probe = Job(runtime=runtime, artifact=None, sha256=None, inputs=Path(), input_names=[], batch=1, warmup=0,
                iterations=0, threads=None, timeout_s=0)
    return device.skip_reason(probe, None) is None


def device_cpu(device: Device, cache: Cache) -> dict[str, object]:
    """The CPU of ``device``: what it knows of itself (this machine's, an emulated CPU's), else its
    cached probe (probed on a miss; cached only when the probe read the CPU)."""
    own = device.own_cpu()
    if own is not None:
        return own
    key = {"kind": "device-cpu", "device": device.name, "transport": device.transport, "address": device.address}
    kept = cache.read(NAMESPACE, key, lambda entry: json.loads(entry.read_bytes(FACTS_FILE)),
                      redo="probing the device again")
    if kept is not None:
        return kept
    facts = probed_cpu(device)
    if facts.get("source", "unknown") != "unknown" and not facts.get("error"):
        text = json.dumps(facts, sort_keys=True)
        cache.get_or_compute(NAMESPACE, key, lambda folder: (folder / FACTS_FILE).write_text(text))
    return facts


def probed_cpu(device: Device) -> dict[str, object]:
    """The CPU facts ``device``'s probe reports; when it reports none, unknown facts with the reason
    in ``error``."""
    report = device.check()
    cpu = report.facts.get("cpu")
    if report.error or not report.reachable:
        return unknown_cpu(f"probe failed: {report.error or 'unreachable'}")
    if not isinstance(cpu, dict):
        return unknown_cpu("the probe reported no CPU (an older probe.py?)")
    return cpu


def unknown_cpu(reason: str) -> dict[str, object]:
    """Facts for a CPU that could not be found out, saying why."""
    return {"model": None, "arch": None, "flags": [], "source": "unknown", "error": reason}
