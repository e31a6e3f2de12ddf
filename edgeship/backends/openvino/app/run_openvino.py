"""Run an edgeship OpenVINO IR on .npy inputs with the OpenVINO runtime's CPU plugin, as edgeship
validated it, and time it.

    python3 python/run_openvino.py MODEL.xml INPUT.npy... [--runs N] [--warmup W] [--threads T] [--out DIR]

MODEL.xml is a model.openvino/ folder's graph (its weights, model.bin, lie beside it; the folder
itself is taken too). The IR records, in its runtime info (edgeship/inference_precision), the
precision edgeship validated it in: f32 or bf16. The model is compiled for the CPU with that
INFERENCE_PRECISION_HINT and PERFORMANCE_HINT LATENCY, and what the plugin compiled for is read
back: left alone, the plugin computes an f32 model in bf16 on CPUs with AVX512-BF16 or AMX, which
is not the accuracy edgeship measured. The inputs are one .npy per model input, in the model's
order. The first run's outputs are printed (shape, dtype, top-1 of each row) and written to
DIR/outputs/out0.npy, out1.npy ...; then W warmup runs and N timed runs, written to
DIR/timings.json with their median (p50).

Needs only the standard library, numpy and openvino (pip install openvino).
Exit codes: 0 done; 1 the model failed to load or run; 2 bad arguments or an input that does not fit
the model; 3 this CPU's plugin cannot compute in the precision the IR was validated in.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

RT_KEY = ["edgeship", "inference_precision"]
RUN_FAILED, REFUSED, WRONG_CPU = 1, 2, 3


class Failure(Exception):
    """What stops the run, with its exit code."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def parse_args(argv):
    parser = argparse.ArgumentParser(description="Run an edgeship OpenVINO IR on .npy inputs and time it.")
    parser.add_argument("model", help="model.xml (or its model.openvino folder)")
    parser.add_argument("inputs", nargs="+", help="one .npy per model input, in the model's order")
    parser.add_argument("--runs", type=int, default=100, help="timed runs (default 100)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed runs before them (default 10)")
    parser.add_argument("--threads", type=int, default=0, help="INFERENCE_NUM_THREADS (default: the plugin's)")
    parser.add_argument("--out", default="edgeship-out", help="where outputs/ and timings.json go")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.warmup < 0 or args.threads < 0:
        parser.error("--runs takes a whole number >= 1, --warmup and --threads >= 0")
    return args


def recorded_precision(model):
    """The precision the IR was validated in (f32 or bf16), or None for an IR edgeship did not write."""
    return model.get_rt_info(RT_KEY).astype(str) if model.has_rt_info(RT_KEY) else None


def compile_for_cpu(core, model, precision, threads):
    """The model compiled for the CPU in ``precision``; Failure(3) when the plugin would compute otherwise."""
    import openvino.properties as props
    import openvino.properties.hint as hints

    capabilities = core.get_property("CPU", props.device.capabilities)
    if precision == "bf16" and "BF16" not in capabilities:
        raise Failure(WRONG_CPU, "this IR was validated computing in bf16 and this CPU has no bf16 instructions "
                                 "(AVX512-BF16 or AMX): its plugin would compute in f32; use an fp32 or int8 variant")
    config = {hints.performance_mode: hints.PerformanceMode.LATENCY}
    if precision:
        config[hints.inference_precision] = precision
    if threads:
        config[props.inference_num_threads] = threads
    compiled = core.compile_model(model, "CPU", config)
    used = compiled.get_property(hints.inference_precision).get_type_name()
    if precision and used != precision:
        raise Failure(WRONG_CPU, "asked the CPU plugin to compute in %s and it compiled for %s" % (precision, used))
    return compiled, used


def read_inputs(paths, compiled):
    """One array per model input, checked against the input's element type and shape."""
    import openvino as ov

    if len(paths) != len(compiled.inputs):
        raise Failure(REFUSED, "the model has %d input(s) (%s); %d .npy file(s) given" % (
            len(compiled.inputs), ", ".join(p.get_any_name() for p in compiled.inputs), len(paths)))
    arrays = []
    for path, port in zip(paths, compiled.inputs):
        try:
            array = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise Failure(REFUSED, "%s: not a .npy file this program reads (%s)" % (path, e)) from None
        want = port.get_element_type().to_dtype()
        if array.dtype != want:
            raise Failure(REFUSED, "%s: dtype %s; input %s takes %s" % (path, array.dtype, port.get_any_name(), want))
        if not port.get_partial_shape().compatible(ov.PartialShape(list(array.shape))):
            raise Failure(REFUSED, "%s: shape %s; input %s takes %s" % (
                path, list(array.shape), port.get_any_name(), port.get_partial_shape()))
        arrays.append(np.ascontiguousarray(array))
    return arrays


def describe(name, output):
    """One line on an output: shape, dtype and, for scores, the top-1 index of each row."""
    text = "%s: shape %s, %s" % (name, list(output.shape), output.dtype)
    if output.ndim >= 1 and output.shape[-1] > 1 and np.issubdtype(output.dtype, np.floating):
        text += ", top-1 %s" % output.reshape(-1, output.shape[-1]).argmax(axis=1).tolist()
    return text


def time_runs(request, inputs, warmup, runs):
    for _ in range(warmup):
        request.infer(inputs)
    timings_ms = []
    for _ in range(runs):
        start = time.perf_counter()
        request.infer(inputs)
        timings_ms.append((time.perf_counter() - start) * 1000.0)
    return timings_ms


def run(args):
    import openvino as ov

    xml = os.path.join(args.model, "model.xml") if os.path.isdir(args.model) else args.model
    if not os.path.isfile(xml):
        raise Failure(REFUSED, "%s: no such file" % xml)
    core = ov.Core()
    model = core.read_model(xml)
    precision = recorded_precision(model)
    compiled, used = compile_for_cpu(core, model, precision, args.threads)
    request = compiled.create_infer_request()
    inputs = read_inputs(args.inputs, compiled)
    outputs = [np.array(o) for o in request.infer(inputs).to_tuple()]
    names = [port.get_any_name() for port in compiled.outputs]
    os.makedirs(os.path.join(args.out, "outputs"), exist_ok=True)
    for i, (name, output) in enumerate(zip(names, outputs)):
        np.save(os.path.join(args.out, "outputs", "out%d.npy" % i), output)
        print(describe(name, output))
    timings_ms = time_runs(request, inputs, args.warmup, args.runs)
    threads = int(compiled.get_property("INFERENCE_NUM_THREADS"))
    runtime = "openvino %s CPU" % ov.__version__.split("-")[0]
    doc = {"runtime": runtime, "model": args.model, "inference_precision": used,
           "recorded_precision": precision, "performance_hint": "LATENCY", "threads": threads,
           "warmup": args.warmup, "runs": args.runs, "outputs": names, "timings_ms": timings_ms,
           "p50_ms": float(np.median(timings_ms)), "min_ms": min(timings_ms)}
    with open(os.path.join(args.out, "timings.json"), "w") as f:
        json.dump(doc, f, indent=2)
    print("%s, %s inference, %d thread(s): p50 %.3f ms over %d runs; wrote %d output(s) and timings.json to %s"
          % (runtime, used, threads, doc["p50_ms"], args.runs, len(outputs), args.out))


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run(args)
    except Failure as e:
        print("run_openvino: %s" % e, file=sys.stderr)
        return e.code
    except Exception as e:  # the runtime's own errors (a model it cannot read or run)
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        print("run_openvino: %s: %s" % (type(e).__name__, " ".join(lines[:6])), file=sys.stderr)
        return RUN_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())
