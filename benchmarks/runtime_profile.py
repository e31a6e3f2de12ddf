"""make bench-profile: where a model's int8 time goes, layer by layer, in OpenVINO and ExecuTorch,
beside each layer's GEMM-only time, on this machine.

The model's int8 variants are built with the real command (``edgeship build`` with a profile of two
shipped variants: x86's openvino-int8 and android's executorch-xnnpack-int8; bench.py's data and
build). Then, each runtime in a spawned process of its own at its default threads (all cores):

- OpenVINO: the IR compiled as its runner compiles it (LATENCY hint, the inference precision its IR
  records) with PERF_COUNT on; every inference's ``get_profiling_info()`` gives each executed node's
  real time and the kernel the CPU plugin chose (exec_type). Nodes the plugin fused into another
  (batch norm, ReLU, the residual add, FakeQuantize) are not run, and their time is in the node they
  were fused into. A convolution's GEMM shape is read from the execution graph's port shapes and
  matched to the layer of that shape (profile_layers.match_by_shape).
- ExecuTorch: the .pte loaded with ETDump on (``enable_etdump=True``); the ETDump read by the devtools
  Inspector gives each XNNPACK operator's time (the delegate's own profiling events, microsecond
  resolution) beside the delegate call's and the method's. XNNPACK's events carry no debug handle and
  no shape, so convolutions are matched to layers by order (the k-th convolution run is the k-th in
  the model's forward; profile_layers.match_in_order).

Each layer's GEMM-only time is ceiling.layer_gemm_ms: the layer's im2col GEMM (M, K, N) timed with
fbgemm and ONNX Runtime's MLAS int8 kernels, the faster one's median. Totals: the whole model's p50
(without profiling, timed interleaved by harness.py) over its GEMM ops against the machine's int8
GEMM peak (harness.machine_peaks), and the profiled time split by kind of node.

    python benchmarks/runtime_profile.py [--model resnet18] [--rounds 5] [--iterations 30] [--built FOLDER]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import tomllib

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(HERE), str(REPO)]

import profile_layers as pl  # noqa: E402
from cpu_kinds import toml  # noqa: E402

WORK = HERE / ".work" / "profile"
RESULT = HERE / "results" / "profile.json"
VARIANTS = {"openvino-int8": "x86", "executorch-xnnpack-int8": "android"}   # variant -> shipped profile
WARMUP = 10


def build_int8(name: str) -> dict[str, Path]:
    """The model's two int8 variants built with the real command; their artifact paths."""
    from bench import MODELS, build, ensure_data

    spec = MODELS[name]
    ensure_data(spec)
    folder = WORK / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    _, out = build(spec, str(write_profile(folder)), folder)
    return found_int8(out)


def found_int8(out: Path) -> dict[str, Path]:
    """The int8 variants' artifacts in a build folder, by its results.json."""
    results = json.loads((out / "results.json").read_text())
    found = {v["name"]: out / v["file"] for v in results["variants"] if v["name"] in VARIANTS and v.get("file")}
    if len(found) != len(VARIANTS):
        raise RuntimeError(f"the build wrote {sorted(found)} of {sorted(VARIANTS)}: see {out / 'report.md'}")
    return found


def write_profile(folder: Path) -> Path:
    """A profile of the shipped int8 variants (their options as shipped), x86's capture and gates,
    few timed runs (the build's own timing is not used here)."""
    shipped = {p: tomllib.loads((REPO / "targets" / f"{p}.toml").read_text()) for p in set(VARIANTS.values())}
    variants = [v for name, p in VARIANTS.items() for v in shipped[p]["variants"] if v["name"] == name]
    doc = {"description": "int8 variants for benchmarks/runtime_profile.py", "capture": shipped["x86"]["capture"],
           "latency": {"warmup": 2, "iterations": 10}, "gates": shipped["x86"]["gates"], "variants": variants}
    path = folder / "profile-int8.toml"
    path.write_text("".join(f"{k} = {toml(v)}\n" for k, v in doc.items()))
    return path


