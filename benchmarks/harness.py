"""Timing that survives a shared, noisy machine, used by every benchmark here.

Each candidate is loaded in its own worker process, so no runtime's thread pool competes with
another's, and the candidates are timed in interleaved rounds (A B C, then C A B, ...: a seeded
random order each round) of ``block`` runs each; a candidate's figure is the median of its
per-round medians, so drift in the machine's load hits every candidate alike. A process has its own
speed too (where its memory and threads land: the same ONNX file in eight processes here spread
0.097-0.134 ms on the demo, 4.54-4.89 ms on the encoder), so each candidate can be loaded in several
processes, its figure taken over all of them, and their spread reported as the noise floor of the
comparison. The machine's own limit (large fp32 and int8 matrix multiplies) is measured here too.

Each worker is a fresh process, so it also measures its candidate's cold start (``cold_start``): the
runtime's import, the load, the first inference on the timed inputs, and the process's peak memory
over its own baseline. The workers start together but load one at a time, so no load shares the
cores with another.
"""
from __future__ import annotations

import importlib
import random
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

WARMUP = 10
SETTLE_S = 0.1          # the longest wait for the last worker's threads to go idle
IDLE_POLL_S = 0.002     # how often they are looked at
BLOCK_SECONDS, MIN_BLOCK = 0.3, 5


COLD_FIGURES = ("import_ms", "load_ms", "first_inference_ms", "peak_rss_mb", "rss_over_baseline_mb")
IN_A_BROWSER = ("runs in Chromium (another process, timed in the page): its load and memory are not this "
                "worker's to measure")


def imports(*modules: str) -> Callable[[Callable], Callable]:
    """Marks a loader with the modules it imports before loading, so ``cold_start`` times the
    runtime's import apart from the artifact's load."""
    def mark(loader: Callable) -> Callable:
        loader.import_runtime = lambda *args: [importlib.import_module(m) for m in modules]
        return loader
    return mark


def runner_loader(runtime: str, path: str | None, options: dict, threads: int | None) -> Callable:
    """An artifact loaded exactly as the device runner loads it: a callable on a list of arrays."""
    from edgeship.devices.eager import open_runner  # runner.py's, with the host-only eager runtime too

    return open_runner(runtime, path, options, threads).infer


def _import_runner_runtime(runtime: str, *_: Any) -> None:
    """What the device runner imports before its load timer starts (``Runner.import_runtime``)."""
    from edgeship.devices.eager import EagerRunner  # noqa: F401  (registers the host-only eager runtime)
    from edgeship.devices.runner import runner_class

    runner_class(runtime).import_runtime()


runner_loader.import_runtime = _import_runner_runtime


