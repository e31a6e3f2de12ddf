"""make bench: edgeship's artifacts against eager PyTorch, the runtimes' own defaults and the
machine's own limit, measured side by side in one run on this machine.

For each model (the demo, resnet18, mobilenet_v3_large and all-MiniLM-L6-v2, the two trained ones
first and last; the random-weight transformer encoder with ``--models encoder``) it builds the
host, android, linux and x86 profiles (linux: the AOTInductor .pt2 and TorchScript .pt that
LibTorch C++ runs; x86: OpenVINO IR in fp32, bf16, fp16 and int8 by NNCF, beside ONNX Runtime fp32
and int8) with the real command (a cold build with empty caches, edgeship's and Inductor's, then
the same build again unchanged), loads every artifact with edgeship's own device runner for its runtime (OpenVINO's
compiled with the inference precision its IR records, LATENCY hint; every runtime at its own
default thread count, all cores here), and times them interleaved with eager PyTorch and the peers,
each in its own worker processes (benchmarks/harness.py).

It runs in two phases. Phase 1 makes things, one model after another: each model's builds (its
profiles one after another in its own folder and stage cache; each build's wall seconds and its CPU
seconds, ``cold_build_cpu_seconds``, its own and its runners'), its peers and its web build. Two
models' builds side by side were tried and were slower on 2 cores, as a build already keeps more
than one core busy (mobilenet_v3_large's host and android builds took 182 and 348 s beside MiniLM's
host build, 416 s: 12 min for what takes about 8 one after another). Phase 2 times, one model at a
time, alone on the machine. The two trained models' rows
(task figures, p50, int8 over its fp32 sibling) are read from the same builds and rounds into
benchmarks/results/trained.json, as benchmarks/trained.py (make bench-trained) makes them on its own.

Peers, per precision (benchmarks/peers.py): fp32, ONNX Runtime's default session on a plain
torch.onnx.export, ExecuTorch's documented XNNPACK flow, torch.compile, and OpenVINO's documented
defaults (convert_model on torch.export, save_model's defaults, compile_model(model, "CPU") with no
configuration); int8, ONNX Runtime's quantize_static, ExecuTorch's PT2E XNNPACK flow and
nncf.quantize ("peer: nncf default ptq"), all at their defaults and on the calibration samples
edgeship's int8 variants use. A peer is compared in the precision it computes in: the OpenVINO
default peer's plugin reads back what it compiled for, and on a CPU with AVX512-BF16 or AMX that is
bf16, so it is a bf16 peer there (its row says so), compared with edgeship's openvino-bf16.

Accuracy is judged on evaluation data apart from the calibration data (the random-weight models:
another seed and another distribution; the demo: held-out digits), against one budget for every
candidate: top-1 within 1 point where there are class labels, else 25 dB SQNR against the float
model (MiniLM's too: its task figures, cosine and neighbours, are trained.json's).
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

    python benchmarks/bench.py [--models resnet18,encoder] [--profiles host,x86] [--rounds 6] [--web '']
                               [--out F] [--trained-out F]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
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
TRAINED = HERE / "results" / "trained.json"
TRAINED_MODELS = ("digitnet", "minilm")   # the trained weights: their rows also go to trained.json
MODELS = {"digitnet": REPO / "edgeship" / "demo" / "model.toml",
          "resnet18": HERE / "models" / "resnet18.toml",
          "mobilenet_v3_large": HERE / "models" / "mobilenet_v3_large.toml",
          "minilm": REPO / "examples" / "minilm" / "model.toml",
          "encoder": HERE / "models" / "encoder.toml"}
DEFAULT_MODELS = ("digitnet", "resnet18", "mobilenet_v3_large", "minilm")   # the encoder: --models encoder
PROFILES = ("host", "android", "linux", "x86")
CALIBRATION_SAMPLES, EVALUATION_SAMPLES = 64, 32
INDUCTOR_CACHE = "inductor-cache"  # in a model's work folder: Inductor's cache for its builds
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
        if rel is None or not rel.endswith(".npz") or (spec_path.parent / rel).exists():  # a model's own data
            continue
        dest = spec_path.parent / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        np.savez(dest, x=draw(np.random.default_rng(seed)))


def build(spec: Path, profile: str, folder: Path) -> tuple[float, Path]:
    """One real build in its own folder (its own stage cache); returns wall seconds and output dir."""
    seconds, _, out = run_build(spec, profile, folder)
    return seconds, out


def run_build(spec: Path, profile: str, folder: Path) -> tuple[float, float, Path]:
    """One real build (``edgeship build --quiet``) in ``folder`` (its stage cache and results
    database there); returns its wall seconds, its CPU seconds (user + system, with every process it
    waited for: its runners), and its output folder."""
    out = folder / Path(profile).stem  # a profile name, or a profile file
    cmd = [sys.executable, "-m", "edgeship", "build", "--target", profile, "--model", str(spec),
           "--out", str(out), "--quiet"]
    env = {k: v for k, v in os.environ.items() if k not in ("EDGESHIP_CACHE_DIR", "EDGESHIP_DB")}
    # Inductor's own on-disk cache (compiled kernels, FX graphs) in the model's folder too, emptied with
    # it: under /tmp it outlives a bench run, and a later run's "cold" aoti builds took their kernels
    # from it (MiniLM's aoti-int8 lowering: 32.5 s with it warm, 41.4 s cold)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(folder / INDUCTOR_CACHE)
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=folder, stdout=subprocess.DEVNULL, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)   # the child's own rusage, with its runners
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode not in (0, 3):  # 3: a gate failed; the artifacts and results are still there
            err.seek(0)
            raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: "
                               f"{err.read().decode(errors='replace')[-2000:]}")
    return seconds, usage.ru_utime + usage.ru_stime, out


@dataclass
class Prepared:
    """What phase 1 leaves of a model for its timing: the builds (each profile's cost), the
    candidates with the peers made and judged, and the web build where there is one."""

    name: str
    spec: Path
    folder: Path
    cost: dict[str, dict[str, float]]
    found: Any
    peers_seconds: float
    web: dict[str, Any] | None = None   # web build's out folder and cost, or why it is not measured


def prepare(name: str, spec_path: Path, args: argparse.Namespace) -> Prepared:
    """Phase 1 for one model: every profile built with the real command, cold then again
    unchanged, one after another in the model's own folder (one stage cache: a later profile takes
    what an earlier one lowered); then the peers made and judged; then the web build. Nothing the
    bench reports as a speed is measured here (the builds' own latency figures are not read)."""
    ensure_data(spec_path)
    folder = WORK / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    cost = {}
    for profile in args.profiles:
        cold, cold_cpu, _ = run_build(spec_path, profile, folder)
        again, _, _ = run_build(spec_path, profile, folder)
        cost[profile] = {"cold_build_seconds": round(cold, 2), "cold_build_cpu_seconds": round(cold_cpu, 2),
                         "rebuild_seconds": round(again, 2)}
        say(name, f"{profile}: cold build {cold:.1f} s ({cold_cpu:.1f} s of CPU), unchanged re-build {again:.1f} s")
    # what trained.py needs to take these builds instead of making them again
    (folder / BUILDS).write_text(json.dumps({"spec": str(spec_path.resolve()), "build_cost": cost}, indent=1))
    started = time.perf_counter()
    found = candidates_of(spec_path, folder, args.profiles)
    peers_seconds = time.perf_counter() - started
    say(name, f"peers made and judged in {peers_seconds:.0f} s")
    web = build_web(name, spec_path, folder) if name in args.web_models else None
    return Prepared(name, spec_path, folder, cost, found, peers_seconds, web)


def bench_model(prepared: Prepared, args: argparse.Namespace) -> tuple[dict, Timing]:
    """Phase 2 for one model, alone on the machine: time everything interleaved, summarize, and
    time the web variants in Chromium. Returns the summary and the timing (closed), whose rounds
    trained.py's rows are read from."""
    found, name = prepared.found, prepared.name
    timed = {n: c["job"] for n, c in found.candidates.items() if c.get("same_as") is None}
    started = time.perf_counter()
    timing = Timing(timed, found.inputs, args.processes, cold_only=own_loaders(found.candidates))
    loads_seconds = time.perf_counter() - started
    try:
        timing.run(args.rounds, args.block)
        refine(timing, found.candidates, args.block, args.max_rounds)
        summary = summarize(found, timing, prepared.cost)
    finally:
        timing.close()
    timing_seconds = time.perf_counter() - started
    if prepared.web is not None:
        summary["web"] = bench_web(prepared, args)
    builds = sum(c["cold_build_seconds"] + c["rebuild_seconds"] for c in prepared.cost.values())
    summary["seconds"] = {"builds": round(builds, 1),
                          "builds_cpu": round(sum(c["cold_build_cpu_seconds"] for c in prepared.cost.values()), 1),
                          "peers_and_accuracy": round(prepared.peers_seconds, 1),
                          "timing": round(timing_seconds, 1), "loads": round(loads_seconds, 1),
                          "rounds": len(timing.log), "settle": round(timing.settled_s, 1)}
    if summary.get("web", {}).get("seconds") is not None:
        summary["seconds"]["web_timing"] = summary["web"]["seconds"]
    say(name, f"{len(timed)} candidates timed in {timing_seconds:.0f} s (their workers loaded one at a time in "
              f"{loads_seconds:.0f} s, then {len(timing.log)} rounds)")
    return summary, timing


def own_loaders(candidates: dict[str, dict]) -> dict[str, tuple[str, tuple]]:
    """The jobs of byte-identical files timed as another candidate whose loader differs (a peer's
    against edgeship's runner): the same bytes in the same runtime time the same, but the loaders
    import and hold different things, so their cold start is measured apart."""
    return {name: c["job"] for name, c in candidates.items()
            if c.get("same_as") and c["job"][0] != candidates[c["same_as"]]["job"][0]}


def build_web(name: str, spec_path: Path, folder: Path) -> dict[str, Any]:
    """The web profile built (phase 1), cold then again unchanged; or why it cannot be measured here."""
    from edgeship.devices.browser import missing_setup

    why = missing_setup()
    if why:
        say(name, f"web: not measured here: {why}")
        return {"not_measured": why}
    cold, cold_cpu, out = run_build(spec_path, "web", folder)
    again, _, _ = run_build(spec_path, "web", folder)
    say(name, f"web: cold build {cold:.1f} s (measured in Chromium; {cold_cpu:.1f} s of CPU here), "
              f"unchanged re-build {again:.1f} s")
    return {"out": out, "cost": {"cold_build_seconds": round(cold, 2), "cold_build_cpu_seconds": round(cold_cpu, 2),
                                 "rebuild_seconds": round(again, 2)}}


def bench_web(prepared: Prepared, args: argparse.Namespace) -> dict:
    """The web variants in Chromium beside native ONNX Runtime and the onnxruntime-web peer, at 1
    and 2 threads, interleaved (benchmarks/web.py)."""
    from edgeship.spec import load_spec
    from web import web_candidates, web_figures

    web = prepared.web or {}
    if "not_measured" in web:
        return {"not_measured": web["not_measured"]}
    found = prepared.found
    peer = found.candidates.get("peer: onnxruntime default")
    rows = web_candidates(load_spec(prepared.spec), web["out"], Path(peer["job"][1][0]) if peer else None,
                          prepared.folder)
    started = time.perf_counter()
    timing = Timing({n: c["job"] for n, c in rows.items()}, found.inputs, 1)
    try:
        timing.run(args.rounds, args.block)
        figures = web_figures(rows, timing)
    finally:
        timing.close()
    figures["build_cost"] = web["cost"]
    figures["seconds"] = round(time.perf_counter() - started, 1)
    say(prepared.name, f"web: {len(rows)} candidates timed in {figures['seconds']:.0f} s")
    return figures


def say(model: str, line: str) -> None:
    """A progress line of one model."""
    print(f"{model}: {line}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS),
                        help="comma-separated subset of: " + ", ".join(MODELS)
                        + f" (default: {','.join(DEFAULT_MODELS)})")
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
    parser.add_argument("--trained-out", type=Path, default=TRAINED,
                        help="where the trained models' rows go (default: "
                             f"{TRAINED.relative_to(REPO)}; benchmarks/trained.py's format), when they are benched")
    args = parser.parse_args()
    args.profiles = args.profiles.split(",")
    args.web_models = [m for m in args.web.split(",") if m]
    names = args.models.split(",")
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"--models: unknown {', '.join(unknown)}; known: {', '.join(MODELS)}")
    from edgeship.cli import quiet_libraries

    quiet_libraries()
    started = time.perf_counter()
    peak = {**machine_peaks(), "cpus": os.cpu_count(), "cpu": _cpu()}
    print(f"machine: {peak['cpu']['model']}; fp32 {peak['fp32_gflops']:.1f} GFLOP/s, "
          f"int8 {peak['int8_gops']:.1f} GOP/s", flush=True)
    results = {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": peak,
               "settings": {"profiles": args.profiles, "rounds": args.rounds, "max_rounds": args.max_rounds,
                            "processes": args.processes, "block": args.block}, "models": {}}
    phase = time.perf_counter()
    print("phase 1: builds and peers, one model after another", flush=True)
    prepared = {name: prepare(name, MODELS[name], args) for name in names}
    phases = {"builds_and_peers": round(time.perf_counter() - phase, 1)}
    phase = time.perf_counter()
    print("phase 2: timing, one model at a time, alone on the machine", flush=True)
    trained_rows = {}
    for name in names:
        results["models"][name], timing = bench_model(prepared[name], args)
        if name in TRAINED_MODELS:
            trained_rows[name] = trained_from_bench(name, prepared[name], timing)
    phases["timing"] = round(time.perf_counter() - phase, 1)
    results["machine"]["after"] = machine_peaks()   # drift shows here
    use_peaks(results)
    results["seconds"] = round(time.perf_counter() - started, 1)
    results["phases"] = phases
    write_json(args.out, results)
    print_table(results)
    print_web(results)
    if trained_rows:
        write_trained(args.trained_out, results, trained_rows)
    print(f"wrote {shown(args.out)} in {results['seconds']:.0f} s (phase 1: {phases['builds_and_peers']:.0f} s, "
          f"phase 2: {phases['timing']:.0f} s)")


