"""``edgeship lab node``: join a Ray cluster as the machine a lab's devices are attached to.

It starts a Ray worker node (``ray start --address HEAD``) that advertises one custom resource
``device:<name>`` per device of the devices file (all of them, or those named), with
``$EDGESHIP_LAB_DEVICES`` set to that file for the worker, so a measurement placed there reads the
device as this machine knows it (its ssh keys, its adb serials). Ray then runs each measurement of
those devices here, one at a time per device across the whole cluster.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from edgeship.devices.config import load_devices
from edgeship.errors import DeviceError
from edgeship.matrix.raydevice import LAB_DEVICES_ENV, resource_of


def ray_command() -> str:
    """The ``ray`` command of this Python's environment."""
    beside = Path(sys.executable).parent / "ray"
    if not beside.exists():
        raise DeviceError("edgeship lab node needs Ray: pip install 'ray[default]' (the ray command was not found "
                          f"beside {sys.executable})")
    return str(beside)


def node_command(devices_file: str | Path, address: str, names: list[str], num_cpus: int | None) -> list[str]:
    """The ``ray start`` command line for a node owning the devices ``names`` of ``devices_file`` (all
    but the built-in ones when none are named); DeviceError for an unknown name."""
    devices = load_devices(devices_file)
    chosen = [d.name for d in devices.select(names)] if names else [
        n for n in devices.names if not devices.device(n).local_to_node]
    if not chosen:
        raise DeviceError(f"{devices_file}: no device to attach (this machine's own devices, such as the built-in "
                          "host, browser and x86-avx2-emulated, are every node's own)")
    resources = json.dumps({resource_of(name): 1 for name in chosen})
    command = [ray_command(), "start", f"--address={address}", f"--resources={resources}"]
    return command + ([f"--num-cpus={num_cpus}"] if num_cpus is not None else [])


def start_node(devices_file: str | Path, address: str, names: list[str], num_cpus: int | None) -> list[str]:
    """Run :func:`node_command` with the devices file in the worker's environment; the command run."""
    command = node_command(devices_file, address, names, num_cpus)
    env = {**os.environ, LAB_DEVICES_ENV: str(Path(devices_file).resolve())}
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise DeviceError(f"ray start failed (exit {proc.returncode}): {tail}")
    return command