class Timing:
    """Every job loaded in ``processes`` worker processes of its own (spawned), then timed in
    interleaved rounds: each round runs ``block`` inferences on every worker, in a seeded random
    order. A job is ``("module:function", args)``: the function, called in the worker with
    ``args``, returns a callable that runs one inference on ``inputs`` (or, for a runtime timed
    where it runs, an object whose ``time_runs(n)`` returns n times in ms). The workers stay up, so
    rounds can be added for some jobs (where a comparison is still too noisy to call).

    The workers start together; once every interpreter is up, they load one at a time (every job's
    first worker, then every second one, in a seeded order), each measuring its cold start
    (``cold_start``; ``cold`` keeps them per job, ``cold_start()`` sums them up)."""

    def __init__(self, jobs: dict[str, tuple[str, tuple]], inputs: list[np.ndarray], processes: int = 1,
                 cold_only: dict[str, tuple[str, tuple]] | None = None) -> None:
        """``cold_only``: jobs loaded (and their cold start measured) like the others, then let go,
        not timed in rounds: a file timed as another's that its own loader opens differently."""
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self.pipes: dict[tuple[str, int], Any] = {}
        self.pids: dict[tuple[str, int], int] = {}
        self.settled_s = 0.0   # waited in all for a worker's threads to go idle before the next one ran
        self._last: tuple[str, int] | None = None   # the worker that ran last
        for name, (loader, args) in {**jobs, **(cold_only or {})}.items():
            for k in range(processes):
                parent, child = context.Pipe()
                process = context.Process(target=_worker, args=(child, loader, args, inputs), daemon=True)
                process.start()
                self.pipes[name, k], self.pids[name, k] = parent, process.pid
        self.failed: dict[str, str] = {}
        self.cold: dict[str, list[dict[str, Any]]] = {}   # job -> each worker's cold start
        self._order = random.Random(0)
        for key, pipe in list(self.pipes.items()):   # every interpreter up before the first load
            self._reply(key, _answer(pipe), "up")
        for key in self._load_order():
            if key[0] not in self.failed:
                self.pipes[key].send(1)
                self._reply(key, _answer(self.pipes[key]), "cold")
        for key in [key for key in self.pipes if key[0] in self.failed or key[0] in (cold_only or {})]:
            self.pipes.pop(key).send(0)   # a job counts only if all its workers load
        for name, reason in self.failed.items():
            print(f"  {name}: could not be loaded for timing: {reason}", flush=True)
        # per round: job -> worker -> that worker's median (ms) in the round
        self.log: list[dict[str, dict[int, float]]] = []
        self.names = list(dict.fromkeys(name for name, _ in self.pipes))  # the jobs that loaded

    def _load_order(self) -> list[tuple[str, int]]:
        """Every job's first worker (in a seeded random order), then every second one, ..."""
        by_worker: dict[int, list[tuple[str, int]]] = {}
        for key in self.pipes:
            by_worker.setdefault(key[1], []).append(key)
        return [key for k in sorted(by_worker) for key in self._order.sample(by_worker[k], len(by_worker[k]))]

    def _reply(self, key: tuple[str, int], reply: Any, expected: str) -> None:
        """A worker's answer: ``"up"``, or its cold start (a dict, kept); anything else is its
        failure (the worker has ended), which fails its job."""
        if expected == "up" and reply == "up":
            return
        if expected == "cold" and isinstance(reply, dict):
            self.cold.setdefault(key[0], []).append(reply)
            return
        self.failed.setdefault(key[0], str(reply))
        del self.pipes[key]

    def cold_start(self, name: str) -> dict[str, Any]:
        """The job's cold start over its workers, each a fresh process measured once: per figure
        (``COLD_FIGURES``, ``start_ms``: load + first inference, and ``ready_ms``: with the import
        too, where it was timed apart) the median and the range (low, high) over the processes; or
        why it was not measured."""
        runs = self.cold.get(name, [])
        if name in self.failed or not runs:
            return {"not_measured": f"could not be loaded: {self.failed.get(name, 'no worker')}"}
        missing = sorted({r["not_measured"] for r in runs if "not_measured" in r})
        if missing:
            return {"not_measured": "; ".join(missing)}
        out: dict[str, Any] = {"processes": len(runs)}
        for r in runs:   # the runtime imported: load, first inference; from a fresh process: the import too
            r["start_ms"] = r["load_ms"] + r["first_inference_ms"]
            r["ready_ms"] = r["start_ms"] + r["import_ms"] if r.get("import_ms") is not None else None
        for key in (*COLD_FIGURES, "start_ms", "ready_ms"):
            values = [r[key] for r in runs if r.get(key) is not None]
            out[key] = ({"median": statistics.median(values), "low": min(values), "high": max(values)}
                        if values else None)
        notes = sorted({note for r in runs for note in r.get("notes", [])})
        if notes:
            out["notes"] = notes
        return out

    def run(self, rounds: int, block: int, names: list[str] | None = None) -> None:
        """``rounds`` more rounds of the jobs ``names`` (default: all), each job timed ``block``
        times a round, or fewer for a slow one once its time is known (BLOCK_SECONDS a round, at
        least MIN_BLOCK runs): a round's median needs a few runs, not fifteen of a 60 ms model."""
        keys = [key for key in self.pipes if names is None or key[0] in names]
        for _ in range(rounds):
            # A fresh seeded order each round: no job always follows the same neighbour (whose
            # thread pool may still be spinning down) or always comes first.
            record: dict[str, dict[int, float]] = {}
            for key in self._order.sample(keys, len(keys)):
                # the previous worker's thread pool, spinning after its block, must not share the cores
                self.settled_s += settle(self._idle_pid())
                self.pipes[key].send(self._block(key[0], block))
                record.setdefault(key[0], {})[key[1]] = statistics.median(self.pipes[key].recv())
                self._last = key
            self.log.append(record)

    def _idle_pid(self) -> int | None:
        """The process whose threads must go idle before the next block: the last worker's, unless its
        candidate runs in another process (a browser page), whose threads it cannot see (then None)."""
        if self._last is None or any(r.get("not_measured") == IN_A_BROWSER for r in self.cold.get(self._last[0], [])):
            return None
        return self.pids.get(self._last)

    def _block(self, name: str, block: int) -> int:
        p50 = self.p50(name)
        return block if p50 is None else max(MIN_BLOCK, min(block, round(BLOCK_SECONDS * 1e3 / p50)))

    def paired(self, a: str, b: str) -> tuple[list[float], list[float]]:
        """Both jobs' medians (over their workers) in every round they both ran in, in order."""
        both = [r for r in self.log if a in r and b in r]
        return ([statistics.median(r[a].values()) for r in both], [statistics.median(r[b].values()) for r in both])

    def p50(self, name: str) -> float | None:
        """The median of every round median of every worker of the job (ms); None if it failed."""
        values = [v for r in self.log for v in r.get(name, {}).values()]
        return statistics.median(values) if values else None

    def spread(self, name: str) -> float:
        """(slowest - fastest worker's median) / the job's median: how much processes differ."""
        workers: dict[int, list[float]] = {}
        for r in self.log:
            for k, value in r.get(name, {}).items():
                workers.setdefault(k, []).append(value)
        per_worker = [statistics.median(values) for values in workers.values()]
        return (max(per_worker) - min(per_worker)) / self.p50(name) if len(per_worker) > 1 else 0.0

    def close(self) -> None:
        for pipe in self.pipes.values():
            pipe.send(0)
        self.pipes = {}


