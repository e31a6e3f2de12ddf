"""A real build for report and bundle tests: the tiny model timed on two local devices.

It goes through the command line as a user runs it: a devices.toml naming two local devices
(``cpu-a`` and ``cpu-b``, the same machine under two names), a profile with android and jetson
bundles, and one variant that cannot be built (so the build exits 3 and reports "not measured").
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, make_tiny_project, write_profile

DEVICES = ("cpu-a", "cpu-b")
LABELS = ("circle", "square", "triangle", "star")

VARIANTS = """
[[variants]]
name = "executorch-fp32"
backend = "executorch"

[[variants]]
name = "mobile-fp32"
backend = "pytorch-mobile"

[[variants]]
name = "onnx-fp32"
backend = "onnx"

[[variants]]
name = "tensorrt-fp16"
backend = "tensorrt"
precision = "fp16"

[[variants]]
name = "too-old"
backend = "pytorch-mobile"
options = { bytecode_version = 3 }

[bundle]
platforms = ["android", "jetson"]
output = "class scores (logits), one per line of labels.txt"
"""


def build_on_two_devices(root: Path) -> Path:
    """Build into ``root/out`` and return that folder; the build must exit 3 (too-old fails)."""
    project = make_tiny_project(root / "tiny")
    (project / "labels.txt").write_text("\n".join(LABELS) + "\n")
    spec = project / "model.toml"
    spec.write_text(spec.read_text().replace('weights = "tiny.pt"\n', 'weights = "tiny.pt"\nlabels = "labels.txt"\n'))
    devices = root / "devices.toml"
    devices.write_text("".join(f'[devices.{d}]\ntransport = "local"\n\n' for d in DEVICES))
    profile = write_profile(root, VARIANTS, name="twodev")
    out = root / "out"
    argv = ["build", "--target", str(profile), "--model", str(spec), "--out", str(out), "--devices", str(devices),
            *[a for d in DEVICES for a in ("--device", d)], "--db", f"sqlite:///{root / 'results.db'}", "--quiet"]
    proc = subprocess.run([sys.executable, "-m", "edgeship", *argv], cwd=root, capture_output=True, text=True,
                          timeout=900, env=_env())
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-3000:]
    return out


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(REPO)}


def results_with(p50: float = 1.0, created: str = "2026-01-01T00:00:00Z", accuracy=None, eager_accuracy=None):
    """A small results document without a build: eager and one onnx variant on ``host`` (model "m",
    target "t"), the onnx row measured at ``created`` with ``p50`` and ``accuracy``."""
    from edgeship.results import Latency, ModelInfo, Results, VariantResult

    def lat(p: float, acc) -> Latency:
        return Latency(device="host", runtime="r", warmup=1, iterations=4, p50_ms=p, mean_ms=p, measured_at=created,
                       accuracy=acc)

    eager = VariantResult(name="eager", backend="eager", precision="fp32", accuracy=eager_accuracy,
                          latency=[lat(2.0, eager_accuracy)])
    ort = VariantResult(name="ort", backend="onnx", precision="fp32", sha256="a" * 64, size_bytes=1000,
                        accuracy=accuracy, latency=[lat(p50, accuracy)])
    return Results(target="t", created=created, toolchain={}, variants=[eager, ort],
                   model=ModelInfo(name="m", entry="m:build", inputs=[], params=1))
