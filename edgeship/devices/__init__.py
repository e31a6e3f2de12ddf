"""Devices that artifacts are measured on, and the runner that measures there."""
from edgeship.devices.base import Device, Job, JobResult
from edgeship.devices.local import LocalDevice

__all__ = ["Device", "Job", "JobResult", "LocalDevice"]
