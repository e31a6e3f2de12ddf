"""make bench-quant: what int8 costs and buys on each backend's own path, measured in one run.

For the demo (DigitNet, with its labelled evaluation data) and torchvision's resnet18 (seeded
random weights, no download; 64 seeded calibration images, SQNR on 32 others), it lowers the
variants `make target=android` and `make target=host` build, plus dynamic int8 and an x86-engine
PyTorch Mobile variant, with edgeship's own lowering code. It then prints, per model:

- each int8 artifact's size against its fp32 sibling (static: bound 0.27x; dynamic: no bound);
- top-1 drop (demo, bound 1.0 point), agreement and SQNR against the float model (resnet18:
  bound 25 dB);
- p50 latency of every artifact and of eager PyTorch, each loaded once in its own worker process
  and timed in interleaved rounds within this one run, with the int8/fp32 ratios the issue
  bounds (resnet18: ExecuTorch <= 0.55x, ONNX Runtime <= 0.6x).

Nothing is asserted; on a shared machine the latency ratios move from run to run.

    python benchmarks/quantization.py [--models digitnet,resnet18] [--rounds 7]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(HERE), str(REPO)]

from harness import interleaved  # noqa: E402

from edgeship import metrics  # noqa: E402
from edgeship.calibration import Dataset, load_dataset  # noqa: E402
from edgeship.lowering.capture import Capturer  # noqa: E402
from edgeship.model import LoadedModel, example_inputs, load_model  # noqa: E402
from edgeship.pipeline.lower import Lowered, lower_variant  # noqa: E402
from edgeship.profile import Variant, load_profile  # noqa: E402
from edgeship.quantize.settings import QuantizationSettings  # noqa: E402
from edgeship.spec import ModelSpec, demo_spec_path, load_spec  # noqa: E402

BOUNDS = {"size": 0.27, "top1_drop": 1.0, "sqnr_db": 25.0, "executorch": 0.55, "onnx": 0.6}
EXTRA = [  # beyond the target profiles: dynamic int8, and PyTorch Mobile on the engine this CPU runs
    {"name": "mobile-int8-x86", "backend": "pytorch-mobile", "precision": "int8", "options": {"engine": "x86"}},
    {"name": "mobile-dynamic", "backend": "pytorch-mobile", "precision": "int8", "quantization": {"scheme": "dynamic"}},
    {"name": "executorch-dynamic", "backend": "executorch", "precision": "int8", "quantization": {"scheme": "dynamic"}},
    {"name": "onnx-dynamic", "backend": "onnx", "precision": "int8", "quantization": {"scheme": "dynamic"}},
]
FP32_SIBLING = {"executorch": "executorch-xnnpack-fp32", "onnx": "onnx-fp32", "pytorch-mobile": "mobile-fp32"}


def variants(samples: int) -> tuple[object, list[Variant]]:
    """The android and host profiles' variants (each name once) plus EXTRA, calibrated on ``samples``."""
    profile = load_profile("android")
    chosen = {v.name: v for v in load_profile("host").variants + profile.variants}  # android's mobile-fp32 (v7)
    chosen.update({e["name"]: Variant(**e) for e in EXTRA})
    for v in chosen.values():
        if v.precision == "int8":
            v.quantization = (v.quantization or QuantizationSettings()).model_copy(
                update={"samples": samples, "seed": 0})
    return profile, list(chosen.values())


def demo() -> tuple[LoadedModel, Dataset, Dataset, int]:
    spec = load_spec(demo_spec_path())
    return (load_model(spec), load_dataset(spec.data.calibration, spec, "calibration"),
            load_dataset(spec.data.evaluation, spec, "evaluation"), 128)


def resnet18() -> tuple[LoadedModel, Dataset, Dataset, int]:
    """Seeded random weights; inputs are uniform images normalized with ImageNet's mean and std."""
    import torch
    import torchvision

    torch.manual_seed(0)
    module = torchvision.models.resnet18(weights=None).eval()
    spec = ModelSpec(name="resnet18", entry="torchvision.models:resnet18",
                     inputs=[{"name": "input", "shape": [1, 3, 224, 224]}])
    model = LoadedModel(spec, module, example_inputs(spec), None, sum(p.numel() for p in module.parameters()))
    mean, std = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)
    rng = np.random.default_rng(0)
    images = ((rng.random((96, 224, 224, 3), dtype=np.float32) - mean) / std).transpose(0, 3, 1, 2).copy()
    return (model, Dataset({"input": images[:64]}, None, "64 images"),
            Dataset({"input": images[64:]}, None, "32 images"), 64)


def lower_all(model: LoadedModel, calib: Dataset, samples: int, work: Path) -> list[Lowered]:
    profile, chosen = variants(samples)
    capturer, out = Capturer(model), []
    for variant in chosen:
        start = time.perf_counter()
        item = lower_variant(profile, variant, capturer, work, calibration=lambda: calib)
        print(f"  lowered {variant.name:26s} {time.perf_counter() - start:6.1f} s"
              + (f"  FAILED: {item.error}" if item.error else ""), flush=True)
        out.append(item)
    return [item for item in out if item.artifact is not None]


def predictor(item: Lowered):
    return item.backend.load(item.artifact.path, item.options)