def openvino_profile(path: str, iterations: int) -> dict:
    """Per executed node: type, kernel, real time (ms) of each inference; GEMM nodes' shapes."""
    import openvino as ov

    from edgeship.backends.openvino.device import _ov_rt_precision

    core = ov.Core()
    model = core.read_model(os.path.join(path, "model.xml"))
    config = {"PERFORMANCE_HINT": "LATENCY", "PERF_COUNT": True}
    if _ov_rt_precision(model):
        config["INFERENCE_PRECISION_HINT"] = _ov_rt_precision(model)
    compiled = core.compile_model(model, "CPU", config)
    request = compiled.create_infer_request()
    x = [np.random.default_rng(0).random(tuple(p.get_shape()), dtype=np.float32) for p in compiled.inputs]
    nodes: dict[str, dict] = {}
    wall = []
    for i in range(WARMUP + iterations):
        start = time.perf_counter()
        request.infer(x)
        if i < WARMUP:
            continue
        wall.append((time.perf_counter() - start) * 1e3)
        for info in request.get_profiling_info():
            if info.status == info.Status.EXECUTED:
                node = nodes.setdefault(info.node_name, {"node_type": info.node_type, "exec_type": info.exec_type,
                                                         "times": []})
                node["times"].append(info.real_time.total_seconds() * 1e3)
    shapes, fused = {}, {}
    for op in compiled.get_runtime_model().get_ordered_ops():
        kind = pl.ov_kind(op.get_rt_info()["layerType"].astype(str))
        if kind in pl.GEMM and op.get_friendly_name() in nodes:
            fused[op.get_friendly_name()] = pl.fused_ops(op.get_rt_info()["originalLayersNames"].astype(str))
            shapes[op.get_friendly_name()] = pl.ov_gemm_shape(
                kind, [list(p.get_partial_shape().to_shape()) for p in op.inputs()],
                list(op.output(0).get_partial_shape().to_shape()))
    return {"threads": int(compiled.get_property("INFERENCE_NUM_THREADS")), "nodes": nodes, "shapes": shapes,
            "fused": fused, "wall_ms": wall, "runtime": f"openvino {ov.__version__.split('-')[0]}"}


def executorch_profile(path: str, iterations: int) -> dict:
    """Per ETDump event of the method's execution (XNNPACK's operators, the delegate call, the
    method): its time (ms) in each inference after the warm-up."""
    import torch
    from executorch.devtools import Inspector

    from edgeship.backends.executorch.device import executorch_binding

    binding = executorch_binding()
    program = binding._load_program(path, enable_etdump=True, debug_buffer_size=0,
                                    program_verification=binding.Verification.InternalConsistency)
    method = program.load_method("forward")
    x = torch.from_numpy(np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32))
    for _ in range(WARMUP + iterations):
        method([x])
    with tempfile.TemporaryDirectory() as tmp:
        etdump = os.path.join(tmp, "run.etdp")
        program.write_etdump_result_to_file(etdump, None)
        inspector = Inspector(etdump_path=etdump)
    block = next(b for b in inspector.event_blocks if b.name == "Execute")
    nodes = {e.name: {"times": list(e.perf_data.raw[WARMUP:])} for e in block.events if e.perf_data}
    # XNNPACK's threadpool is left at its default, the core count (the runner's too, unless told)
    return {"nodes": nodes, "threads": os.cpu_count(), "runtime": f"executorch {_version('executorch')}"}


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)


XNNPACK_OP = re.compile(r".+ #\d+$")
ET_TOTAL, ET_DELEGATE = "Method::execute", "DELEGATE_CALL"


def openvino_nodes(got: dict) -> list[dict]:
    """OpenVINO's executed nodes in execution order, each with its median ms and kind."""
    return [{"name": name, "kind": pl.ov_kind(n["node_type"]), "ms": statistics.median(n["times"]),
             "exec_type": n["exec_type"], "shape": got["shapes"].get(name), "fused": got["fused"].get(name, [])}
            for name, n in got["nodes"].items()]


def executorch_nodes(got: dict) -> list[dict]:
    """XNNPACK's operators (and any operator run outside the delegate) with their median ms."""
    return [{"name": name, "kind": pl.xnnpack_kind(name) if XNNPACK_OP.match(name) else "other",
             "ms": statistics.median(n["times"]), "exec_type": name.rsplit(" #", 1)[0]}
            for name, n in got["nodes"].items()
            if XNNPACK_OP.match(name) or name.startswith("native_call_")]


