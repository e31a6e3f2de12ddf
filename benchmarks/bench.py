"""make bench: edgeship's artifacts against eager PyTorch, the runtimes' plain defaults and the
machine's own limit, measured side by side in one run on this machine.

For each model (the demo, resnet18, mobilenet_v3_large, a small transformer encoder) it builds
the host and android profiles with the real command (a cold build with an empty cache, then the
same build again unchanged), loads every artifact with the runtime that runs it, and times them
interleaved with eager PyTorch and the peers (ONNX Runtime default session on a plain
torch.onnx.export, ExecuTorch's documented XNNPACK flow, torch.compile). It prints one table of
ratios and writes benchmarks/results/latest.json. Nothing is asserted: the figures are printed.

    python benchmarks/bench.py [--models resnet18,encoder] [--rounds 5] [--processes 2]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import tomllib

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(HERE), str(REPO)]

from harness import interleaved, peak_fp32_gflops, peak_int8_gops  # noqa: E402

WORK = HERE / ".work"
LATEST = HERE / "results" / "latest.json"
MODELS = {"digitnet": REPO / "edgeship" / "demo" / "model.toml",
          "resnet18": HERE / "models" / "resnet18.toml",
          "mobilenet_v3_large": HERE / "models" / "mobilenet_v3_large.toml",
          "encoder": HERE / "models" / "encoder.toml"}
PROFILES = ("host", "android")
TOP1_BUDGET = 1.0     # points
SQNR_BUDGET = 20.0    # dB, where the evaluation data has no labels


def ensure_calibration(spec_path: Path) -> None:
    """Seeded uniform [0, 1) calibration samples for the benchmark models (random weights)."""
    spec = tomllib.loads(spec_path.read_text())
    rel = spec.get("data", {}).get("calibration")
    if rel is None or (spec_path.parent / rel).exists():
        return
    dest = spec_path.parent / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    shape = spec["inputs"][0]["shape"]
    np.savez(dest, x=np.random.default_rng(1).random((64, *shape[1:]), dtype=np.float32))


def build(spec: Path, profile: str, folder: Path) -> tuple[float, Path]:
    """One real build in its own folder (its own stage cache); returns wall seconds and output dir."""
    out = folder / profile
    cmd = [sys.executable, "-m", "edgeship", "build", "--target", profile, "--model", str(spec),
           "--out", str(out), "--quiet"]
    env = {k: v for k, v in os.environ.items() if k not in ("EDGESHIP_CACHE_DIR", "EDGESHIP_DB")}
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 3):  # 3: a gate failed; the artifacts and results are still there
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return seconds, out


def artifact_jobs(results, out: Path, seen: set[str], label: str) -> dict[str, tuple]:
    """Every artifact of a build that runs here, loaded as the device runner loads it."""
    from edgeship.lowering.backends import BACKENDS

    jobs = {}
    for row in results.variants[1:]:
        backend = BACKENDS.get(row.backend)
        if not row.file or row.sha256 in seen or backend.available(backend.parse_options({})) is not None:
            continue
        seen.add(row.sha256)
        options = backend.job_options(backend.parse_options(_options(results, row)), row.precision)
        acc = row.accuracy
        jobs[f"{label}/{row.name}"] = (
            ("harness:runner_loader", (backend.runtime, str(out / row.file), options, None)),
            {"backend": row.backend, "precision": row.precision, "quantization": row.quantization,
             "size_bytes": row.size_bytes, "top1_drop": acc.top1_drop if acc else None,
             "sqnr_db": acc.sqnr_db if acc else None, "identical": bool(acc and acc.max_abs_err == 0.0)})
    return jobs


def _options(results, row) -> dict:
    from edgeship.profile import load_profile

    return next(v.options for v in load_profile(results.target).variants if v.name == row.name)


def within_budget(info: dict) -> bool:
    """The benchmark's accuracy budget: 1 point of top-1, or 20 dB SQNR without labels."""
    if info.get("top1_drop") is not None:
        return info["top1_drop"] <= TOP1_BUDGET
    return bool(info.get("identical")) or (info.get("sqnr_db") or 0.0) >= SQNR_BUDGET


