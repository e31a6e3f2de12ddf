"""make zoo: every zoo model built for every target with the real command, and what happened to
each variant, in one matrix per target.

The models are the specs in examples/zoo/ plus the transformer and detection examples (EXTRA).
Each (model, target) is one ``edgeship build --quiet`` in its own process, with a timeout; a
build that is refused (exit 2), crashes (exit 1) or times out is recorded and the zoo goes on.
A variant's cell says ``built`` (artifact made, measured, gates passed), ``gate: <first failure>``,
``error: <stage>: <what>`` (a capture failure names its method; a lowering failure the
unsupported op where the converter names one) or ``not measured here: <why>``. Build outputs go
to benchmarks/results/zoo/<model>/<target>/ (ignored by git); the cells, per-variant metrics and
timings to benchmarks/results/zoo.json, merged per (model, target) with earlier runs so a subset
can be re-run. Nothing is asserted: a zoo reports.

    python benchmarks/zoo.py [--models resnet18,bert-tiny] [--targets host] [--jobs 1] [--timeout 1800]
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import tomllib

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "results" / "zoo"
SUMMARY = HERE / "results" / "zoo.json"
EXTRA = [REPO / "examples" / "transformers" / "bert.toml", REPO / "examples" / "transformers" / "distilbert.toml",
         REPO / "examples" / "detection" / "ssdlite-host.toml", REPO / "examples" / "detection" / "ssdlite-model.toml"]
FLAGS = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "avx512_bf16",
         "amx_bf16", "amx_int8", "asimd", "asimddp", "i8mm")
OUTCOMES = {0: "ok", 3: "gate failed", 2: "bad input", 1: "crash"}
# Notes saying a variant's accuracy was not judged (edgeship/pipeline/run.py writes them).
UNCHECKED = ("no accuracy gate of task", "gates not checked: no device")
CELL = 36   # matrix column width; the full text of every cell that is not "built" is listed below it


# ---- running the builds ----

def zoo_specs() -> dict[str, Path]:
    """Model name -> spec path: examples/zoo/*.toml, then EXTRA (a file not there yet keeps its stem)."""
    specs = {}
    for path in sorted((REPO / "examples" / "zoo").glob("*.toml")) + EXTRA:
        try:
            name = tomllib.loads(path.read_text())["name"]
        except (OSError, tomllib.TOMLDecodeError, KeyError):
            name = path.stem
        specs[name] = path
    return specs


def profile_variants(target: str) -> list[dict]:
    """The target profile's variants (name, backend, precision) as its TOML lists them."""
    profile = tomllib.loads((REPO / "targets" / f"{target}.toml").read_text())
    return [{"name": v["name"], "backend": v["backend"], "precision": v.get("precision", "fp32")}
            for v in profile.get("variants", [])]


def machine() -> dict:
    """CPU model, core count, the instruction-set flags that decide fp32/int8 kernel speed, and the load."""
    cpu, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                cpu = value.strip()
            elif key.strip() in ("flags", "Features"):
                flags = set(value.split())
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "flags": [f for f in FLAGS if f in flags],
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def build(name: str, spec: Path, target: str, timeout: float, db: str, cold: bool) -> dict:
    """One build in a subprocess: how it ended, how long it took, and its results.json. ``cold``:
    an empty stage cache and every variant measured again, so the time is a first build's."""
    out = OUT / name / target
    record = {"spec": str(spec.relative_to(REPO)) if spec.is_relative_to(REPO) else str(spec),
              "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "load_average": round(os.getloadavg()[0], 2), "seconds": 0.0, "exit_code": None}
    if not spec.exists():
        return {**record, "outcome": "missing spec", "message": f"{record['spec']} does not exist"}
    cmd = [sys.executable, "-m", "edgeship", "build", "--target", target, "--model", str(spec), "--out", str(out),
           "--quiet", "--db", db] + (["--remeasure"] if cold else [])
    started = time.time()
    proc = _run(cmd, timeout, cold)
    if proc is None:
        return {**record, "outcome": "timeout", "message": f"no result after {timeout:.0f} s (killed)",
                "seconds": round(time.time() - started, 1)}
    results = out / "results.json"
    # Exit 0 or 3: the file is this build's (an unchanged re-build may leave it as it was); else only if rewritten.
    fresh = results.exists() and (proc.returncode in (0, 3) or results.stat().st_mtime >= started)
    record.update(seconds=round(time.time() - started, 1), exit_code=proc.returncode, cold=cold,
                  outcome=OUTCOMES.get(proc.returncode, f"exit {proc.returncode}"),
                  results=json.loads(results.read_text()) if fresh else None)
    if proc.returncode in (1, 2) or not fresh:
        record["message"] = _last_line(proc.stderr) or _last_line(proc.stdout) or "no output"
    return record


def _run(cmd: list[str], timeout: float, cold: bool) -> subprocess.CompletedProcess | None:
    """Run a build in its own process group (so a timeout kills the runners it started too); None
    on timeout. ``cold``: with an empty stage cache of its own, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="zoo-cache-") as cache:
        env = {**os.environ, "EDGESHIP_CACHE_DIR": cache} if cold else None
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return None
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def _last_line(text: str) -> str:
    """The last meaningful line of a process's output: a traceback's exception, an error message."""
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not re.match(r"^[WE]\d{4} .*_pytree\.py", line.strip())]
    return lines[-1][:400] if lines else ""


def collect(name: str, spec: Path, target: str) -> dict | None:
    """The record of an earlier build from its folder's results.json (--collect), without building:
    for a zoo run stopped before it wrote zoo.json. Its time and exit code are not known."""
    results = OUT / name / target / "results.json"
    if not results.exists():
        return None
    doc = json.loads(results.read_text())
    failed = any(row.get("error") or row.get("gates", {}).get("failures") for row in doc["variants"])
    record = {"spec": str(spec.relative_to(REPO)) if spec.is_relative_to(REPO) else str(spec),
              "built_at": doc.get("created"), "load_average": None, "seconds": None, "exit_code": None,
              "outcome": "gate failed" if failed else "ok", "collected": True}
    record["variants"] = variant_cells(doc, target, record)
    return record


def run(models: list[str], specs: dict[str, Path], targets: list[str], jobs: int, timeout: float,
        cold: bool, header: dict) -> dict:
    """Every (model, target) build, ``jobs`` at a time, model by model; a line printed and zoo.json
    updated as each ends (a zoo stopped after hours keeps what it measured)."""
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / ".gitignore").write_text("# build outputs of benchmarks/zoo.py (artifacts, reports): not kept in git\n*\n")
    db = f"sqlite:///{OUT / 'results.db'}"   # the zoo's builds are recorded apart from the user's own

    def one(pair: tuple[str, str]) -> tuple[tuple[str, str], dict]:
        record = build(pair[0], specs[pair[0]], pair[1], timeout, db, cold)
        record["variants"] = variant_cells(record.pop("results", None), pair[1], record)
        cached = sum(bool(c.get("from_stage_cache")) for c in record["variants"].values())
        print(f"  {pair[0]:30} {pair[1]:8} {record['outcome']:12} {record['seconds']:7.1f} s"
              + (f" ({cached} variant(s) from the stage cache)" if cached else "")
              + (f"  {record['message'][:150]}" if record.get("message") else ""), flush=True)
        write({**header, "models": {pair[0]: {pair[1]: record}}})
        return pair, record

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        done = dict(pool.map(one, [(m, t) for m in models for t in targets]))
    return {m: {t: done[m, t] for t in targets} for m in models}


# ---- reading results.json into cells ----

def variant_cells(results: dict | None, target: str, record: dict) -> dict[str, dict]:
    """Per variant (the eager reference left out): its cell text, status and figures. Without a
    results.json every variant of the profile gets the build's own outcome."""
    if results is None:
        text = f"{record['outcome']}: {record.get('message', '')}".rstrip(": ")
        return {v["name"]: {**v, "status": record["outcome"], "cell": text} for v in profile_variants(target)}
    return {row["name"]: _cell(row) for row in results["variants"] if row["backend"] != "eager"}


def _cell(row: dict) -> dict:
    accuracy, latency = row.get("accuracy") or {}, row.get("latency") or []
    not_measured = [n.split("not measured here: ", 1)[1] for n in row.get("notes", []) if "not measured here: " in n]
    cell = {"backend": row["backend"], "precision": row["precision"], "capture": row["lowering"].get("capture"),
            "lowering_seconds": row["lowering"].get("seconds"), "size_bytes": row.get("size_bytes"),
            "from_stage_cache": any("reused from the stage cache" in n for n in row["lowering"].get("notes", [])),
            "sqnr_db": accuracy.get("sqnr_db"), "agreement": accuracy.get("agreement"),
            "cosine": accuracy.get("cosine"), "task": (accuracy.get("task") or {}).get("values"),
            "p50_ms": {lat["device"]: lat.get("p50_ms") for lat in latency if not lat.get("size")},  # at opt
            "checked": bool(latency) and row.get("accuracy") is not None and not any(
                n.startswith(UNCHECKED) for n in row.get("notes", []))}
    if row.get("error"):
        stage, what = _error(row["error"])
        return {**cell, "status": "error", "error": {"stage": stage, "text": row["error"]},
                "cell": f"error: {stage}: {what}"}
    failures = row["gates"].get("failures", [])
    if failures:
        return {**cell, "status": "gate", "cell": f"gate: {failures[0]}"}
    if not latency:
        why = not_measured[0] if not_measured else "no device measured it (see the row's notes)"
        return {**cell, "status": "not measured", "cell": f"not measured here: {why}"}
    return {**cell, "status": "built", "cell": "built"}


def _error(error: str) -> tuple[str, str]:
    """(stage, short text) of a variant's error: capture keeps the first method's failure (named),
    lowering the unsupported op where one is named, else the failure's first line."""
    stage, _, rest = error.partition(" failed: ")
    if not rest:
        return "error", error
    if stage == "capture":
        return stage, rest.split("; ")[0]
    op = re.search(r"\(unsupported op: ([^)]+)\)", rest)
    return stage, f"unsupported op {op.group(1)}" if op else rest


# ---- summary and printing ----

def summarize(models: dict) -> dict:
    """Share of (model, target, variant) artifacts built, and fp32 variants passing float parity."""
    cells = [c for per_target in models.values() for record in per_target.values() for c in record["variants"].values()]
    built = [c for c in cells if c["status"] in ("built", "gate", "not measured")]
    fp32 = [c for c in built if c["precision"] == "fp32"]
    checked = [c for c in fp32 if c.get("checked") or c["status"] == "gate"]   # a failed gate was checked
    passed = [c for c in checked if c["status"] == "built"]
    outcomes: dict[str, int] = {}
    for record in (r for per_target in models.values() for r in per_target.values()):
        outcomes[record["outcome"]] = outcomes.get(record["outcome"], 0) + 1
    return {"built": {"pairs": len(cells), "built": len(built), "percent": _percent(len(built), len(cells))},
            "fp32_parity": {"built": len(fp32), "checked": len(checked), "passed": len(passed),
                            "percent": _percent(len(passed), len(checked)), "unchecked": len(fp32) - len(checked)},
            "builds": outcomes}


def _percent(part: int, whole: int) -> float:
    return round(100.0 * part / whole, 1) if whole else 0.0


def print_matrices(models: dict, targets: list[str]) -> None:
    """One model x variant matrix per target, cells cut to CELL characters; then every cell that is
    not "built" in full."""
    for target in targets:
        names = [v["name"] for v in profile_variants(target)]
        header = [f"{'model':30}", f"{'build s':>8}"] + [f"{n[:CELL]:{CELL}}" for n in names]
        print(f"\n{target}\n" + " | ".join(header))
        details = []
        for model, per_target in models.items():
            record = per_target.get(target)
            if record is None:
                continue
            cells = [record["variants"].get(n, {}).get("cell", "-") for n in names]
            print(" | ".join([f"{model[:30]:30}", f"{record['seconds']:8.1f}"] + [f"{c[:CELL]:{CELL}}" for c in cells]))
            details += [f"  {model} / {n}: {c}" for n, c in zip(names, cells) if c != "built" and len(c) > CELL]
        if details:
            print("\n".join(["in full:"] + details))


def print_summary(summary: dict, label: str) -> None:
    built, fp32 = summary["built"], summary["fp32_parity"]
    print(f"\n{label}: {built['built']} of {built['pairs']} (model, target, variant) artifacts built "
          f"({built['percent']:.0f}%); fp32 float parity: {fp32['passed']} of {fp32['checked']} checked pass "
          f"({fp32['percent']:.0f}%), {fp32['unchecked']} fp32 artifact(s) not checked (no accuracy gate for "
          f"the task, or not measured here); builds: "
          + ", ".join(f"{n} {k}" for k, n in sorted(summary["builds"].items())))


def write(doc: dict) -> dict:
    """Merge ``doc`` into zoo.json per (model, target) and write it; the merged document. Each
    (model, target) record keeps the machine it was built on (the top-level ``machine`` is the last
    run's). A lock file keeps the read-merge-write whole when builds (or two zoo runs) end at the
    same time."""
    with open(SUMMARY.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        previous = json.loads(SUMMARY.read_text()) if SUMMARY.exists() else {}
        models = previous.get("models", {})
        for per_target in models.values():
            for record in per_target.values():
                record.setdefault("machine", previous.get("machine"))
        for name, per_target in doc["models"].items():
            for record in per_target.values():
                record["machine"] = doc["machine"]
            models[name] = {**models.get(name, {}), **per_target}
        merged = {**previous, **doc, "models": models, "summary": summarize(models)}
        tmp = SUMMARY.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(merged, indent=2) + "\n")
        tmp.replace(SUMMARY)
    return merged


def main() -> int:
    specs, targets_here = zoo_specs(), sorted(p.stem for p in (REPO / "targets").glob("*.toml"))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="comma-separated model names (default: all): " + ", ".join(specs))
    parser.add_argument("--targets", help="comma-separated targets (default: all): " + ", ".join(targets_here))
    parser.add_argument("--jobs", type=int, default=1, help="builds at once (default 1: a build times on every core)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds before a build is killed (default 1800)")
    parser.add_argument("--cold", action="store_true",
                        help="an empty stage cache per build and --remeasure: build times are first builds' "
                             "(default: the shared cache and edgeship's reuse of unchanged measurements)")
    parser.add_argument("--collect", action="store_true",
                        help="build nothing: read the results.json that earlier builds left in "
                             "benchmarks/results/zoo/<model>/<target>/ into zoo.json (a stopped run's builds)")
    args = parser.parse_args()
    models = args.models.split(",") if args.models else list(specs)
    targets = args.targets.split(",") if args.targets else targets_here
    unknown = [m for m in models if m not in specs] + [t for t in targets if t not in targets_here]
    if unknown:
        parser.error(f"unknown model or target: {', '.join(unknown)}")
    if args.collect:
        found = {(m, t): collect(m, specs[m], t) for m in models for t in targets}
        found = {k: v for k, v in found.items() if v is not None}
        doc = {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine(), "models": {}}
        for (m, t), record in found.items():
            doc["models"].setdefault(m, {})[t] = record
        merged = write(doc)
        print(f"collected {len(found)} build(s) into {SUMMARY.relative_to(REPO)}")
        print_summary(merged["summary"], "zoo.json")
        return 0
    started = time.time()
    print(f"zoo: {len(models)} model(s) x {len(targets)} target(s), {args.jobs} build(s) at a time", flush=True)
    doc = {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine()}
    doc["models"] = run(models, specs, targets, max(1, args.jobs), args.timeout, args.cold, dict(doc))
    doc["seconds"] = round(time.time() - started, 1)
    merged = write(doc)
    print_matrices(doc["models"], targets)
    print_summary(summarize(doc["models"]), "this run")
    if len(merged["models"]) > len(doc["models"]) or merged["summary"] != summarize(doc["models"]):
        print_summary(merged["summary"], "zoo.json (with earlier runs)")
    print(f"wrote {SUMMARY.relative_to(REPO)} in {doc['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
