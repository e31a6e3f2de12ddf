"""Timing that survives a shared, noisy machine, used by every benchmark here.

Each candidate is loaded in its own worker process, so no runtime's thread pool competes with
another's, and the candidates are timed in interleaved rounds (A B C, then C A B, ...: a seeded
random order each round) of ``block`` runs each; a candidate's figure is the median of its
per-round medians, so drift in the machine's load hits every candidate alike. A process has its own
speed too (where its memory and threads land: the same ONNX file in eight processes here spread
0.097-0.134 ms on the demo, 4.54-4.89 ms on the encoder), so each candidate can be loaded in several
processes, its figure taken over all of them, and their spread reported as the noise floor of the
comparison. The machine's own limit (large fp32 and int8 matrix multiplies) is measured here too.
"""
from __future__ import annotations

import importlib
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

WARMUP = 10
SETTLE_S = 0.1


def runner_loader(runtime: str, path: str | None, options: dict, threads: int | None) -> Callable:
    """An artifact loaded exactly as the device runner loads it: a callable on a list of arrays."""
    from edgeship.devices.eager import open_runner  # runner.py's, with the host-only eager runtime too

    return open_runner(runtime, path, options, threads).infer


def interleaved(jobs: dict[str, tuple[str, tuple]], inputs: list[np.ndarray], rounds: int = 7,
                block: int = 20, processes: int = 1, spread: dict[str, float] | None = None) -> dict[str, float]:
    """Median p50 (ms) per job. A job is ``("module:function", args)``: the function, called in
    the worker with ``args``, returns a callable that runs one inference on ``inputs``. With
    ``processes`` > 1 each job runs in that many workers, all interleaved; ``spread`` (when given)
    gets, per job, (slowest - fastest worker's median) / the job's median."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    pipes = {}
    for name, (loader, args) in jobs.items():
        for k in range(processes):
            parent, child = context.Pipe()
            context.Process(target=_worker, args=(child, loader, args, inputs), daemon=True).start()
            pipes[name, k] = parent
    failed = {}
    for (name, k), pipe in list(pipes.items()):
        reply = pipe.recv()
        if reply != "ready":
            failed[name] = reply
            del pipes[name, k]
    for key in [key for key in pipes if key[0] in failed]:  # a job counts only if all its workers loaded
        pipes.pop(key).send(0)
    medians: dict[tuple[str, int], list[float]] = {key: [] for key in pipes}
    order = random.Random(0)
    for _ in range(rounds):
        # A fresh seeded order each round: no candidate always follows the same neighbour (whose
        # thread pool may still be spinning down) or always comes first.
        for key in order.sample(list(pipes), len(pipes)):
            time.sleep(SETTLE_S)  # let the previous worker's spinning thread pool go idle
            pipes[key].send(block)
            medians[key].append(statistics.median(pipes[key].recv()))
    for pipe in pipes.values():
        pipe.send(0)
    out: dict[str, Any] = {}
    for name in dict.fromkeys(key[0] for key in pipes):
        per_worker = [statistics.median(values) for (n, _), values in medians.items() if n == name]
        out[name] = statistics.median([v for (n, _), values in medians.items() if n == name for v in values])
        if spread is not None:
            spread[name] = (max(per_worker) - min(per_worker)) / out[name]
    out.update({name: None for name in failed})
    for name, reason in failed.items():
        print(f"  {name}: could not be loaded for timing: {reason}", flush=True)
    return out


def _worker(conn, loader: str, args: tuple, inputs: list[np.ndarray]) -> None:
    """Load once, warm up, then time ``n`` runs per request until 0 comes. The runtimes' own
    chatter on stderr is dropped; a load failure comes back through the pipe."""
    import os

    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    from edgeship.cli import quiet_libraries

    quiet_libraries()
    try:
        module, _, function = loader.partition(":")
        predict = getattr(importlib.import_module(module), function)(*args)
        for _ in range(WARMUP):
            predict(inputs)
    except Exception as e:  # reported by the parent; the other candidates are still timed
        conn.send(f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
        return
    conn.send("ready")
    while n := conn.recv():
        times = []
        for _ in range(n):
            start = time.perf_counter_ns()
            predict(inputs)
            times.append((time.perf_counter_ns() - start) / 1e6)
        conn.send(times)


def peak_fp32_gflops(repeats: int = 5) -> float:
    """The machine's fp32 limit: the best n x n x n matrix multiply, in GFLOP/s, over torch.mm
    (MKL/oneDNN) and ONNX Runtime's MatMul (MLAS), n = 1024 and 2048."""
    import torch

    best = 0.0
    for n in (1024, 2048):
        a, b = torch.randn(n, n), torch.randn(n, n)
        best = max(best, _rate(n, lambda a=a, b=b: torch.mm(a, b), repeats),
                   _rate(n, _ort_matmul(n, "float32"), repeats))
    return best


def peak_int8_gops(repeats: int = 5) -> float:
    """The machine's int8 limit: the best n x n x n int8 GEMM, in GOP/s, over PyTorch's x86
    quantized linear (fbgemm) and ONNX Runtime's MatMulInteger (MLAS), n = 1024 and 2048.
    (torch._int_mm on the CPU is a slow reference kernel, so it is not the limit.)"""
    import torch

    torch.backends.quantized.engine = "x86"
    best = 0.0
    for n in (1024, 2048):
        w = torch.quantize_per_tensor(torch.randn(n, n), 0.05, 0, torch.qint8)
        packed = torch.ops.quantized.linear_prepack(w, None)
        x = torch.quantize_per_tensor(torch.rand(n, n), 0.01, 0, torch.quint8)
        fbgemm = lambda x=x, packed=packed: torch.ops.quantized.linear(x, packed, 0.1, 0)  # noqa: E731
        best = max(best, _rate(n, fbgemm, repeats), _rate(n, _ort_matmul(n, "int8"), repeats))
    return best


def _ort_matmul(n: int, kind: str) -> Callable[[], object]:
    """One ONNX Runtime MatMul (float32) or MatMulInteger (uint8 x int8) with a constant right side."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    if kind == "float32":
        a_type, b_array, out_type, op = (TensorProto.FLOAT, rng.random((n, n), dtype=np.float32),
                                         TensorProto.FLOAT, "MatMul")
        a = rng.random((n, n), dtype=np.float32)
    else:
        a_type, b_array, out_type, op = (TensorProto.UINT8, rng.integers(-128, 127, (n, n), dtype=np.int8),
                                         TensorProto.INT32, "MatMulInteger")
        a = rng.integers(0, 255, (n, n), dtype=np.uint8)
    b = helper.make_tensor("B", helper.np_dtype_to_tensor_dtype(b_array.dtype), [n, n], b_array.tobytes(), raw=True)
    graph = helper.make_graph([helper.make_node(op, ["A", "B"], ["Y"])], "peak",
                              [helper.make_tensor_value_info("A", a_type, [n, n])],
                              [helper.make_tensor_value_info("Y", out_type, [n, n])], [b])
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