def peer_jobs(spec_path: Path, folder: Path) -> dict[str, tuple]:
    """The peers' artifacts, made here with their plain defaults, and how the workers load them."""
    import peers

    from edgeship.model import load_model
    from edgeship.spec import load_spec

    spec = load_spec(spec_path)
    model = load_model(spec)
    jobs = {"peer: torch.compile": (("peers:load_torch_compile", (spec.model_dump(mode="json"), str(spec.base_dir))),
                                    {"precision": "fp32"})}
    for name, make, load in (("peer: onnxruntime default", peers.make_ort_default, "peers:load_ort_default"),
                             ("peer: executorch xnnpack default", peers.make_executorch_default,
                              "peers:load_executorch_default")):
        try:
            path = make(model.module, model.example_inputs, folder)
        except Exception as e:  # a peer that cannot handle this model is reported, not fatal
            print(f"  {name} failed here: {type(e).__name__}: {str(e).splitlines()[0][:160]}", flush=True)
            continue
        jobs[name] = ((load, (str(path),)), {"precision": "fp32", "size_bytes": peers.size_of(path)})
    return jobs


def bench_model(name: str, spec_path: Path, peak: dict, rounds: int, block: int, processes: int) -> dict:
    from edgeship.model import count_flops, example_inputs, load_model
    from edgeship.results import Results
    from edgeship.spec import load_spec

    ensure_calibration(spec_path)
    folder = WORK / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    cost = {}
    for profile in PROFILES:
        cold, _ = build(spec_path, profile, folder)
        again, _ = build(spec_path, profile, folder)
        cost[profile] = {"cold_build_seconds": round(cold, 2), "rebuild_seconds": round(again, 2)}
        print(f"  {profile}: cold build {cold:.1f} s, unchanged re-build {again:.1f} s", flush=True)
    spec = load_spec(spec_path)
    model = load_model(spec)
    flops = count_flops(model.module, model.example_inputs)
    eager = {"spec": spec.model_dump(mode="json"), "base_dir": str(spec.base_dir), "trust_weights": False}
    jobs = {"eager": (("harness:runner_loader", ("eager", None, eager, None)), {"precision": "fp32"})}
    seen: set[str] = set()
    for profile in PROFILES:
        out = folder / profile
        jobs.update(artifact_jobs(Results.read(out / "results.json"), out, seen, profile))
    jobs.update(peer_jobs(spec_path, folder))
    inputs = [t.numpy() for t in example_inputs(spec)]
    spread: dict[str, float] = {}
    p50 = interleaved({n: job for n, (job, _) in jobs.items()}, inputs, rounds, block, processes, spread)
    summary = summarize({n: info for n, (_, info) in jobs.items()}, p50, flops, peak, cost)
    summary["process_spread"] = {n: round(v, 4) for n, v in spread.items()}
    return summary


def summarize(infos: dict, p50: dict, flops: int | None, peak: dict, cost: dict) -> dict:
    eager = p50["eager"]
    peer_rows = {n: p50[n] for n in infos if n.startswith("peer:") and p50.get(n)}
    best_peer = min(peer_rows, key=peer_rows.get) if peer_rows else None
    ort_size = infos.get("peer: onnxruntime default", {}).get("size_bytes")
    variants = {}
    for name, info in infos.items():
        if name == "eager" or name.startswith("peer:") or not p50.get(name):
            continue
        peak_key = "int8_gops" if info["precision"] == "int8" else "fp32_gflops"
        achieved = flops / (p50[name] / 1e3) / 1e9 if flops else None
        variants[name] = {**info, "p50_ms": p50[name], "speedup_vs_eager": eager / p50[name],
                          "vs_best_peer": peer_rows[best_peer] / p50[name] if best_peer else None,
                          "achieved_gflops": achieved,
                          "fraction_of_peak": achieved / peak[peak_key] if achieved else None,
                          "size_vs_ort_default": info["size_bytes"] / ort_size if ort_size else None,
                          "within_budget": within_budget(info)}
    ok = {k: v for k, v in variants.items() if v["within_budget"]}
    best = min(ok, key=lambda k: ok[k]["p50_ms"]) if ok else None
    return {"eager_p50_ms": eager, "flops": flops, "best_variant": best,
            "best_speedup_vs_eager": eager / p50[best] if best else None,
            "best_peer": best_peer, "best_peer_p50_ms": peer_rows.get(best_peer),
            "speedup_vs_best_peer": peer_rows[best_peer] / p50[best] if best and best_peer else None,
            "rebuild_seconds": cost["host"]["rebuild_seconds"],
            "cold_build_seconds": cost["host"]["cold_build_seconds"],
            "build_cost": cost, "peers": peer_rows, "variants": variants}


