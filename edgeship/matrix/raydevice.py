"""A device reached through Ray: the measurement runs as a Ray task on the node that owns the device.

A node owns a device by advertising the custom resource ``device:<name>`` (``ray start
--resources '{"device:pixel8": 1}'``, or ``edgeship lab node``). A measurement asks for one unit
of it, so Ray runs it on that node, and never two at once on one device anywhere in the cluster
(the node's OS lock, ``devices/lock.py``, is still taken there as in a one-host build). The
artifact and the inputs travel through Ray's object store (no shared filesystem); the node reads
the device from the devices file the driver sent and runs the job with it, exactly as a one-host
build would; the result document, the outputs and where and when it ran come back. The node reads
the device from its own devices file, ``$EDGESHIP_LAB_DEVICES`` (what ``edgeship lab node
--devices FILE`` sets for its Ray worker), else from the driver's devices file at the same path
(a cluster on one machine, or a shared configuration).

A node that dies mid-job: Ray runs the task again, at most ``retries`` times, on a node that has
the device. When no live node has the device any more (its node died or left) the job fails with
a ``MeasurementError`` naming the device, after ``NO_NODE_GRACE_S``, not after the job's timeout.
"""
from __future__ import annotations

import io
import os
import socket
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgeship.devices.base import Device, DeviceReport, Job, JobResult, MeasurementError, TransportError
from edgeship.errors import first_line

RESOURCE = "device:{}"
LAB_DEVICES_ENV = "EDGESHIP_LAB_DEVICES"  # a lab node's own devices file
NO_NODE_GRACE_S = 10.0   # how long a job waits for a live node with its device before it fails
POLL_S = 1.0


def resource_of(name: str) -> str:
    return RESOURCE.format(name)


class RayDevice(Device):
    """A device of the devices file, measured through Ray on the node that advertises it."""

    transport = "ray"

    def __init__(self, inner: Device, devices_file: Path, retries: int,
                 on_start: Callable[[str], None] | None = None) -> None:
        super().__init__(inner.name)
        self.inner = inner
        self.on_start = on_start  # told the device's name when a job is sent (progress lines)
        self.retries, self.backoff_s = inner.retries, inner.backoff_s  # a dropped connection there, as here
        self.devices_file = str(Path(devices_file).resolve())
        self.ray_retries = retries
        self.lock_timeout_s = inner.lock_timeout_s

    @property
    def address(self) -> str:
        return f"ray:{resource_of(self.name)} ({self.inner.address})"

    @property
    def lock_key(self) -> str:
        return f"ray-{self.name}"  # the cluster's resource is the lock; no host-local lock here

    def skip_reason(self, job: Job, host_unavailable: str | None) -> str | None:
        return self.inner.skip_reason(job, host_unavailable)

    def planned(self, job: Job) -> Job:
        return self.inner.planned(job)

    def check(self) -> DeviceReport:
        return self.inner.check()

    def run_job(self, job: Job, workdir: Path) -> JobResult:
        import ray

        sent = {"artifact": pack(job.artifact) if job.artifact else None, "inputs": job.inputs.read_bytes()}
        fields = {k: v for k, v in vars(job).items() if k not in ("artifact", "inputs")}
        fields["artifact_name"] = job.artifact.name if job.artifact else None
        task = ray.remote(measure_on_device).options(resources={resource_of(self.name): 1}, num_cpus=0,
                                                      max_retries=self.ray_retries, retry_exceptions=False)
        ref = task.remote(self.name, self.devices_file, fields, ray.put(sent))
        if self.on_start is not None:
            self.on_start(self.name)
        deadline = time.monotonic() + job.timeout_s + 60
        missing_since = None
        while True:
            ready, _ = ray.wait([ref], timeout=POLL_S)
            if ready:
                break
            missing_since = None if owned_by_live_node(self.name) else (missing_since or time.monotonic())
            if missing_since is not None and time.monotonic() - missing_since > NO_NODE_GRACE_S:
                ray.cancel(ref, force=True)  # not a dropped connection to retry: nothing can run it now
                raise MeasurementError(f"no live Ray node has {resource_of(self.name)} any more (its node died or "
                                       f"left the cluster) for {NO_NODE_GRACE_S:.0f} s")
            if time.monotonic() > deadline:
                ray.cancel(ref, force=True)
                raise MeasurementError(f"the measurement on {self.name} did not finish within {job.timeout_s:.0f} s "
                                       "(and a minute for Ray)")
        try:
            back = ray.get(ref)
        except ray.exceptions.RayTaskError as e:
            cause = e.cause if isinstance(getattr(e, "cause", None), Exception) else e
            if isinstance(cause, MeasurementError):
                raise type(cause)(str(cause)) from None
            raise MeasurementError(f"the measurement task failed on {self.name}'s node: {cause}") from None
        except ray.exceptions.RayError as e:  # its worker or node died more often than retries allow
            raise TransportError(f"Ray lost the measurement on {self.name}: {type(e).__name__}: "
                                 f"{first_line(e)}") from None
        result = JobResult(back["document"], back["outputs"], back["notes"])
        result.document["ray"] = back["where"]
        result.notes.append(f"measured through Ray on node {back['where']['node_ip']} "
                            f"({back['where']['node_id'][:12]}), {back['where']['hostname']}")
        return result


def owned_by_live_node(name: str) -> bool:
    """Whether a live node of the cluster advertises the device's resource."""
    import ray

    key = resource_of(name)
    return any(node.get("Alive") and key in (node.get("Resources") or {}) for node in ray.nodes())


def measure_on_device(name: str, devices_file: str, fields: dict[str, Any], sent: dict[str, Any]) -> dict[str, Any]:
    """The Ray task: the job run on device ``name`` on this node, inside the device's OS lock."""
    import ray

    from edgeship.devices.config import load_devices
    from edgeship.devices.lock import DeviceLock

    began = time.time()
    device = load_devices(os.environ.get(LAB_DEVICES_ENV) or devices_file).device(name)
    with tempfile.TemporaryDirectory(prefix="edgeship-ray-job-") as work:
        folder = Path(work)
        artifact_name = fields.pop("artifact_name")
        artifact = unpack(sent["artifact"], folder / "artifact", artifact_name) if sent["artifact"] else None
        inputs = folder / "inputs.npz"
        inputs.write_bytes(sent["inputs"])
        job = Job(artifact=artifact, inputs=inputs, **fields)
        try:
            with DeviceLock(device.lock_key, device.lock_timeout_s):
                result = device.run_job(job, folder / "run")
        finally:
            device.close()
    context = ray.get_runtime_context()
    where = {"node_id": context.get_node_id(), "node_ip": ray.util.get_node_ip_address(),
             "hostname": socket.gethostname(), "pid": os.getpid(), "started": began, "ended": time.time()}
    return {"document": result.document, "outputs": result.outputs, "notes": result.notes, "where": where}


def pack(path: Path) -> bytes:
    """A tar of an artifact (a file, or a folder: an IR, an .mlpackage)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(str(path), arcname=path.name)
    return buffer.getvalue()


def unpack(data: bytes, folder: Path, name: str) -> Path:
    """The artifact ``name`` from :func:`pack`'s tar, under ``folder`` (entries leaving it refused)."""
    folder.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(folder, filter="data")
    return folder / name