def trained_from_bench(name: str, prepared: Prepared, timing: Timing) -> dict[str, Any]:
    """A trained model's rows for trained.json, read from this run's builds and rounds (trained.py's
    rows: its profiles, the task figures from each results.json, p50 and ratios from the same
    interleaved rounds as latest.json's): what make bench used to time a second time."""
    from trained import PROFILES as TRAINED_PROFILES
    from trained import bench_rows

    profiles = [p for p in TRAINED_PROFILES if p in prepared.cost]
    rows = bench_rows(prepared.spec, prepared.folder, profiles, prepared.found.candidates, timing)
    return {"build_seconds": {p: prepared.cost[p]["cold_build_seconds"] for p in profiles},
            "builds_reused_from": str(prepared.folder), "timed_in": "bench.py (make bench): the rounds of latest.json",
            "rows": rows}


def write_trained(out: Path, results: dict, rows: dict[str, dict]) -> None:
    from trained import PROFILES as TRAINED_PROFILES
    from trained import print_rows

    benched = results["settings"]["profiles"]
    settings = {**results["settings"], "profiles": [p for p in TRAINED_PROFILES if p in benched]}
    doc = {"created": results["created"], "machine": {k: v for k, v in results["machine"].items() if k != "after"},
           "settings": settings, "models": rows, "seconds": None,
           "note": "made by benchmarks/bench.py (make bench) from its own builds and rounds; "
                   "benchmarks/trained.py (make bench-trained) makes the same rows on its own"}
    for model, entry in rows.items():
        print_rows(model, entry["rows"])
    write_json(out, doc)
    print(f"wrote {shown(out)}")


def write_json(out: Path, doc: dict) -> None:
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(out)


def shown(path: Path) -> str:
    path = path.resolve()
    return str(path.relative_to(REPO) if path.is_relative_to(REPO) else path)


def _cpu() -> dict:
    """This machine's CPU as edgeship's runner reports it (model, architecture, int8-relevant flags)."""
    from edgeship.devices.cpu import cpu_facts

    facts = cpu_facts()
    return {"model": facts.get("model"), "arch": facts.get("arch"), "flags": facts.get("flags")}


if __name__ == "__main__":
    main()