def print_table(results: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    peak = results["machine"]
    table = Table(title=f"make bench: ratios measured side by side (fp32 peak {peak['fp32_gflops']:.0f} GFLOP/s, "
                        f"int8 peak {peak['int8_gops']:.0f} GOP/s)", title_justify="left")
    for col in ("model", "variant", "p50 ms", "vs eager", "vs best peer", "of peak", "size vs ORT", "top-1 drop",
                "SQNR dB", "budget"):
        table.add_column(col, justify="left" if col in ("model", "variant") else "right")
    for model, m in results["models"].items():
        table.add_row(model, "eager", f"{m['eager_p50_ms']:.3f}", "1.00", "", "", "", "", "", "")
        for peer, value in m["peers"].items():
            table.add_row("", peer, f"{value:.3f}", f"{m['eager_p50_ms'] / value:.2f}", "", "", "", "", "", "")
        for vname, v in sorted(m["variants"].items(), key=lambda kv: kv[1]["p50_ms"]):
            star = " *" if vname == m["best_variant"] else ""
            table.add_row("", vname + star, f"{v['p50_ms']:.3f}", f"{v['speedup_vs_eager']:.2f}",
                          _fmt(v["vs_best_peer"]), _fmt(v["fraction_of_peak"], pct=True),
                          _fmt(v["size_vs_ort_default"]), _fmt(v["top1_drop"]), _fmt(v["sqnr_db"], 1),
                          "yes" if v["within_budget"] else "no")
        noise = max(m["process_spread"].values(), default=0.0)
        table.add_row("", f"noise: a candidate's worker processes differ by up to {100 * noise:.0f}% "
                          f"(median {100 * statistics.median(m['process_spread'].values() or [0.0]):.0f}%)",
                      "", "", "", "", "", "", "", "")
        table.add_row("", f"build: cold {m['cold_build_seconds']:.1f} s, "
                          f"unchanged re-build {m['rebuild_seconds']:.1f} s (host profile)",
                      "", "", "", "", "", "", "", "", end_section=True)
    Console(width=170).print(table)
    print("* best variant within budget (1 point of top-1, or 20 dB SQNR without labels)")


def _fmt(value, digits: int = 2, pct: bool = False) -> str:
    if value is None:
        return "-"
    return f"{100 * value:.1f}%" if pct else f"{value:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of: " + ", ".join(MODELS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--processes", type=int, default=2,
                        help="worker processes per candidate (their spread is printed as the noise floor)")
    parser.add_argument("--block", type=int, default=15, help="timed runs per candidate per round")
    args = parser.parse_args()
    from edgeship.cli import quiet_libraries

    quiet_libraries()
    started = time.perf_counter()
    peak = {"fp32_gflops": peak_fp32_gflops(), "int8_gops": peak_int8_gops(), "cpus": os.cpu_count()}
    print(f"machine: fp32 {peak['fp32_gflops']:.1f} GFLOP/s, int8 {peak['int8_gops']:.1f} GOP/s", flush=True)
    results = {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": peak, "models": {}}
    for name in args.models.split(","):
        print(f"{name}:", flush=True)
        results["models"][name] = bench_model(name, MODELS[name], peak, args.rounds, args.block, args.processes)
    peak_after = {"fp32_gflops": peak_fp32_gflops(), "int8_gops": peak_int8_gops()}
    results["machine"]["after"] = peak_after  # the limit measured again at the end: drift shows here
    results["seconds"] = round(time.perf_counter() - started, 1)
    LATEST.parent.mkdir(parents=True, exist_ok=True)
    tmp = LATEST.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=2) + "\n")
    tmp.replace(LATEST)
    print_table(results)
    print(f"wrote {LATEST.relative_to(REPO)} in {results['seconds']:.0f} s")


if __name__ == "__main__":
    main()