def interleaved(jobs: dict[str, tuple[str, tuple]], inputs: list[np.ndarray], rounds: int = 7,
                block: int = 20, processes: int = 1, spread: dict[str, float] | None = None) -> dict[str, float]:
    """Median p50 (ms) per job over ``rounds`` interleaved rounds (``Timing``); None for a job that
    could not be loaded. ``spread`` (when given) gets each job's worker spread."""
    timing = Timing(jobs, inputs, processes)
    try:
        timing.run(rounds, block)
    finally:
        timing.close()
    out: dict[str, Any] = {name: timing.p50(name) for name in timing.names}
    if spread is not None:
        spread.update({name: timing.spread(name) for name in timing.names})
    out.update({name: None for name in timing.failed})
    return out


def cold_start(loader: Callable, args: tuple, inputs: list[np.ndarray]) -> tuple[Callable, dict[str, Any]]:
    """Load a candidate as a fresh process meets it and warm it up, measuring once: the runtime's
    import (where the loader says what it imports: ``imports``, or the runner's import_runtime; else
    it is inside load_ms, and the notes say so), the load, the first inference on ``inputs`` (apart
    from the steady runs, which follow the warmup), and the process's peak resident memory (VmHWM)
    after the warmup, absolute and over its own resident memory just before the import (the
    interpreter, numpy and the harness: the baseline). Linux only for memory: VmHWM is reset to the
    baseline through /proc/self/clear_refs; where it cannot be, the peak over it is not measured.
    Returns the loaded callable and the figures (ms, MiB)."""
    baseline, notes = status_mib("VmRSS"), []
    peak_reset = baseline is not None and reset_peak()
    importer = getattr(loader, "import_runtime", None)
    t0 = time.perf_counter_ns()
    if importer is not None:
        importer(*args)
    t1 = time.perf_counter_ns()
    predict = loader(*args)
    t2 = time.perf_counter_ns()
    if hasattr(predict, "time_runs"):
        for _ in range(WARMUP):
            predict(inputs)
        return predict, {"not_measured": IN_A_BROWSER}
    predict(inputs)
    t3 = time.perf_counter_ns()
    for _ in range(WARMUP):
        predict(inputs)
    peak = status_mib("VmHWM")
    if importer is None:
        notes.append("load_ms includes the runtime's import (the loader does both)")
    if baseline is None:
        notes.append("no /proc/self/status here: memory not measured")
    elif not peak_reset:
        notes.append("VmHWM could not be reset here (/proc/self/clear_refs): the peak over the baseline is not "
                     "measured")
    return predict, {"import_ms": (t1 - t0) / 1e6 if importer is not None else None, "load_ms": (t2 - t1) / 1e6,
                     "first_inference_ms": (t3 - t2) / 1e6, "baseline_rss_mb": baseline, "peak_rss_mb": peak,
                     "rss_over_baseline_mb": peak - baseline if peak_reset and peak is not None else None,
                     "notes": notes}


