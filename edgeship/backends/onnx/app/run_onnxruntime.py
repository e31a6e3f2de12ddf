"""Run an edgeship ONNX model on .npy inputs with ONNX Runtime's CPU execution provider, with the
session settings edgeship measured it with, and time it.

    python3 python/run_onnxruntime.py MODEL.onnx INPUT.npy... [--runs N] [--warmup W] [--threads T]
        [--graph-optimization disabled|basic|extended|all] [--out DIR]

The inputs are one .npy per model input, in the model's order. The first run's outputs are printed
(shape, dtype, top-1 of each row) and written to DIR/outputs/out0.npy, out1.npy ...; then W warmup
runs and N timed runs, written to DIR/timings.json with their median (p50). --threads sets the
intra-op threads (inter-op: 1), --graph-optimization the session's level (the variant's
options.graph_optimization; default all), as edgeship's runner sets them.

Needs only the standard library, numpy and onnxruntime (pip install onnxruntime).
Exit codes: 0 done; 1 the model failed to load or run; 2 bad arguments or an input that does not fit
the model.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

RUN_FAILED, REFUSED = 1, 2
LEVELS = {"disabled": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
          "all": "ORT_ENABLE_ALL"}
DTYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
          "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8, "tensor(uint8)": np.uint8,
          "tensor(bool)": np.bool_}


class Failure(Exception):
    """What stops the run, with its exit code."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def parse_args(argv):
    parser = argparse.ArgumentParser(description="Run an edgeship ONNX model on .npy inputs and time it.")
    parser.add_argument("model", help="model.onnx")
    parser.add_argument("inputs", nargs="+", help="one .npy per model input, in the model's order")
    parser.add_argument("--runs", type=int, default=100, help="timed runs (default 100)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed runs before them (default 10)")
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (default: ONNX Runtime's)")
    parser.add_argument("--graph-optimization", choices=list(LEVELS), default="all",
                        help="the session's graph optimization level (default all)")
    parser.add_argument("--out", default="edgeship-out", help="where outputs/ and timings.json go")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.warmup < 0 or args.threads < 0:
        parser.error("--runs takes a whole number >= 1, --warmup and --threads >= 0")
    return args


def session(path, threads, level):
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[level])
    return ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])


def fits(shape, declared):
    """Whether an array's shape fits an input's declared shape (names and None are free dimensions)."""
    return len(shape) == len(declared) and all(not isinstance(d, int) or d == s for s, d in zip(shape, declared))


def read_inputs(paths, sess):
    """The feed: each input's name and its array, checked against the input's type and shape."""
    ports = sess.get_inputs()
    if len(paths) != len(ports):
        raise Failure(REFUSED, "the model has %d input(s) (%s); %d .npy file(s) given" % (
            len(ports), ", ".join(p.name for p in ports), len(paths)))
    feed = {}
    for path, port in zip(paths, ports):
        try:
            array = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise Failure(REFUSED, "%s: not a .npy file this program reads (%s)" % (path, e)) from None
        want = DTYPES.get(port.type)
        if want is None or array.dtype != want:
            raise Failure(REFUSED, "%s: dtype %s; input %s takes %s" % (path, array.dtype, port.name, port.type))
        if not fits(array.shape, port.shape):
            raise Failure(REFUSED, "%s: shape %s; input %s takes %s" % (path, list(array.shape), port.name,
                                                                        port.shape))
        feed[port.name] = np.ascontiguousarray(array)
    return feed


def describe(name, output):
    """One line on an output: shape, dtype and, for scores, the top-1 index of each row."""
    text = "%s: shape %s, %s" % (name, list(output.shape), output.dtype)
    if output.ndim >= 1 and output.shape[-1] > 1 and np.issubdtype(output.dtype, np.floating):
        text += ", top-1 %s" % output.reshape(-1, output.shape[-1]).argmax(axis=1).tolist()
    return text


def run(args):
    import onnxruntime as ort

    if not os.path.isfile(args.model):
        raise Failure(REFUSED, "%s: no such file" % args.model)
    sess = session(args.model, args.threads, args.graph_optimization)
    feed = read_inputs(args.inputs, sess)
    outputs = [np.asarray(o) for o in sess.run(None, feed)]
    names = [o.name for o in sess.get_outputs()]
    os.makedirs(os.path.join(args.out, "outputs"), exist_ok=True)
    for i, (name, output) in enumerate(zip(names, outputs)):
        np.save(os.path.join(args.out, "outputs", "out%d.npy" % i), output)
        print(describe(name, output))
    for _ in range(args.warmup):
        sess.run(None, feed)
    timings_ms = []
    for _ in range(args.runs):
        start = time.perf_counter()
        sess.run(None, feed)
        timings_ms.append((time.perf_counter() - start) * 1000.0)
    runtime = "onnxruntime %s CPUExecutionProvider" % ort.__version__
    doc = {"runtime": runtime, "model": args.model, "graph_optimization": args.graph_optimization,
           "threads": args.threads or None, "warmup": args.warmup, "runs": args.runs, "outputs": names,
           "timings_ms": timings_ms, "p50_ms": float(np.median(timings_ms)), "min_ms": min(timings_ms)}
    with open(os.path.join(args.out, "timings.json"), "w") as f:
        json.dump(doc, f, indent=2)
    print("%s, %s thread(s): p50 %.3f ms over %d runs; wrote %d output(s) and timings.json to %s"
          % (runtime, args.threads or "default", doc["p50_ms"], args.runs, len(outputs), args.out))


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run(args)
    except Failure as e:
        print("run_onnxruntime: %s" % e, file=sys.stderr)
        return e.code
    except Exception as e:  # the runtime's own errors (a model it cannot read or run)
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        print("run_onnxruntime: %s: %s" % (type(e).__name__, " ".join(lines[:6])), file=sys.stderr)
        return RUN_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())