def accuracy(model: LoadedModel, items: list[Lowered], data: Dataset) -> dict[str, dict]:
    import torch

    x = next(iter(data.inputs.values()))
    with torch.no_grad():
        ref = np.concatenate([model.module(torch.from_numpy(x[i:i + 1])).numpy() for i in range(len(x))])
    out = {}
    for item in items:
        predict = predictor(item)
        got = np.concatenate([predict([x[i:i + 1]])[0] for i in range(len(x))])
        out[item.variant.name] = metrics.accuracy(ref, got, data.labels)
    return out


def latency(model: LoadedModel, items: list[Lowered], rounds: int, block: int,
            threads: int | None) -> dict[str, float]:
    """p50 (ms) per artifact and for eager PyTorch, each in its own worker process, interleaved
    (benchmarks/harness.py)."""
    loader = "harness:runner_loader"
    jobs = {"eager": (loader, ("eager", None, {"spec": model.spec.model_dump(mode="json"),
                                               "base_dir": str(model.spec.base_dir), "trust_weights": False}, threads))}
    for item in items:
        jobs[item.variant.name] = (loader, (item.backend.runtime, str(item.artifact.path),
                                            item.backend.job_options(item.options, item.variant.precision), threads))
    return interleaved(jobs, [model.example_inputs[0].numpy()], rounds, block)


def report(name: str, items: list[Lowered], acc: dict[str, dict], p50: dict[str, float]) -> None:
    sizes = {i.variant.name: i.artifact.path.stat().st_size for i in items}
    print(f"{name}: eager p50 {p50['eager']:.3f} ms")
    print(f"  {'variant':26s} {'quant':8s} {'size':>10s} {'x fp32':>7s} {'top1 drop':>9s} {'agree':>6s} "
          f"{'SQNR dB':>8s} {'p50 ms':>8s} {'x fp32':>7s}")
    for item in items:
        v, a = item.variant, acc[item.variant.name]
        sibling = FP32_SIBLING[v.backend]
        scheme = "none" if v.precision == "fp32" else (v.quantization.scheme if v.quantization else "static")
        ratio = sizes[v.name] / sizes[sibling] if v.precision == "int8" and sibling in sizes else None
        speed = p50[v.name] / p50[sibling] if v.precision == "int8" and sibling in p50 else None
        drop = "-" if a["top1_drop"] is None else f"{a['top1_drop']:.2f}"
        sqnr = "exact" if a["sqnr_db"] is None else f"{a['sqnr_db']:.1f}"
        print(f"  {v.name:26s} {scheme:8s} {sizes[v.name] / 1024:8.1f}Ki {_r(ratio):>7s} {drop:>9s} "
              f"{a['agreement']:6.3f} {sqnr:>8s} {p50[v.name]:8.3f} {_r(speed):>7s}")
    print(figures(items, acc, p50, sizes, name))


def figures(items: list[Lowered], acc: dict, p50: dict, sizes: dict, model: str) -> str:
    """The issue's figures for this model, each with its bound and whether this run met it."""
    lines = []
    for item in items:
        v = item.variant
        if v.precision != "int8" or (v.quantization and v.quantization.scheme != "static"):
            continue
        ratio = sizes[v.name] / sizes[FP32_SIBLING[v.backend]]
        lines.append(_check(f"{v.name} size / fp32", ratio, BOUNDS["size"], "<=", "x"))
        if model == "digitnet":
            lines.append(_check(f"{v.name} top-1 drop", acc[v.name]["top1_drop"], BOUNDS["top1_drop"], "<=", " points"))
        else:
            lines.append(_check(f"{v.name} SQNR", acc[v.name]["sqnr_db"], BOUNDS["sqnr_db"], ">=", " dB"))
    for backend, (int8, fp32) in {"executorch": ("executorch-xnnpack-int8", "executorch-xnnpack-fp32"),
                                  "onnx": ("onnx-int8", "onnx-fp32")}.items():
        if model == "resnet18" and int8 in p50 and fp32 in p50:  # the issue bounds speed on resnet18
            lines.append(_check(f"{int8} p50 / {fp32} p50", p50[int8] / p50[fp32], BOUNDS[backend], "<=", "x"))
    return "  figures:\n" + "\n".join(lines)


def _check(label: str, value: float | None, bound: float, op: str, unit: str) -> str:
    if value is None:
        return f"    {label:58s} not measured"
    met = value <= bound if op == "<=" else value >= bound
    return f"    {label:58s} {value:7.3f}{unit}  (bound {op} {bound:g}{unit}: {'met' if met else 'MISSED'})"


def _r(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="digitnet,resnet18")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--block", type=int, default=20, help="timed runs per candidate per round")
    parser.add_argument("--threads", type=int, default=None, help="runtime threads (default: each runtime's own)")
    args = parser.parse_args()
    from edgeship.cli import quiet_libraries

    quiet_libraries()
    for name in args.models.split(","):
        model, calib, evaluation, samples = {"digitnet": demo, "resnet18": resnet18}[name]()
        print(f"{name}: lowering ({samples} calibration samples)", flush=True)
        with tempfile.TemporaryDirectory(prefix=f"bench-quant-{name}-") as work:
            items = lower_all(model, calib, samples, Path(work))
            scores = accuracy(model, items, evaluation)
            load = os.getloadavg()[0]
            p50 = latency(model, items, args.rounds, args.block, args.threads)
            print(f"\n{name}: load average {load:.2f} before timing, {os.getloadavg()[0]:.2f} after "
                  f"({os.cpu_count()} cores; threads: {args.threads or 'runtime default'})")
            report(name, items, scores, p50)


if __name__ == "__main__":
    main()