def status_mib(field: str) -> float | None:
    """A memory figure of this process from /proc/self/status (VmRSS, VmHWM), in MiB; None off Linux."""
    try:
        found = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(found.group(1)) / 1024 if found else None


def reset_peak() -> bool:
    """Reset this process's VmHWM to its current resident memory (Linux: 5 into /proc/self/clear_refs)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def settle(pid: int | None) -> float:
    """Wait until the worker process ``pid`` (the one that ran last) is idle: none of its threads
    running or waiting to run (state R in /proc/<pid>/task/*/stat) in two looks IDLE_POLL_S apart;
    a runtime's pool keeps spinning for a while after a block (ONNX Runtime's about 25 ms here,
    PyTorch's, OpenVINO's and XNNPACK's a few), and a spinning thread is R whether or not it has a
    core. At most SETTLE_S; where the threads cannot be read (no /proc), SETTLE_S. Returns the
    seconds waited."""
    start, idle = time.perf_counter(), 0
    while True:
        busy = _running_threads(pid) if pid is not None else None
        waited = time.perf_counter() - start
        if busy is None:
            time.sleep(max(0.0, SETTLE_S - waited))
            return SETTLE_S
        idle = idle + 1 if busy == 0 else 0
        if idle == 2 or waited >= SETTLE_S:
            return waited
        time.sleep(IDLE_POLL_S)


def _running_threads(pid: int) -> int | None:
    """How many threads of process ``pid`` are running or runnable (Linux: /proc/<pid>/task/*/stat)."""
    count, found = 0, False
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            state = stat.read_text().rsplit(")", 1)[1].split()[0]   # after the command name, which may hold spaces
        except (OSError, IndexError):  # a thread that ended while being read
            continue
        found = True
        count += state == "R"
    return count if found else None


def _worker(conn, loader: str, args: tuple, inputs: list[np.ndarray]) -> None:
    """Start (``"up"``: the interpreter, numpy and the harness, nothing of the candidate), then at
    the parent's word load and warm up (``cold_start``, sent back), then time ``n`` runs per request
    until 0 comes. The runtimes' own chatter on stderr is dropped; a failure comes back through the
    pipe, and the worker ends."""
    import os

    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    try:
        from edgeship.cli import quiet_libraries

        quiet_libraries()
        module, _, function = loader.partition(":")
        load = getattr(importlib.import_module(module), function)  # the loader's module, not the runtime
    except Exception as e:
        conn.send(_failure(e))
        return
    conn.send("up")
    if not conn.recv():
        return
    try:
        predict, cold = cold_start(load, args, inputs)
    except Exception as e:  # reported by the parent; the other candidates are still timed
        conn.send(_failure(e))
        return
    conn.send(cold)
    while n := conn.recv():
        if hasattr(predict, "time_runs"):  # a runtime that times itself where it runs (a browser page)
            conn.send(predict.time_runs(n))
            continue
        times = []
        for _ in range(n):
            start = time.perf_counter_ns()
            predict(inputs)
            times.append((time.perf_counter_ns() - start) / 1e6)
        conn.send(times)


def _answer(pipe: Any) -> Any:
    try:
        return pipe.recv()
    except EOFError:
        return "the worker process ended without an answer"


def _failure(e: Exception) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"


def machine_peaks() -> dict[str, float]:
    """The fp32 and int8 GEMM peaks, each measured in a fresh process of its own: a runtime's
    thread pool still spinning from one kernel halves the next one's rate (the int8 peak read
    436 GOP/s right after XNNPACK's fp32 run in the same process, 809 GOP/s on its own)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    peaks = {}
    for key, fn in (("int8_gops", peak_int8_gops), ("fp32_gflops", peak_fp32_gflops)):
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            peaks[key] = pool.submit(fn).result()
    return peaks


