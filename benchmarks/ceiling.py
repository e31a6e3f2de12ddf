"""How fast a model's int8 inference could be on this machine: its convolutions and linear layers as
int8 GEMMs at their own shapes, each timed with the fastest int8 GEMM kernel here, against eager
PyTorch fp32 in the same run.

The headline "int8 GEMM peak" is measured on large square matrices (n = 1024, 2048); a model's
layers are smaller and narrower (resnet18 at batch 1: M = 3136 output pixels by N = 64 channels by
K = 576 in layer1, M = 49 in layer4), and those shapes reach less of the peak. Summing each layer's
best GEMM time gives the time the GEMM work alone needs, before im2col, requantization, pooling and
the residual adds, so eager time / that sum is an upper bound on any int8 variant's speed-up over
eager: a figure above it cannot be reached on this machine with these kernels.

Kernels: PyTorch's x86 quantized linear (fbgemm, per-tensor weights) and ONNX Runtime's
MatMulInteger (MLAS, uint8 x int8), the two that define the peak in harness.peak_int8_gops; each
shape takes the faster. Each kernel family and eager are measured in their own spawned process
(a spinning thread pool slows the next kernel), in alternating rounds; the ceiling is the median of
the rounds' eager time over GEMM sum, so a busy moment on the machine slows both sides of a round.

    python benchmarks/ceiling.py [--models resnet18,mobilenet_v3_large]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from harness import _best, _ort_gemm, fbgemm_gemm, peak_int8_gops  # noqa: E402

REPEATS = 20
RESULT = HERE / "results" / "ceiling.json"


def gemm_shapes(name: str) -> list[dict]:
    """Every Conv2d and Linear of the bench model as GEMMs: M output pixels (times the batch), K the
    reduction (in-channels x kernel area), N out-channels. Grouped convolutions are left out."""
    import models.zoo as zoo
    import torch

    model = getattr(zoo, name)()
    shapes: list[dict] = []
    skipped: list[str] = []

    def hook(module, inputs, output):
        if isinstance(module, torch.nn.Conv2d):
            g = module.groups
            if g > 1:   # depthwise / grouped: direct kernels, not GEMMs; left out (the bound only rises)
                skipped.append(names[module])
                return
            k = module.in_channels * module.kernel_size[0] * module.kernel_size[1]
            m = output.shape[0] * output.shape[2] * output.shape[3]
            shapes.append({"layer": names[module], "kind": "conv", "m": m, "k": k, "n": module.out_channels})
        else:
            shapes.append({"layer": names[module], "kind": "linear", "m": inputs[0].numel() // module.in_features,
                           "k": module.in_features, "n": module.out_features})

    names = {m: n for n, m in model.named_modules()}
    for m in model.modules():
        if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
            m.register_forward_hook(hook)
    with torch.no_grad():
        model(torch.rand(1, 3, 224, 224))
    if skipped:
        print(f"  {name}: {len(skipped)} grouped convolutions are not GEMMs and are left out of the sum")
    return shapes


def eager_ms(name: str, threads: int) -> float:
    """Eager fp32 p50 at batch 1, as make bench's eager candidate runs it."""
    import models.zoo as zoo
    import torch

    torch.set_num_threads(threads)
    model, x = getattr(zoo, name)(), torch.rand(1, 3, 224, 224)
    times = []
    with torch.inference_mode():
        for i in range(60):
            t0 = time.perf_counter()
            model(x)
            if i >= 10:
                times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def fbgemm_ms(shapes: list[dict], stat: str = "best") -> list[float]:
    """Each shape's best (or median: ``stat``) time (ms) with PyTorch's x86 quantized linear."""
    return [_time_ms(fbgemm_gemm(s["m"], s["k"], s["n"]), stat) for s in shapes]


def ort_ms(shapes: list[dict], stat: str = "best") -> list[float]:
    """Each shape's best (or median: ``stat``) time (ms) with ONNX Runtime's MatMulInteger."""
    return [_time_ms(_ort_gemm(s["m"], s["k"], s["n"], "int8"), stat) for s in shapes]


