"""make bench's browser rows: onnxruntime-web in real Chromium beside native ONNX Runtime, at 1 and 2
threads, and the peer a web developer would reach for.

For a model, the web profile is built with the real command; its web-fp32 and web-int8 artifacts
are then timed, interleaved in rounds (benchmarks/harness.py), each in its own page: the page is
opened once in a worker process (devices/browser.py's PageSession: the isolated static server and a
fresh Chromium), and every round asks it to time a block of runs, which the page times itself with
``performance.now()`` (no round trip to Python inside a timing). Beside them, at the same thread
count: the same two files in native ONNX Runtime (its default session, the runner's loader), and the
peer "onnxruntime-web default session on a plain torch.onnx.export" (the file make bench's native
ORT peer uses, opened with onnxruntime-web's default session options). Accuracy of the web variants
is what the build measured in Chromium; the peer's is measured here in Chromium on the same
evaluation samples.

Ratios (reference time / candidate time, sign-test interval over the rounds, benchmarks/stats.py):
``web_fp32_vs_native`` (native time / web time: below 1 means the browser is slower; the figure
asks the browser to be at most 2.5x slower, i.e. >= 0.4), ``web_int8_vs_web_fp32`` (fp32 time / int8
time: the figure asks int8 <= 0.6x fp32's time, i.e. >= 1.67), ``web_fp32_vs_peer`` (peer time /
web-fp32 time: >= 1.0) and ``two_threads_vs_one`` per variant.
"""
from __future__ import annotations

import atexit
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

THREADS = (1, 2)


class Page:
    """A model open in Chromium for a timing worker: ``time_runs(n)`` times n runs in the page."""

    def __init__(self, artifact: str, inputs: str, names: list[str], threads: int, options: dict) -> None:
        from edgeship.devices.base import Job
        from edgeship.devices.browser import PageSession
        from edgeship.devices.config import BrowserConfig

        job = Job(runtime="onnxruntime-web", artifact=Path(artifact), sha256=None, inputs=Path(inputs),
                  input_names=names, batch=1, warmup=0, iterations=0, threads=threads, timeout_s=6 * 3600,
                  options=options)
        work = Path(tempfile.mkdtemp(prefix="edgeship-bench-web-"))
        self.session = PageSession(BrowserConfig(transport="browser"), job, work, threads)
        self.session.__enter__()
        atexit.register(self.session.__exit__, None, None, None)
        self.info = self.session.open()
        if self.info["threads"] != threads:
            raise RuntimeError(f"asked for {threads} wasm threads, the page runs {self.info['threads']}")

    def __call__(self, arrays: list[np.ndarray]) -> None:
        self.session.time(0, 1)

    def time_runs(self, n: int) -> list[float]:
        return self.session.time(0, n)


def open_page(artifact: str, inputs: str, names: list[str], threads: int, options: dict) -> Page:
    return Page(artifact, inputs, names, threads, options)


def web_candidates(spec: Any, build: Path, peer_onnx: Path | None, folder: Path) -> dict[str, dict[str, Any]]:
    """The timing jobs and accuracy of every web row of one model (``build``: the web profile's
    build folder; ``peer_onnx``: the plain export of the native ORT peer)."""
    from edgeship.results import Results

    results = Results.read(build / "results.json")
    names = [i.name for i in spec.inputs]
    inputs = folder / "web-inputs.npz"
    from edgeship.model import example_inputs

    np.savez(inputs, **{n: t.numpy() for n, t in zip(names, example_inputs(spec))})
    rows: dict[str, dict[str, Any]] = {}
    for row in results.variants[1:]:
        if row.backend != "onnx-web" or not row.file:
            continue
        lat = next((lat for lat in row.latency if lat.device == "browser"), None)
        accuracy = {"sqnr_db": row.accuracy.sqnr_db if row.accuracy else None,
                    "top1_drop": row.accuracy.top1_drop if row.accuracy else None,
                    "gates_passed": row.gates.passed if row.gates else None,
                    "measured_in": lat.runtime if lat else None}
        for t in THREADS:
            page = ("web:open_page", (str(build / row.file), str(inputs), names, t, {"graph_optimization": "all"}))
            rows[f"{row.name} @{t}"] = {"job": page, "kind": "web", "variant": row.name, "threads": t,
                                        "precision": row.precision, "size_bytes": row.size_bytes, **accuracy}
            native = ("harness:runner_loader", ("onnxruntime", str(build / row.file), {}, t))
            rows[f"native onnxruntime {row.name} @{t}"] = {"job": native, "kind": "native", "variant": row.name,
                                                          "threads": t, "precision": row.precision}
    if peer_onnx is not None:
        accuracy = peer_accuracy_in_chromium(spec, peer_onnx, folder)
        peer_inputs = folder / "web-peer-inputs.npz"
        peer_names = onnx_input_names(peer_onnx)
        np.savez(peer_inputs, **dict(zip(peer_names, (t.numpy() for t in example_inputs(spec)))))
        for t in THREADS:
            # onnxruntime-web's default session: no options but the thread count compared
            page = ("web:open_page", (str(peer_onnx), str(peer_inputs), peer_names, t, {}))
            rows[f"peer: onnxruntime-web default @{t}"] = {"job": page, "kind": "peer", "threads": t,
                                                          "precision": "fp32", **accuracy}
    return rows


