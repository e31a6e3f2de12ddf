"""make bench-team: what a team lab's matrix costs on top of its builds, measured on this machine.

1. Ray's overhead per build task: examples/matrix.toml (the demo on host and android) run with
   ``edgeship matrix`` one build after another here, then with ``--ray auto`` (a local Ray cluster
   started for the run), each cold (a stage cache of its own), and every artifact's sha256 and
   top-1 compared between the two. Per task, the time outside the build itself (scheduling, the worker's
   start and imports, the build folder's tar through the object store and its unpacking) over
   the build's own wall time; and the whole runs' wall times side by side.
2. Rows per second into one PostgreSQL (a real server started here, tests/store/postgres.py) from
   N concurrent writers, each recording whole builds through ResultsStore.record (one transaction
   a build), every row counted back.

Nothing is asserted; it prints the figures and writes benchmarks/results/team.json.

    python benchmarks/team.py [--writers 1,8,16] [--builds 40] [--skip-ray]
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

OUT = HERE / "results" / "team.json"


def ray_overhead(work: Path) -> dict:
    """Both runs cold: each with a stage cache of its own (the Ray workers inherit the second)."""
    import os

    from edgeship import api

    matrix = REPO / "examples" / "matrix.toml"
    db = f"sqlite:///{work / 'results.db'}"
    os.environ["EDGESHIP_CACHE_DIR"] = str(work / "cache-local")
    began = time.perf_counter()
    local = api.matrix(matrix, work / "local", db=db, quiet=True)
    local_s = time.perf_counter() - began
    os.environ["EDGESHIP_CACHE_DIR"] = str(work / "cache-ray")
    began = time.perf_counter()
    on_ray = api.matrix(matrix, work / "ray", ray="auto", db=db, quiet=True)
    ray_s = time.perf_counter() - began
    tasks = []
    for r in on_ray.results:
        outside = r.timings["queued_to_done"] - r.timings["build"]
        tasks.append({"build": f"{r.model}/{r.target}", "build_s": r.timings["build"],
                      "task_s": r.timings["queued_to_done"], "outside_build_s": round(outside, 2),
                      "overhead_pct": round(100 * outside / r.timings["build"], 1),
                      "bytes_back": r.timings.get("bytes"), "unpack_s": r.timings.get("unpack"), "state": r.state})
    compared = []
    for r in local.results:
        here, there = _artifacts(work / "local" / r.folder), _artifacts(work / "ray" / r.folder)
        for name, (backend, sha, top1) in here.items():
            compared.append({"build": r.folder, "variant": name, "backend": backend,
                             "same_sha256": sha == there[name][1], "same_top1": top1 == there[name][2]})
    return {"local_s": round(local_s, 1), "ray_s": round(ray_s, 1), "tasks": tasks,
            "local_builds": [{"build": f"{r.model}/{r.target}", "build_s": r.timings["build"]} for r in local.results],
            "artifacts": compared, "engine": on_ray.engine}


def _artifacts(folder: Path) -> dict:
    doc = json.loads((folder / "results.json").read_text())
    return {v["name"]: (v["backend"], v.get("sha256"), (v.get("accuracy") or {}).get("top1"))
            for v in doc["variants"] if v["backend"] != "eager"}


def store_rate(writers: int, builds: int, url: str) -> dict:
    from edgeship.store import ResultsStore
    from tests.store.postgres import write_concurrently

    ResultsStore(url).engine.dispose()
    seconds, errors = write_concurrently(url, writers, builds)
    rows = len(ResultsStore(url).rows())
    expected = writers * builds * 7
    return {"writers": writers, "builds": writers * builds, "rows": rows, "expected_rows": expected,
            "lost": expected - rows, "errors": [str(e) for e in errors], "seconds": round(seconds, 3),
            "rows_per_s": round(rows / seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", default="1,8,16")
    parser.add_argument("--builds", type=int, default=40, help="builds (7 rows each) per writer")
    parser.add_argument("--skip-ray", action="store_true")
    args = parser.parse_args()
    from tests.store.postgres import start_postgres, stop_postgres

    report: dict = {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    server = start_postgres()
    try:
        report["postgres"] = [store_rate(int(n), args.builds, server.url()) for n in args.writers.split(",")]
    finally:
        stop_postgres(server)
    for r in report["postgres"]:
        print(f"PostgreSQL: {r['writers']:>2} writers, {r['rows']} rows ({r['lost']} lost) in {r['seconds']:.2f} s = "
              f"{r['rows_per_s']} rows/s")
    if not args.skip_ray:
        work = Path(tempfile.mkdtemp(prefix="edgeship-bench-team-"))
        try:
            report["ray"] = ray_overhead(work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        ray = report["ray"]
        print(f"matrix {REPO / 'examples' / 'matrix.toml'}: local {ray['local_s']} s, Ray {ray['ray_s']} s "
              f"({ray['engine']}), both cold")
        for a in ray["artifacts"]:
            print(f"  {a['build']}/{a['variant']} ({a['backend']}): same sha256 {a['same_sha256']}, "
                  f"same top-1 {a['same_top1']}")
        for t in ray["tasks"]:
            print(f"  {t['build']}: build {t['build_s']} s, task {t['task_s']} s, outside the build "
                  f"{t['outside_build_s']} s ({t['overhead_pct']}%), {t['bytes_back']} bytes back")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
