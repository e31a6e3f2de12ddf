"""What every device does: take a measurement job, run the runner there, bring the results back."""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

RUNNER = Path(__file__).resolve().parent / "runner.py"


@dataclass
class Job:
    """One measurement: an artifact run by one runtime on one device."""

    runtime: str
    artifact: Path | None          # None for the eager model
    sha256: str | None
    inputs: Path                   # .npz, one array per input name
    input_names: list[str]
    batch: int
    warmup: int
    iterations: int
    threads: int | None
    timeout_s: float
    options: dict[str, Any] = field(default_factory=dict)

    def document(self, artifact: str | None, inputs: str) -> dict[str, Any]:
        """The job JSON the runner reads, with paths as the device sees them."""
        return {"runtime": self.runtime, "artifact": artifact, "sha256": self.sha256, "inputs": inputs,
                "input_names": self.input_names, "batch": self.batch, "warmup": self.warmup,
                "iterations": self.iterations, "threads": self.threads, "options": self.options,
                "outputs": "outputs.npz", "result": "result.json"}


@dataclass
class JobResult:
    """What came back: the runner's result document and its outputs."""

    document: dict[str, Any]
    outputs: list[np.ndarray]

    @classmethod
    def read(cls, folder: Path) -> "JobResult":
        """Read result.json and outputs.npz that a runner wrote into ``folder``."""
        doc = json.loads((folder / "result.json").read_text())
        outputs: list[np.ndarray] = []
        if doc.get("ok") and (folder / "outputs.npz").exists():
            with np.load(folder / "outputs.npz", allow_pickle=False) as npz:
                outputs = [npz[f"out{i}"] for i in range(len(npz.files))]
        return cls(doc, outputs)


class MeasurementError(Exception):
    """A measurement that could not be taken; the message says why (it goes into the notes)."""


class Device(ABC):
    """A place artifacts run: this machine, an ssh board, an adb phone."""

    def __init__(self, name: str) -> None:
        self.name = name

    @abstractmethod
    def run_job(self, job: Job, workdir: Path) -> JobResult:
        """Run ``job`` with the runner on the device; raise MeasurementError when it fails."""

    def describe(self) -> str:
        """A short label for progress lines."""
        return self.name
