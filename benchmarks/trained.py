"""make bench-trained (and make bench, from bench.py's own rounds): the two models with trained
weights, side by side — the demo (DigitNet, trained on scikit-learn's digits) and all-MiniLM-L6-v2
(examples/minilm) — per backend and precision: the task metric, the size, and p50 measured interleaved on this machine.

These are the figures that predict what a user's trained model will see. Every other model in
the benchmarks has seeded random weights, which overstate int8 error: a random network has no
structure for quantization to keep, so its per-layer errors add up unchecked (README, "What the
figures mean").

Each model's host, android and x86 profiles are built with the real command (cold, own stage cache);
every artifact that runs here is loaded by edgeship's own device runner and timed in interleaved
rounds with eager PyTorch (benchmarks/harness.py: each candidate in worker processes of its own,
every runtime at its default thread count), on the first evaluation sample. With ``--reuse-builds``,
a model bench.py has just built for every profile is taken from its folder rather than built again:
the same command on the same files. (make bench does not run this script: bench.py benches both
models itself and writes these rows from its own builds and rounds, ``bench_rows``, timed on the
model spec's example inputs.) Ratios come with
sign-test intervals over the rounds (benchmarks/stats.py); an interval holding 1.0 is a tie (≈).
Per row: the task figures from the build's results.json (demo: top-1 and its drop, SQNR; MiniLM:
mean and worst cosine against float, recall@1 of each sentence's nearest neighbour against float and
against its paraphrase, Spearman of all pairwise similarities), the layers keep_float = "auto" kept
in float, the size, p50, the speed-up over eager, and for int8 the p50 ratio to its fp32 sibling on
the same runtime, and its cold start and memory (benchmarks/harness.py: load, first inference, peak
RSS over the process's baseline); the machine's measured fp32 and int8 GEMM peaks, which bound what int8 can gain
here. Written to benchmarks/results/trained.json; nothing is asserted.

    python benchmarks/trained.py [--models digitnet,minilm] [--profiles host,android,x86] [--rounds 6]
                                 [--reuse-builds benchmarks/.work]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(HERE), str(REPO)]

from bench import BUILDS, build  # noqa: E402
from harness import Timing  # noqa: E402
from headline import cold_row  # noqa: E402
from stats import ratio  # noqa: E402

MODELS = {"digitnet": REPO / "edgeship" / "demo" / "model.toml", "minilm": REPO / "examples" / "minilm" / "model.toml"}
PROFILES = ("host", "android", "x86")
OUT = HERE / "results" / "trained.json"
WORK = HERE / ".work" / "trained"
FP32_SIBLING = {"int8": "fp32", "bf16": "fp32", "fp16": "fp32"}


def builds_of(model: str, profiles: list[str], reuse: Path | None) -> tuple[Path, dict[str, float], str | None]:
    """The folder holding the model's builds for ``profiles``, each build's cold seconds, and where
    they were reused from: bench.py's (``reuse``/<model>, whose builds.json names the same model
    spec and every profile: the same command on the same files made them) or, without them, built
    here with the real command (cold, in a folder and stage cache of their own)."""
    if reuse is not None and (reuse / model / BUILDS).exists():
        folder = (reuse / model).resolve()
        made = json.loads((folder / BUILDS).read_text())
        if made["spec"] == str(MODELS[model].resolve()) and all(
                p in made["build_cost"] and (folder / p / "results.json").exists() for p in profiles):
            return folder, {p: made["build_cost"][p]["cold_build_seconds"] for p in profiles}, str(folder)
    folder = WORK / model
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder, {p: round(build(MODELS[model], p, folder)[0], 1) for p in profiles}, None


def candidates(spec_path: Path, folder: Path, profiles: list[str]) -> tuple[dict[str, dict], list]:
    """Eager and every artifact of the builds in ``folder`` that runs here, with its figures, and
    the inputs they are timed on (the first evaluation sample)."""
    from candidates import artifacts, mark_identical

    from edgeship.calibration.datasets import load_dataset
    from edgeship.results import Results
    from edgeship.spec import load_spec

    spec = load_spec(spec_path)
    eager = {"spec": spec.model_dump(mode="json"), "base_dir": str(spec.base_dir), "trust_weights": False}
    found = {"eager": {"job": ("harness:runner_loader", ("eager", None, eager, None)), "kind": "eager",
                       "backend": "eager", "runtime": "eager", "precision": "fp32", "built_precision": "fp32",
                       "size_bytes": None, "figures": {}}}
    for profile in profiles:
        results = Results.read(folder / profile / "results.json")
        rows = artifacts(results, folder / profile, profile)
        for name, row in rows.items():
            row["figures"], row["kept_float"] = figures_of(results, name.split("/", 1)[1])
        found.update(rows)
    mark_identical(found)
    sample = load_dataset(spec.data.evaluation, spec, "evaluation").batches(1)[0]
    return found, [sample[i.name] for i in spec.inputs]


def bench_rows(spec_path: Path, folder: Path, profiles: list[str], timed: dict[str, dict],
               timing: Timing) -> dict[str, Any]:
    """The rows of ``time_all`` from bench.py's run instead of rounds of this script's own: the
    builds in ``folder`` and ``timing``, whose jobs are bench.py's ``timed`` candidates (the same names:
    eager, <profile>/<variant>; a byte-identical file timed as the one bench.py timed it as)."""
    found, _ = candidates(spec_path, folder, profiles)
    for name, c in found.items():
        c["same_as"] = timed[name].get("same_as")
    return {name: row_of(name, found, timing) for name in found}


def figures_of(results: Any, variant: str) -> tuple[dict[str, Any], int | None]:
    """The task figures of ``variant`` (results.json's accuracy block and task metrics) and how many
    layers its quantizer kept in float."""
    row = next(v for v in results.variants if v.name == variant)
    acc = row.accuracy
    if acc is None:
        return {"not_measured": "; ".join(row.notes) or "no accuracy in results.json"}, None
    figures = {"top1": acc.top1, "top1_drop": acc.top1_drop, "sqnr_db": acc.sqnr_db} if acc.task is None else \
        dict(acc.task.values)
    figures["gates_passed"] = row.gates.passed
    quantization = (row.lowering.details or {}).get("quantization", {}) if row.lowering else {}
    kept = quantization.get("kept_float")
    return figures, None if kept is None else len(kept)


def time_all(found: dict[str, dict], inputs: list, args: argparse.Namespace) -> dict[str, Any]:
    """Interleaved timing of every candidate timed once (byte-identical ones share a timing); the
    rows with p50, the speed-up over eager and an int8 row's ratio to its fp32 sibling."""
    timed = {n: c["job"] for n, c in found.items() if c.get("same_as") is None}
    timing = Timing(timed, inputs, args.processes)
    try:
        timing.run(args.rounds, args.block)
        return {name: row_of(name, found, timing) for name in found}
    finally:
        timing.close()


def row_of(name: str, found: dict[str, dict], timing: Timing) -> dict[str, Any]:
    c = found[name]
    timed_as = c.get("same_as") or name
    row = {k: c.get(k) for k in ("backend", "runtime", "built_precision", "size_bytes", "figures", "kept_float")}
    row["p50_ms"] = timing.p50(timed_as)
    if row["p50_ms"] is None:
        row["not_timed"] = timing.failed.get(timed_as, "could not be loaded")
        return row
    row.update(cold_row(timing.cold_start(timed_as)))
    if name != "eager":
        row["vs_eager"] = ratio(*timing.paired("eager", timed_as)).as_dict()
    sibling = fp32_sibling(name, found)
    if sibling is not None and timing.p50(found[sibling].get("same_as") or sibling) is not None:
        row["fp32_sibling"] = sibling
        # p50 over the sibling's: below 1, faster than fp32 on the same runtime (the interval is of the ratio)
        r = ratio(*timing.paired(timed_as, found[sibling].get("same_as") or sibling))
        row["p50_over_fp32"] = {"value": r.value, "low": r.low, "high": r.high, "rounds": r.rounds}
    return row


def fp32_sibling(name: str, found: dict[str, dict]) -> str | None:
    """The fp32 variant of the same build and runtime as a reduced-precision one."""
    c = found[name]
    if c["built_precision"] not in FP32_SIBLING or "/" not in name:
        return None
    profile = name.split("/", 1)[0]
    return next((n for n, o in found.items() if n.startswith(profile + "/") and o["runtime"] == c["runtime"]
                 and o["built_precision"] == "fp32"), None)


def print_rows(model: str, rows: dict[str, dict]) -> None:
    print(f"{model}:")
    for name, row in rows.items():
        f = row["figures"]
        task = (f"cos {f.get('cosine_mean', 0):.4f}/{f.get('cosine_worst', 0):.4f} "
                f"r@1 {f.get('recall_at_1_vs_float', 0):.3f} pairs {f.get('recall_at_1_vs_labels', 0):.3f}"
                if "cosine_mean" in f else f"top1 {f.get('top1')} drop {f.get('top1_drop')} sqnr {f.get('sqnr_db')}"
                if f else "")
        p50 = f"{row['p50_ms']:.3f} ms" if row.get("p50_ms") else row.get("not_timed", "-")
        vs = f" x{row['vs_eager']['value']:.2f} eager" if "vs_eager" in row else ""
        sib = row.get("p50_over_fp32")
        sib_text = f" {sib['value']:.2f} [{sib['low']:.2f}, {sib['high']:.2f}] of fp32" if sib else ""
        size = f"{row['size_bytes'] / 2**20:.1f} MiB" if row.get("size_bytes") else "-"
        kept = f" kept {row['kept_float']}" if row.get("kept_float") else ""
        cold = (f"  start {row['start_ms']:.1f} ms, +{row['rss_over_baseline_mb']:.0f} MiB"
                if row.get("start_ms") is not None and row.get("rss_over_baseline_mb") is not None else "")
        print(f"  {name:<38} {size:>10} {p50:>12}{vs}{sib_text}{cold}  {task}{kept}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--profiles", default=",".join(PROFILES))
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds (as bench.py's)")
    parser.add_argument("--block", type=int, default=15)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--reuse-builds", type=Path, default=None,
                        help="bench.py's work folder (benchmarks/.work) of the run just before, on the same "
                             "checkout: a model it built for every profile here is not built again")
    args = parser.parse_args()
    from bench import _cpu
    from harness import machine_peaks

    from edgeship.cli import quiet_libraries

    quiet_libraries()
    started, profiles = time.perf_counter(), args.profiles.split(",")
    results: dict[str, Any] = {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                               "machine": {"cpu": _cpu(), "cpus": os.cpu_count(), **machine_peaks()},
                               "settings": {"profiles": profiles, "rounds": args.rounds, "processes": args.processes,
                                            "block": args.block}, "models": {}}
    for model in args.models.split(","):
        folder, builds, reused = builds_of(model, profiles, args.reuse_builds)
        print(f"{model}: built {', '.join(f'{p} in {s:.0f} s' for p, s in builds.items())}"
              f"{f' (bench.py built them: reused from {reused})' if reused else ''}", flush=True)
        found, inputs = candidates(MODELS[model], folder, profiles)
        rows = time_all(found, inputs, args)
        results["models"][model] = {"build_seconds": builds, "builds_reused_from": reused, "rows": rows}
        print_rows(model, rows)
    results["seconds"] = round(time.perf_counter() - started, 1)
    out = args.out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".tmp").write_text(json.dumps(results, indent=1) + "\n")
    out.with_suffix(".tmp").replace(out)
    print(f"wrote {out} in {results['seconds']:.0f} s")


if __name__ == "__main__":
    main()