def runtime_report(name: str, nodes: list[dict], layers: list[dict], total_ms: float, unattributed_ms: float,
                   p50_ms: float | None, ops: int, peak: float) -> dict:
    """One runtime's per-layer rows, totals and the layers furthest from their GEMM-only time."""
    matched = pl.match_by_shape(nodes, layers) if name == "openvino" else pl.match_in_order(nodes, layers)
    rows = pl.layer_rows(layers, nodes, matched)
    report = {"profiled_ms": total_ms, "layers": rows, "furthest_from_ceiling": pl.furthest(rows),
              "split": pl.split_by_kind(nodes, unattributed_ms, total_ms),
              "kernels": sorted({n["exec_type"] for n in nodes}),
              "gemm_layers_ms": sum(r["runtime_ms"] for r in rows),
              "gemm_only_ms": sum(r["gemm_only_ms"] for r in rows)}
    report["outside_gemm"] = pl.outside_gemm(report["split"])
    report["achieved_profiled"] = pl.achieved(total_ms, ops, peak)
    report["achieved"] = pl.achieved(p50_ms, ops, peak) if p50_ms else None
    return report


def profile_rounds(paths: dict[str, Path], rounds: int, iterations: int) -> dict[str, list[dict]]:
    """Both runtimes profiled in ``rounds`` alternating rounds, each in its own spawned process."""
    context = multiprocessing.get_context("spawn")
    jobs = {"openvino": (openvino_profile, paths["openvino-int8"]),
            "executorch": (executorch_profile, paths["executorch-xnnpack-int8"])}
    pools = {key: ProcessPoolExecutor(1, mp_context=context) for key in jobs}
    got: dict[str, list[dict]] = {key: [] for key in jobs}
    try:
        for _ in range(rounds):
            for key, (fn, path) in jobs.items():
                got[key].append(pools[key].submit(fn, str(path), iterations).result())
    finally:
        for pool in pools.values():
            pool.shutdown()
    return got


def merged(runs: list[dict]) -> dict:
    """The rounds' node times pooled (each node's median is then over every profiled inference)."""
    out = {**runs[0], "nodes": {}, "wall_ms": [t for run in runs for t in run.get("wall_ms", [])]}
    for run in runs:
        for name, node in run["nodes"].items():
            out["nodes"].setdefault(name, {**node, "times": []})["times"] += node["times"]
    return out


def whole_model_p50(paths: dict[str, Path], rounds: int) -> dict[str, dict]:
    """Each artifact's p50 without profiling, loaded by its runner, timed interleaved (harness)."""
    from harness import interleaved

    jobs = {"openvino": ("harness:runner_loader", ("openvino", str(paths["openvino-int8"]), {}, None)),
            "executorch": ("harness:runner_loader", ("executorch", str(paths["executorch-xnnpack-int8"]), {}, None))}
    spread: dict[str, float] = {}
    p50 = interleaved(jobs, [np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)],
                      rounds=rounds, block=20, processes=2, spread=spread)
    return {key: {"p50_ms": p50[key], "process_spread": spread.get(key)} for key in jobs}


def profile_model(name: str, args: argparse.Namespace, peak: float) -> dict:
    """Build, time the layers' GEMMs, profile both runtimes and put the layers side by side."""
    from ceiling import gemm_shapes, layer_gemm_ms

    paths = found_int8(args.built) if args.built else build_int8(name)
    print(f"  int8 artifacts: {', '.join(str(p) for p in paths.values())}", flush=True)
    layers = layer_gemm_ms(gemm_shapes(name), args.rounds)
    ops = sum(2 * s["m"] * s["k"] * s["n"] for s in layers)
    runs = profile_rounds(paths, args.rounds, args.iterations)
    whole = whole_model_p50(paths, args.rounds + 2)
    out = {"gemm_ops": ops, "layers_gemm_only": layers, "runtimes": {}}
    for runtime, to_nodes in (("openvino", openvino_nodes), ("executorch", executorch_nodes)):
        got = merged(runs[runtime])
        nodes = to_nodes(got)
        # the inference's own time, profiling on: OpenVINO's wall time around infer(), ExecuTorch's
        # Method::execute event
        walls = [got["wall_ms"]] + [r["wall_ms"] for r in runs[runtime]] if runtime == "openvino" else [
            n[ET_TOTAL]["times"] for n in [got["nodes"]] + [r["nodes"] for r in runs[runtime]]]
        total, per_round = statistics.median(walls[0]), [statistics.median(w) for w in walls[1:]]
        unattributed = pl.unattributed_ms(walls[0], [got["nodes"][n["name"]]["times"] for n in nodes])
        report = runtime_report(runtime, nodes, layers, total, unattributed, whole[runtime]["p50_ms"], ops, peak)
        report.update(runtime=got["runtime"], threads=got.get("threads"), nodes=nodes,
                      profiled_ms_per_round=per_round, whole_model=whole[runtime])
        if runtime == "executorch":
            report["delegate_call_ms"] = statistics.median(got["nodes"][ET_DELEGATE]["times"])
        out["runtimes"][runtime] = report
    return out


