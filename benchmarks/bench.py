"""make bench: edgeship's artifacts against eager PyTorch, the runtimes' own defaults and the
machine's own limit, measured side by side in one run on this machine.

For each model (the demo, resnet18, mobilenet_v3_large, a small transformer encoder) it builds
the host, android, linux and x86 profiles (linux: the AOTInductor .pt2 and TorchScript .pt that
LibTorch C++ runs; x86: OpenVINO IR in fp32, bf16, fp16 and int8 by NNCF, beside ONNX Runtime fp32
and int8) with the real command (a cold build with an empty cache, then the same build again
unchanged), loads every artifact with edgeship's own device runner for its runtime (OpenVINO's
compiled with the inference precision its IR records, LATENCY hint; every runtime at its own
default thread count, all cores here), and times them interleaved with eager PyTorch and the peers,
each in its own worker processes (benchmarks/harness.py). Peers, per precision
(benchmarks/peers.py): fp32, ONNX Runtime's default session on a plain torch.onnx.export,
ExecuTorch's documented XNNPACK flow, torch.compile, and OpenVINO's documented defaults
(convert_model on torch.export, save_model's defaults, compile_model(model, "CPU") with no
configuration); int8, ONNX Runtime's quantize_static, ExecuTorch's PT2E XNNPACK flow and
nncf.quantize ("peer: nncf default ptq"), all at their defaults and on the calibration samples
edgeship's int8 variants use. A peer is compared in the precision it computes in: the OpenVINO
default peer's plugin reads back what it compiled for, and on a CPU with AVX512-BF16 or AMX that is
bf16, so it is a bf16 peer there (its row says so), compared with edgeship's openvino-bf16.

Accuracy is judged on evaluation data apart from the calibration data (the random-weight models:
another seed and another distribution; the demo: held-out digits), against one budget for every
candidate: top-1 within 1 point where there are labels, else 25 dB SQNR against the float model.
Headline ratios compare like with like: the fastest fp32 variant with the fastest fp32 peer, the
fastest int8 variant with the fastest int8 peer, the fastest bf16 variant with the fastest bf16 peer
where there are bf16 candidates (all inside the budget), each with a sign-test interval over the
rounds (benchmarks/stats.py); an interval that holds 1.0 is a tie (≈). Rounds are added where a
headline interval (or an OpenVINO figure's) is still wider than 6% and the rounds so far predict
that more can narrow it (headline.refine). Byte-identical artifacts are timed once.

Each candidate's worker processes are fresh, and load one at a time, so each also measures the
candidate's cold start (benchmarks/harness.py, ``cold_start``): the runtime's import, the load, the
first inference on the timed inputs, and the peak resident memory after the warmup, absolute and
over the process's own baseline taken before the import; per row the median over its processes
(``load_ms``, ``first_inference_ms``, ``peak_rss_mb``, ``rss_over_baseline_mb``, ...) and, in
``cold_start``, their range. A third table prints them, each runtime's candidates side by side,
and per model which candidate starts fastest (load + first inference) and which holds least memory.
It prints one table, then per model and precision each runtime's fastest candidate inside the
budget side by side (which of OpenVINO, ONNX Runtime, ExecuTorch and the others is fastest:
``by_runtime``), then the OpenVINO figures of issue 16 (int8 p50 over fp32 p50, int8 against the
NNCF-defaults peer and against eager, the int8, bf16 and fp32 SQNR: ``openvino``, each beside its
target), then the cold starts (``cold``), and writes benchmarks/results/latest.json (or ``--out``).
Nothing is asserted: the figures are printed.

For the demo and resnet18 (``--web``) the web profile is built too and its variants are timed in
Chromium, at 1 and 2 threads, beside native ONNX Runtime and the onnxruntime-web peer
(benchmarks/web.py); a second table prints those rows.

    python benchmarks/bench.py [--models resnet18,encoder] [--profiles host,x86] [--rounds 6] [--web ''] [--out F]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import tomllib

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(HERE), str(REPO)]

from candidates import candidates_of  # noqa: E402
from harness import Timing, machine_peaks  # noqa: E402
from headline import print_table, refine, summarize, use_peaks  # noqa: E402

from web import print_web  # noqa: E402

WORK = HERE / ".work"
LATEST = HERE / "results" / "latest.json"
MODELS = {"digitnet": REPO / "edgeship" / "demo" / "model.toml",
          "resnet18": HERE / "models" / "resnet18.toml",
          "mobilenet_v3_large": HERE / "models" / "mobilenet_v3_large.toml",
          "encoder": HERE / "models" / "encoder.toml"}
PROFILES = ("host", "android", "linux", "x86")
CALIBRATION_SAMPLES, EVALUATION_SAMPLES = 64, 32
BUILDS = "builds.json"   # in a model's work folder: its spec and each profile's build cost


def ensure_data(spec_path: Path) -> None:
    """The random-weight models' data, when missing: calibration from seeded uniform [0, 1), and
    evaluation from another seed and another distribution on the same support: normal (mean 0.5,
    sd 0.25) clipped to [0, 1], as images are. (Unclipped, 4.6% of the values lay outside the range
    the inputs were calibrated on, and every int8 candidate, edgeship's and the peers', read the
    same 18.2 dB on resnet18: the clipping at the first quantize said nothing about the quantizers.)"""
    spec = tomllib.loads(spec_path.read_text())
    shape = spec["inputs"][0]["shape"][1:]
    draws = {"calibration": lambda rng: rng.random((CALIBRATION_SAMPLES, *shape), dtype=np.float32),
             "evaluation": lambda rng: np.clip(rng.normal(0.5, 0.25, (EVALUATION_SAMPLES, *shape)), 0, 1
                                               ).astype(np.float32)}
    for seed, (role, draw) in enumerate(draws.items(), start=1):
        rel = spec.get("data", {}).get(role)
        if rel is None or (spec_path.parent / rel).exists():
            continue
        dest = spec_path.parent / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        np.savez(dest, x=draw(np.random.default_rng(seed)))


def build(spec: Path, profile: str, folder: Path) -> tuple[float, Path]:
    """One real build in its own folder (its own stage cache); returns wall seconds and output dir."""
    out = folder / Path(profile).stem  # a profile name, or a profile file
    cmd = [sys.executable, "-m", "edgeship", "build", "--target", profile, "--model", str(spec),
           "--out", str(out), "--quiet"]
    env = {k: v for k, v in os.environ.items() if k not in ("EDGESHIP_CACHE_DIR", "EDGESHIP_DB")}
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 3):  # 3: a gate failed; the artifacts and results are still there
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return seconds, out


def bench_model(name: str, spec_path: Path, args: argparse.Namespace) -> dict:
    """Build, make the peers, time everything interleaved, and summarize one model."""
    ensure_data(spec_path)
    folder = WORK / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    cost = {}
    for profile in args.profiles:
        cold, _ = build(spec_path, profile, folder)
        again, _ = build(spec_path, profile, folder)
        cost[profile] = {"cold_build_seconds": round(cold, 2), "rebuild_seconds": round(again, 2)}
        print(f"  {profile}: cold build {cold:.1f} s, unchanged re-build {again:.1f} s", flush=True)
    # what trained.py (the end of make bench) needs to take these builds instead of making them again
    (folder / BUILDS).write_text(json.dumps({"spec": str(spec_path.resolve()), "build_cost": cost}, indent=1))
    started = time.perf_counter()
    found = candidates_of(spec_path, folder, args.profiles)
    peers_seconds = time.perf_counter() - started
    timed = {n: c["job"] for n, c in found.candidates.items() if c.get("same_as") is None}
    started = time.perf_counter()
    timing = Timing(timed, found.inputs, args.processes, cold_only=own_loaders(found.candidates))
    loads_seconds = time.perf_counter() - started
    try:
        timing.run(args.rounds, args.block)
        refine(timing, found.candidates, args.block, args.max_rounds)
        summary = summarize(found, timing, cost)
    finally:
        timing.close()
    if name in args.web_models:
        summary["web"] = bench_web(spec_path, folder, found, args)
    builds = sum(c["cold_build_seconds"] + c["rebuild_seconds"] for c in cost.values())
    summary["seconds"] = {"builds": round(builds, 1),
                          "peers_and_accuracy": round(peers_seconds, 1),
                          "timing": round(time.perf_counter() - started, 1), "loads": round(loads_seconds, 1),
                          "rounds": len(timing.log)}
    print(f"  peers made and judged in {peers_seconds:.0f} s; {len(timed)} candidates timed in "
          f"{summary['seconds']['timing']:.0f} s (their workers loaded one at a time in {loads_seconds:.0f} s, "
          f"then {len(timing.log)} rounds)", flush=True)
    return summary


def own_loaders(candidates: dict[str, dict]) -> dict[str, tuple[str, tuple]]:
    """The jobs of byte-identical files timed as another candidate whose loader differs (a peer's
    against edgeship's runner): the same bytes in the same runtime time the same, but the loaders
    import and hold different things, so their cold start is measured apart."""
    return {name: c["job"] for name, c in candidates.items()
            if c.get("same_as") and c["job"][0] != candidates[c["same_as"]]["job"][0]}


def bench_web(spec_path: Path, folder: Path, found: Any, args: argparse.Namespace) -> dict:
    """The web profile built, then its variants in Chromium beside native ONNX Runtime and the
    onnxruntime-web peer, at 1 and 2 threads, interleaved (benchmarks/web.py)."""
    from edgeship.devices.browser import missing_setup
    from edgeship.spec import load_spec
    from web import web_candidates, web_figures

    why = missing_setup()
    if why:
        print(f"  web: not measured here: {why}", flush=True)
        return {"not_measured": why}
    cold, out = build(spec_path, "web", folder)
    again, _ = build(spec_path, "web", folder)
    print(f"  web: cold build {cold:.1f} s (measured in Chromium), unchanged re-build {again:.1f} s", flush=True)
    peer = found.candidates.get("peer: onnxruntime default")
    rows = web_candidates(load_spec(spec_path), out, Path(peer["job"][1][0]) if peer else None, folder)
    started = time.perf_counter()
    timing = Timing({n: c["job"] for n, c in rows.items()}, found.inputs, 1)
    try:
        timing.run(args.rounds, args.block)
        figures = web_figures(rows, timing)
    finally:
        timing.close()
    figures["build_cost"] = {"cold_build_seconds": round(cold, 2), "rebuild_seconds": round(again, 2)}
    figures["seconds"] = round(time.perf_counter() - started, 1)
    print(f"  web: {len(rows)} candidates timed in {figures['seconds']:.0f} s", flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of: " + ", ".join(MODELS))
    parser.add_argument("--profiles", default=",".join(PROFILES),
                        help="target profiles to build (default: " + ",".join(PROFILES) + ")")
    parser.add_argument("--rounds", type=int, default=6,
                        help="interleaved rounds for every candidate (6: the fewest whose sign-test interval, "
                             "the smallest to the largest ratio, reaches 95%%; 7 and 8 give the same kind)")
    parser.add_argument("--max-rounds", type=int, default=15,
                        help="rounds a headline comparison may get in all while its interval is still wide")
    parser.add_argument("--processes", type=int, default=2,
                        help="worker processes per candidate (their spread is printed as the noise floor)")
    parser.add_argument("--block", type=int, default=15, help="timed runs per candidate per round")
    parser.add_argument("--web", default="digitnet,resnet18",
                        help="models whose web profile is built and timed in Chromium too ('' for none)")
    parser.add_argument("--out", type=Path, default=LATEST,
                        help=f"where the results go (default: {LATEST.relative_to(REPO)})")
    args = parser.parse_args()
    args.profiles = args.profiles.split(",")
    args.web_models = [m for m in args.web.split(",") if m]
    from edgeship.cli import quiet_libraries

    quiet_libraries()
    started = time.perf_counter()
    peak = {**machine_peaks(), "cpus": os.cpu_count(), "cpu": _cpu()}
    print(f"machine: {peak['cpu']['model']}; fp32 {peak['fp32_gflops']:.1f} GFLOP/s, "
          f"int8 {peak['int8_gops']:.1f} GOP/s", flush=True)
    results = {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": peak,
               "settings": {"profiles": args.profiles, "rounds": args.rounds, "max_rounds": args.max_rounds,
                            "processes": args.processes, "block": args.block}, "models": {}}
    for name in args.models.split(","):
        print(f"{name}:", flush=True)
        results["models"][name] = bench_model(name, MODELS[name], args)
    results["machine"]["after"] = machine_peaks()   # drift shows here
    use_peaks(results)
    results["seconds"] = round(time.perf_counter() - started, 1)
    out = args.out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=2) + "\n")
    tmp.replace(out)
    print_table(results)
    print_web(results)
    print(f"wrote {out.relative_to(REPO) if out.is_relative_to(REPO) else out} in {results['seconds']:.0f} s")


def _cpu() -> dict:
    """This machine's CPU as edgeship's runner reports it (model, architecture, int8-relevant flags)."""
    from edgeship.devices.cpu import cpu_facts

    facts = cpu_facts()
    return {"model": facts.get("model"), "arch": facts.get("arch"), "flags": facts.get("flags")}


if __name__ == "__main__":
    main()