def _time_ms(run, stat: str = "best") -> float:
    run()
    if stat == "best":
        return _best(run, REPEATS) * 1e3
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def layer_gemm_ms(shapes: list[dict], rounds: int, stat: str = "median") -> list[dict]:
    """Each layer's GEMM-only time (ms): both int8 kernels (fbgemm, ORT's MLAS), each in its own
    spawned process at its default threads, in ``rounds`` alternating rounds; per layer the faster
    kernel's ``stat`` (median or best of REPEATS runs), then the median over the rounds and over the
    layers of the same shape (one GEMM)."""
    context = multiprocessing.get_context("spawn")
    jobs = {"fbgemm": fbgemm_ms, "ort": ort_ms}
    pools = {key: ProcessPoolExecutor(1, mp_context=context) for key in jobs}
    got: dict[str, list[list[float]]] = {key: [] for key in jobs}
    try:
        for _ in range(rounds):
            for key, fn in jobs.items():
                got[key].append(pools[key].submit(fn, shapes, stat).result())
    finally:
        for pool in pools.values():
            pool.shutdown()
    same: dict[tuple, list[int]] = {}   # layers of one shape: one GEMM, its runs pooled
    for i, s in enumerate(shapes):
        same.setdefault((s["m"], s["k"], s["n"]), []).append(i)
    rows = []
    for s in shapes:
        pooled = same[s["m"], s["k"], s["n"]]
        per_kernel = {key: statistics.median(r[j] for r in got[key] for j in pooled) for key in jobs}
        kernel = min(per_kernel, key=per_kernel.get)
        rows.append({**s, "fbgemm_ms": per_kernel["fbgemm"], "ort_ms": per_kernel["ort"],
                     "gemm_ms": per_kernel[kernel], "kernel": kernel})
    return rows


def ceiling(name: str, threads: int, rounds: int) -> dict:
    """Eager and both GEMM kernels, each in its own process, in ``rounds`` alternating rounds: each
    round's ceiling is that round's eager time over its GEMM sum (a busy moment slows both)."""
    shapes = gemm_shapes(name)
    context = multiprocessing.get_context("spawn")
    jobs = {"eager_ms": (eager_ms, (name, threads)), "fbgemm": (fbgemm_ms, (shapes,)), "ort": (ort_ms, (shapes,))}
    pools = {key: ProcessPoolExecutor(1, mp_context=context) for key in jobs}
    per_round = []
    try:
        for _ in range(rounds):
            got = {key: pools[key].submit(fn, *arg).result() for key, (fn, arg) in jobs.items()}
            best = [min(a, b) for a, b in zip(got["fbgemm"], got["ort"])]
            per_round.append({"eager_ms": got["eager_ms"], "gemm_ms": sum(best), "best_ms": best,
                              "fbgemm": got["fbgemm"], "ort": got["ort"]})
        with ProcessPoolExecutor(1, mp_context=context) as pool:
            peak = pool.submit(peak_int8_gops).result()
    finally:
        for pool in pools.values():
            pool.shutdown()
    ops = 0
    for i, s in enumerate(shapes):
        s.update(ops=2 * s["m"] * s["k"] * s["n"], fbgemm_ms=min(r["fbgemm"][i] for r in per_round),
                 ort_ms=min(r["ort"][i] for r in per_round))
        s["best_ms"] = min(s["fbgemm_ms"], s["ort_ms"])
        s["gops"] = s["ops"] / (s["best_ms"] / 1e3) / 1e9
        ops += s["ops"]
    ceilings = sorted(r["eager_ms"] / r["gemm_ms"] for r in per_round)
    eager = statistics.median(r["eager_ms"] for r in per_round)
    gemm_ms = statistics.median(r["gemm_ms"] for r in per_round)
    return {"threads": threads, "rounds": rounds, "eager_ms": eager, "gemm_ops": ops, "gemm_ms": gemm_ms,
            "gemm_gops": ops / (gemm_ms / 1e3) / 1e9, "peak_int8_gops": peak,
            "ceiling_speedup_vs_eager": statistics.median(ceilings), "ceiling_range": [ceilings[0], ceilings[-1]],
            "ceiling_at_square_peak": eager / (ops / peak / 1e6),
            "per_round": [{k: r[k] for k in ("eager_ms", "gemm_ms")} for r in per_round], "layers": shapes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from edgeship.cli import quiet_libraries

    quiet_libraries()
    results = {}
    for name in args.models.split(","):
        r = results[name] = ceiling(name, args.threads, args.rounds)
        worst = sorted(r["layers"], key=lambda s: s["gops"])[:3]
        print(f"{name}: eager {r['eager_ms']:.2f} ms; {len(r['layers'])} GEMMs, {r['gemm_ops'] / 1e9:.2f} GOP, "
              f"{r['gemm_ms']:.2f} ms at their own shapes = {r['gemm_gops']:.0f} GOP/s "
              f"({100 * r['gemm_gops'] / r['peak_int8_gops']:.0f}% of the {r['peak_int8_gops']:.0f} GOP/s square peak)")
        low, high = r["ceiling_range"]
        print(f"  int8 ceiling (GEMMs alone, nothing else): {r['ceiling_speedup_vs_eager']:.2f}x eager "
              f"(rounds {low:.2f}-{high:.2f}); "
              f"at the square peak it would be {r['ceiling_at_square_peak']:.2f}x")
        for s in worst:
            print(f"  slowest per op: {s['layer']} (M {s['m']}, K {s['k']}, N {s['n']}): "
                  f"{s['gops']:.0f} GOP/s")
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps({"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                  "models": results}, indent=2) + "\n")
    print(f"wrote {RESULT.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