def print_runtime(runtime: str, r: dict) -> None:
    """One runtime's per-layer table, its split by kind and the layers furthest from the GEMMs."""
    print(f"\n{runtime} ({r['runtime']}, threads {r['threads'] or 'default'}): per layer, median ms per inference")
    print(f"  {'layer':22} {'kind':6} {'M x K x N':>18} {'kernel':34} {'runtime':>8} {'GEMM':>7} {'ratio':>6} "
          f"{'lost':>7}")
    for row in r["layers"]:
        m, k, n = row["shape"]
        kernel = row["kernel"] + (" +add" if "Add" in row["fused"] else "")
        print(f"  {row['layer']:22} {row['kind']:6} {f'{m}x{k}x{n}':>18} {kernel[:34]:34} "
              f"{row['runtime_ms']:8.3f} {row['gemm_only_ms']:7.3f} {row['ratio']:6.2f} {row['ms_lost']:+7.3f}")
    whole = r["whole_model"]
    achieved = r["achieved"]
    print(f"  convs+linear {r['gemm_layers_ms']:.2f} ms in the runtime against {r['gemm_only_ms']:.2f} ms GEMM-only; "
          f"profiled inference {r['profiled_ms']:.2f} ms (rounds {min(r['profiled_ms_per_round']):.2f}-"
          f"{max(r['profiled_ms_per_round']):.2f})")
    if achieved:
        print(f"  whole model unprofiled p50 {whole['p50_ms']:.2f} ms (process spread "
              f"{100 * whole['process_spread']:.0f}%): {achieved['gops']:.0f} GOP/s = {100 * achieved['of_peak']:.0f}% "
              f"of the {achieved['peak_int8_gops']:.0f} GOP/s int8 GEMM peak")
    print("  time by kind: " + ", ".join(f"{kind} {v['ms']:.2f} ms ({100 * v['share']:.0f}%)"
                                         for kind, v in r["split"].items()))
    print(f"  outside convolutions and linear: {r['outside_gemm']['ms']:.2f} ms "
          f"({100 * r['outside_gemm']['share']:.0f}% of the inference without stalls)")
    for key, label in (("by_ratio", "ratio"), ("by_ms_lost", "ms lost")):
        print(f"  furthest from the GEMM-only time by {label}: " + "; ".join(
            f"{f['layer']} {f['ratio']:.2f}x ({f['ms_lost']:+.3f} ms)" for f in r["furthest_from_ceiling"][key]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds of each runtime and of the GEMMs")
    parser.add_argument("--iterations", type=int, default=30, help="profiled inferences per round (after warm-up)")
    parser.add_argument("--built", type=Path, help="the build folder of an earlier run (its int8 artifacts are "
                        "profiled again; no build)")
    args = parser.parse_args()
    from harness import machine_peaks

    from edgeship.cli import quiet_libraries

    quiet_libraries()
    started = time.perf_counter()
    peaks = machine_peaks()
    print(f"machine int8 GEMM peak {peaks['int8_gops']:.0f} GOP/s; {os.cpu_count()} cores", flush=True)
    print(f"{args.model}:", flush=True)
    result = profile_model(args.model, args, peaks["int8_gops"])
    for runtime, r in result["runtimes"].items():
        print_runtime(runtime, r)
    doc = {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": peaks,
           "settings": {"rounds": args.rounds, "iterations": args.iterations, "warmup": WARMUP,
                        "threads": "each runtime's default (all cores); the GEMM kernels' defaults too"},
           "models": {args.model: result}, "seconds": round(time.perf_counter() - started, 1)}
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {RESULT.relative_to(REPO)} in {doc['seconds']:.0f} s")


if __name__ == "__main__":
    main()