def peak_fp32_gflops(repeats: int = 10) -> float:
    """The machine's fp32 limit: the best n x n x n matrix multiply, in GFLOP/s, over torch.mm
    (MKL/oneDNN), ONNX Runtime's MatMul (MLAS) and XNNPACK's (an ExecuTorch Linear), n = 1024 and
    2048. (With torch.mm and MLAS alone the limit read 152 GFLOP/s while XNNPACK's convolutions ran
    resnet18 at 194.)"""
    import torch

    best = 0.0
    for n in (1024, 2048):
        a, b = torch.randn(n, n), torch.randn(n, n)
        best = max(best, _rate(n, lambda a=a, b=b: torch.mm(a, b), repeats),
                   _rate(n, _ort_matmul(n, "float32"), repeats), _rate(n, _xnnpack_matmul(n), repeats))
    return best


def _xnnpack_matmul(n: int) -> Callable[[], object]:
    """One n x n Linear (no bias) on an n x n input, lowered to XNNPACK and run by ExecuTorch."""
    import tempfile

    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.runtime import Runtime

    linear, x = torch.nn.Linear(n, n, bias=False).eval(), torch.randn(n, n)
    program = to_edge_transform_and_lower(torch.export.export(linear, (x,)), partitioner=[XnnpackPartitioner()])
    with tempfile.NamedTemporaryFile(suffix=".pte") as f:
        f.write(program.to_executorch().buffer)
        f.flush()
        method = Runtime.get().load_program(f.name).load_method("forward")
    return lambda: method.execute([x])


def peak_int8_gops(repeats: int = 10) -> float:
    """The machine's int8 limit: the best n x n x n int8 GEMM, in GOP/s, over PyTorch's x86
    quantized linear (fbgemm) and ONNX Runtime's MatMulInteger (MLAS), n = 1024 and 2048.
    (torch._int_mm on the CPU is a slow reference kernel, so it is not the limit.)"""

    best = 0.0
    for n in (1024, 2048):
        best = max(best, _rate(n, fbgemm_gemm(n, n, n), repeats), _rate(n, _ort_matmul(n, "int8"), repeats))
    return best


def fbgemm_gemm(m: int, k: int, n: int) -> Callable[[], object]:
    """One PyTorch x86 quantized linear (fbgemm, per-tensor int8 weights) of an m x k uint8 input by
    k x n weights."""
    import torch

    torch.backends.quantized.engine = "x86"
    w = torch.quantize_per_tensor(torch.randn(n, k), 0.05, 0, torch.qint8)
    packed = torch.ops.quantized.linear_prepack(w, None)
    x = torch.quantize_per_tensor(torch.rand(m, k), 0.01, 0, torch.quint8)
    return lambda: torch.ops.quantized.linear(x, packed, 0.1, 0)


def _ort_matmul(n: int, kind: str) -> Callable[[], object]:
    """One n x n x n ONNX Runtime MatMul (float32) or MatMulInteger (uint8 x int8)."""
    return _ort_gemm(n, n, n, kind)


def _ort_gemm(m: int, k: int, n: int, kind: str) -> Callable[[], object]:
    """One ONNX Runtime MatMul (float32) or MatMulInteger (uint8 x int8) of an m x k input by a
    constant k x n right side."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    if kind == "float32":
        a_type, b_array, out_type, op = (TensorProto.FLOAT, rng.random((k, n), dtype=np.float32),
                                         TensorProto.FLOAT, "MatMul")
        a = rng.random((m, k), dtype=np.float32)
    else:
        a_type, b_array, out_type, op = (TensorProto.UINT8, rng.integers(-128, 127, (k, n), dtype=np.int8),
                                         TensorProto.INT32, "MatMulInteger")
        a = rng.integers(0, 255, (m, k), dtype=np.uint8)
    b = helper.make_tensor("B", helper.np_dtype_to_tensor_dtype(b_array.dtype), [k, n], b_array.tobytes(), raw=True)
    graph = helper.make_graph([helper.make_node(op, ["A", "B"], ["Y"])], "gemm",
                              [helper.make_tensor_value_info("A", a_type, [m, k])],
                              [helper.make_tensor_value_info("Y", out_type, [m, n])], [b])
    session = ort.InferenceSession(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString(),
        providers=["CPUExecutionProvider"])
    return lambda: session.run(None, {"A": a})


def _rate(n: int, fn: Callable[[], object], repeats: int) -> float:
    fn()
    return 2 * n ** 3 / _best(fn, repeats) / 1e9


def _best(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best
