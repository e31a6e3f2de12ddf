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


# Markdown, HTML, math and rich markup in one value: what a hostile or careless results.json holds.
HOSTILE = ("x\n\n# All gates passed - download the signed build [here](https://evil.example/x.apk)\n\n"
           "<img src=x onerror=alert(1)> **bold** _em_ `code` ~~gone~~ $\\frac{a}{$ a | b [bold]r[/]\n"
           "1. item\n- item\n> quote\n---\n[ref]: https://evil.example/ \\")


def hostile_results(text: str = HOSTILE):
    """Results whose every string field holds ``text`` (ids included: a report renders what it is
    given), on two devices that measured the same artifact, one variant failed."""
    from edgeship.results import Accuracy, GateResult, Latency, Lowering, ModelInfo, Results, VariantResult

    acc = Accuracy(samples=8, top1=0.5, agreement=1.0, sqnr_db=40.0)

    def lat(device: str, p50: float) -> Latency:
        return Latency(device=device, runtime=text, warmup=1, iterations=4, p50_ms=p50, p90_ms=None, accuracy=acc,
                       measured_at="2026-01-01T00:00:00Z", notes=[text])

    eager = VariantResult(name="eager", backend="eager", precision="fp32", accuracy=acc,
                          latency=[lat(text, 2.0), lat("dev2", 2.0)])
    odd = VariantResult(name=text, backend=text, precision=text, sha256="ab`|" + "a" * 60, size_bytes=1000,
                        accuracy=acc, latency=[lat(text, 1.0), lat("dev2", 1.5)], notes=[text],
                        lowering=Lowering(seconds=1.0, notes=[text]), gates=GateResult(passed=False, failures=[text]))
    failed = VariantResult(name="failed", backend="onnx", precision="fp32", error=text)
    return Results(target=text, created=text, toolchain={text: text}, variants=[eager, odd, failed], notes=[text],
                   model=ModelInfo(name=text, entry="m:build", inputs=[], params=1))


def reused_results():
    """:func:`results_with` as a resumed build that used the stage cache leaves them: the onnx row
    from the stage cache (its note as pipeline/stagecache.py writes it), the eager row kept from the
    previous results.json by the scheduler's own ``reusable`` (build --resume); 250 dB, 0.001 ms."""
    from edgeship.devices.base import Job
    from edgeship.pipeline.schedule import ReuseKey, model_identity, reusable
    from edgeship.results import REUSED_FROM_CACHE, Accuracy

    acc = Accuracy(samples=8, top1=0.5, agreement=1.0, sqnr_db=250.0)
    results = results_with(p50=0.001, accuracy=acc, eager_accuracy=acc)
    for lat in (row.latency[0] for row in results.variants):
        lat.inputs_sha256, lat.reference_sha256 = "in", "ref"
    eager, ort = results.variants
    ort.latency[0].notes.append(f"{REUSED_FROM_CACHE} at 2026-01-02T00:00:00Z: measured 2020-01-01T00:00:00Z by "
                                "an earlier build on this machine")
    job = Job(runtime="eager", artifact=None, sha256=None, inputs=Path("x.npz"), input_names=["x"], batch=1,
              warmup=1, iterations=4, threads=None, timeout_s=10)
    kept, why = reusable(results, eager, "host", job, ReuseKey(model_identity(results.model), "in", "ref"))
    assert why == "reused", why
    eager.latency = [kept]
    return results