def onnx_input_names(path: Path) -> list[str]:
    """The graph inputs of an ONNX file (initializers left out), in order."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    weights = {i.name for i in graph.initializer}
    return [i.name for i in graph.input if i.name not in weights]


def peer_accuracy_in_chromium(spec: Any, onnx_path: Path, folder: Path) -> dict[str, Any]:
    """The peer's outputs on the evaluation samples, run in Chromium, against the float model."""
    from candidates import float_outputs, peer_data

    from edgeship import metrics
    from edgeship.devices.base import Job
    from edgeship.devices.browser import BrowserDevice
    from edgeship.devices.config import BrowserConfig
    from edgeship.model import load_model

    _, evaluation = peer_data(spec)
    reference = float_outputs(load_model(spec), evaluation)
    data = folder / "web-eval.npz"
    names = onnx_input_names(onnx_path)  # a plain export names inputs after forward()'s arguments
    np.savez(data, **dict(zip(names, evaluation.inputs.values())))
    job = Job(runtime="onnxruntime-web", artifact=onnx_path, sha256=None, inputs=data,
              input_names=names, batch=1, warmup=0, iterations=0, threads=None, timeout_s=1800)
    result = BrowserDevice("browser", BrowserConfig(transport="browser")).run_job(job, folder / "web-peer-accuracy")
    acc = metrics.accuracy(reference, result.outputs[0].astype(reference.dtype), evaluation.labels)
    return {"sqnr_db": acc["sqnr_db"], "top1_drop": acc["top1_drop"], "measured_in": result.document["runtime_version"]}


def web_figures(rows: dict[str, dict[str, Any]], timing: Any) -> dict[str, Any]:
    """Each row's p50 and the ratios of the module docstring, per thread count."""
    from stats import ratio

    def r(reference: str, candidate: str) -> dict | None:
        if reference in timing.names and candidate in timing.names:
            return ratio(*timing.paired(reference, candidate)).as_dict()
        return None

    figures: dict[str, Any] = {"rows": {}}
    for name, c in rows.items():
        figures["rows"][name] = {**{k: v for k, v in c.items() if k != "job"}, "p50_ms": timing.p50(name),
                                 "process_spread": round(timing.spread(name), 4) if name in timing.names else None,
                                 "failed": timing.failed.get(name),
                                 "cold_start": timing.cold_start(name)}   # a page's: not measured, and why
    for t in THREADS:
        figures[f"threads_{t}"] = {
            "web_fp32_vs_native": r(f"native onnxruntime web-fp32 @{t}", f"web-fp32 @{t}"),
            "web_int8_vs_native_int8": r(f"native onnxruntime web-int8 @{t}", f"web-int8 @{t}"),
            "web_int8_vs_web_fp32": r(f"web-fp32 @{t}", f"web-int8 @{t}"),
            "web_fp32_vs_peer": r(f"peer: onnxruntime-web default @{t}", f"web-fp32 @{t}"),
        }
    figures["two_threads_vs_one"] = {v: r(f"{v} @1", f"{v} @2") for v in ("web-fp32", "web-int8")}
    return figures


def print_web(results: dict) -> None:
    """One table of the browser rows of every model that has them."""
    from headline import _fmt, _ratio
    from rich.console import Console
    from rich.table import Table

    models = {m: r["web"] for m, r in results["models"].items() if r.get("web")}
    if not models:
        return
    table = Table(title="make bench, browser: onnxruntime-web in Chromium (timed in the page) beside native ONNX "
                        "Runtime, same file, same threads; ratios = reference time / candidate time, [95% interval], "
                        "≈ = a tie", title_justify="left")
    for col in ("model", "candidate", "prec", "p50 ms", "SQNR dB", "top-1 drop", "accuracy measured in"):
        table.add_column(col, justify="left" if col in ("model", "candidate", "accuracy measured in") else "right")
    for model, web in models.items():
        if "not_measured" in web:
            table.add_row(model, f"not measured here: {web['not_measured']}", *[""] * 5, end_section=True)
            continue
        for name, row in sorted(web["rows"].items(), key=lambda kv: (kv[1]["threads"], kv[1]["p50_ms"] or 1e9)):
            p50 = f"{row['p50_ms']:.3f}" if row["p50_ms"] else f"failed: {row.get('failed')}"
            table.add_row(model, name, row["precision"], p50, _fmt(row.get("sqnr_db"), 1), _fmt(row.get("top1_drop")),
                          row.get("measured_in") or "")
        for t in THREADS:
            f = web[f"threads_{t}"]
            table.add_row("", f"{t} thread(s): web-fp32 vs native {_ratio(f['web_fp32_vs_native'])}; web-int8 vs "
                              f"web-fp32 {_ratio(f['web_int8_vs_web_fp32'])}; web-fp32 vs peer "
                              f"{_ratio(f['web_fp32_vs_peer'])}", *[""] * 5)
        two = web["two_threads_vs_one"]
        table.add_row("", f"2 threads vs 1: web-fp32 {_ratio(two['web-fp32'])}, web-int8 {_ratio(two['web-int8'])}",
                      *[""] * 5, end_section=True)
    Console(width=200).print(table)
