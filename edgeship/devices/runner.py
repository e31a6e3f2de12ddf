"""edgeship device runner: load one artifact with its runtime, time it, return timings and outputs.

    python runner.py JOB.json

Runs on the device (or in a fresh process on the host). Needs only the standard library, numpy
and the runtime the job names, so it runs on a stock JetPack or macOS Python; it is copied to the
device beside the artifact. The job (JSON) names the runtime, the artifact and its sha256, an
inputs ``.npz`` (one array per input, N samples), the batch size, warmup, iterations and threads.
The runner checks the artifact's sha256 first, times ``iterations`` inferences on the first batch
after ``warmup`` untimed ones, then runs every batch and writes the outputs ``.npz`` (``out0``,
``out1``, ...) and a result JSON. Accuracy is computed by the host from those outputs.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import time
import traceback

import numpy as np

RUNTIMES = {}  # runtime id -> loader(path, options, threads) -> (predict, version)
# Modules imported before the load timer starts, so load_ms is the artifact's load, not the import.
IMPORTS = {"eager": ["torch", "edgeship.model"], "pytorch-mobile": ["torch", "torch.jit.mobile"],
           "executorch": ["torch", "executorch.runtime"], "onnxruntime": ["onnxruntime"],
           "coreml": ["coremltools"]}


def runtime(name):
    """Register a loader under a runtime id."""
    def register(fn):
        RUNTIMES[name] = fn
        return fn
    return register


def _to_numpy_list(out):
    """Flatten a runtime's outputs (tensor, array, tuple, list, dict) into a list of numpy arrays."""
    if isinstance(out, dict):
        out = list(out.values())
    if not isinstance(out, (list, tuple)):
        out = [out]
    flat = []
    for o in out:
        if isinstance(o, (list, tuple, dict)):
            flat.extend(_to_numpy_list(o))
        elif hasattr(o, "detach"):
            flat.append(o.detach().cpu().numpy())
        else:
            flat.append(np.asarray(o))
    return flat


def _torch_threads(threads):
    import torch

    if threads:
        torch.set_num_threads(int(threads))
    return torch.get_num_threads()


def _torch_predict(fn):
    import torch

    def predict(arrays):
        with torch.inference_mode():
            return _to_numpy_list(fn(*[torch.from_numpy(a) for a in arrays]))
    return predict


@runtime("pytorch-mobile")
def load_lite(path, options, threads):
    """A ``.ptl`` in torch's lite interpreter (what PyTorch Mobile runs on phones)."""
    import torch
    from torch.jit.mobile import _load_for_lite_interpreter

    _torch_threads(threads)
    if options.get("quantized_engine"):  # int8 weights are packed for the engine at load time
        torch.backends.quantized.engine = options["quantized_engine"]
    return _torch_predict(_load_for_lite_interpreter(path)), "torch " + torch.__version__.split("+")[0]


@runtime("executorch")
def load_executorch(path, options, threads):
    """A ``.pte`` in the ExecuTorch runtime; ``threads`` sizes the XNNPACK threadpool."""
    import torch
    from executorch.runtime import Runtime

    if threads:
        from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
        _unsafe_reset_threadpool(int(threads))
    method = Runtime.get().load_program(path).load_method("forward")

    def predict(arrays):
        return _to_numpy_list(method.execute([torch.from_numpy(a) for a in arrays]))
    return predict, "executorch " + _version("executorch")


ORT_LEVELS = {"disabled": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
              "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}


@runtime("onnxruntime")
def load_onnxruntime(path, options, threads):
    """An ``.onnx`` in ONNX Runtime; options: graph_optimization (disabled|basic|extended|all), providers."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    if threads:
        so.intra_op_num_threads = int(threads)
    so.inter_op_num_threads = 1
    level = options.get("graph_optimization", "all")
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, ORT_LEVELS[level])
    providers = options.get("providers") or ["CPUExecutionProvider"]
    session = ort.InferenceSession(path, sess_options=so, providers=providers)
    names = [i.name for i in session.get_inputs()]

    def predict(arrays):
        return session.run(None, dict(zip(names, arrays)))
    return predict, "onnxruntime " + ort.__version__


@runtime("coreml")
def load_coreml(path, options, threads):
    """An ``.mlpackage`` in Core ML (macOS only) with the compute units the profile names."""
    import coremltools as ct

    units = getattr(ct.ComputeUnit, options.get("compute_units", "ALL"))
    model = ct.models.MLModel(path, compute_units=units)
    spec = model.get_spec()
    inputs = [f.name for f in spec.description.input]
    outputs = [f.name for f in spec.description.output]

    def predict(arrays):
        result = model.predict(dict(zip(inputs, arrays)))
        return [np.asarray(result[name]) for name in outputs]
    return predict, "coremltools %s (Core ML, %s)" % (ct.__version__, options.get("compute_units", "ALL"))


@runtime("tensorrt")
def load_tensorrt(path, options, threads):
    """An ONNX model built into a TensorRT engine here (once; kept beside the model), run through
    Polygraphy's TrtRunner. Without TensorRT, the job's proxy runtime runs the ONNX instead,
    labelled as a proxy, with the reason in the notes."""
    try:
        import tensorrt
    except ImportError as e:
        reason = "TensorRT engine latency not measured here: cannot import tensorrt (%s)" % e
        return _proxy(path, options, threads, reason)
    engine, notes = _engine_for(path, options["engine"])
    try:
        from polygraphy.backend.common import BytesFromPath
        from polygraphy.backend.trt import EngineFromBytes, TrtRunner
    except ImportError:
        raise RuntimeError("running TensorRT engines needs Polygraphy on the device: pip install polygraphy")
    trt_runner = TrtRunner(EngineFromBytes(BytesFromPath(engine)))
    trt_runner.activate()
    names = list(trt_runner.get_input_metadata().keys())

    def predict(arrays):
        return list(trt_runner.infer(feed_dict=dict(zip(names, arrays))).values())
    return predict, "tensorrt " + tensorrt.__version__, notes


def _engine_for(onnx_path, settings):
    """The engine for ``onnx_path``: reused when present, else built with tensorrt_engine.py."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import tensorrt_engine

    folder, name = os.path.split(os.path.abspath(onnx_path))
    settings = dict(settings, onnx=name, engine=os.path.splitext(name)[0] + ".engine")
    engine = os.path.join(folder, settings["engine"])
    if os.path.exists(engine):
        return engine, ["engine reused: %s" % settings["engine"]]
    start = time.perf_counter()
    tensorrt_engine.build_engine(settings, folder)
    return engine, ["engine built on this device in %.1f s (%s)" % (time.perf_counter() - start, settings["precision"])]


def _trtexec_instead():
    """trtexec's path when TensorRT's Python bindings are missing but trtexec is there."""
    try:
        import tensorrt  # noqa: F401
        return None
    except ImportError:
        pass
    import shutil
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from tensorrt_engine import DEFAULT_TRTEXEC
    return shutil.which("trtexec") or (DEFAULT_TRTEXEC if os.path.exists(DEFAULT_TRTEXEC) else None)


def run_trtexec(job, artifact, trtexec):
    """Build and time the engine with trtexec; its summary gives the statistics (no outputs)."""
    import subprocess
    from tensorrt_engine import parse_trtexec_summary, trtexec_command

    folder, name = os.path.split(os.path.abspath(artifact))
    settings = dict(job["options"]["engine"], onnx=name, engine=os.path.splitext(name)[0] + ".engine")
    cmd = trtexec_command(settings, trtexec) + ["--iterations=%d" % int(job.get("iterations", 100)),
                                                "--duration=0", "--avgRuns=1"]
    proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True)
    summary = parse_trtexec_summary(proc.stdout).get("latency")
    if proc.returncode != 0 or not summary:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        raise RuntimeError("trtexec exited %d: %s" % (proc.returncode, " | ".join(tail)))
    return {"ok": True, "runtime": "tensorrt", "runtime_version": "tensorrt (trtexec)",
            "threads": None, "load_ms": None, "timings_ms": [], "summary_ms": summary,
            "peak_rss_mb": None, "samples": 0, "outputs": None,
            "notes": ["timed by trtexec (host latency: H2D + compute + D2H); warm-up is trtexec's "
                      "default 200 ms; no outputs, so accuracy is not measured on this device"]}


def _proxy(path, options, threads, reason):
    proxy = options.get("proxy")
    if not proxy:
        raise RuntimeError(reason)
    predict, version = RUNTIMES[proxy["runtime"]](path, proxy.get("options", {}), threads)
    return predict, proxy["label"], [reason, "timed instead with %s, graph optimization %s"
                                     % (version, proxy.get("options", {}).get("graph_optimization", "all"))]


@runtime("eager")
def load_eager(path, options, threads):
    """The float PyTorch module itself (host only: it needs edgeship and the model's source)."""
    import torch
    from edgeship.model import load_model
    from edgeship.spec import ModelSpec

    _torch_threads(threads)
    spec = ModelSpec.model_validate(options["spec"])
    spec.base_dir = options["base_dir"]
    module = load_model(spec, trust_weights=options.get("trust_weights", False)).module
    return _torch_predict(module), "torch " + torch.__version__.split("+")[0]


def _version(dist):
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:
        return "unknown"


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_path(path):
    """sha256 of a file; for a folder (an .mlpackage), of every file's relative path and sha256."""
    path = str(path)
    if not os.path.isdir(path):
        return sha256_file(path)
    lines = []
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            rel = os.path.relpath(full, path).replace(os.sep, "/")
            lines.append("%s  %s\n" % (sha256_file(full), rel))
    return hashlib.sha256("".join(sorted(lines)).encode()).hexdigest()


def peak_rss_mb():
    """Peak resident set size of this process in MiB, or None where the OS does not say.

    On Linux this reads VmHWM: getrusage's ru_maxrss survives exec, so a runner started from a
    large parent would report the parent's peak.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    try:
        import resource
    except ImportError:
        return None
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024.0 * 1024.0) if sys.platform == "darwin" else rss / 1024.0


def batches(inputs, names, batch):
    """Split N samples into batches of ``batch``, padding the last by repeating its final sample."""
    n = len(inputs[names[0]])
    out = []
    for start in range(0, n, batch):
        part = [inputs[k][start:start + batch] for k in names]
        short = batch - len(part[0])
        if short:
            part = [np.concatenate([a, np.repeat(a[-1:], short, axis=0)]) for a in part]
        out.append([np.ascontiguousarray(a) for a in part])
    return out, n


def run(job, base):
    """Do the job; return the result document (raises on failure)."""
    resolve = lambda p: p if os.path.isabs(p) else os.path.join(base, p)  # noqa: E731
    artifact = resolve(job["artifact"]) if job.get("artifact") else None
    if artifact and job.get("sha256"):
        actual = sha256_path(artifact)
        if actual != job["sha256"]:
            raise RuntimeError("artifact %s: sha256 %s does not match the expected %s"
                               % (artifact, actual, job["sha256"]))
    with np.load(resolve(job["inputs"]), allow_pickle=False) as npz:
        inputs = {k: npz[k] for k in npz.files}
    names = job["input_names"]
    data, n = batches(inputs, names, int(job.get("batch", 1)))
    if job["runtime"] == "tensorrt":
        trtexec = _trtexec_instead()
        if trtexec:
            return run_trtexec(job, artifact, trtexec)
    loader = RUNTIMES[job["runtime"]]
    import importlib
    for module in IMPORTS.get(job["runtime"], []):
        importlib.import_module(module)
    t0 = time.perf_counter_ns()
    loaded = loader(artifact, job.get("options", {}), job.get("threads"))
    load_ms = (time.perf_counter_ns() - t0) / 1e6
    predict, version, notes = loaded if len(loaded) == 3 else (loaded[0], loaded[1], [])
    for _ in range(int(job.get("warmup", 10))):
        predict(data[0])
    timings = []
    for _ in range(int(job.get("iterations", 100))):
        t0 = time.perf_counter_ns()
        predict(data[0])
        timings.append((time.perf_counter_ns() - t0) / 1e6)
    outputs = [predict(b) for b in data]
    merged = {"out%d" % i: np.concatenate([o[i] for o in outputs])[:n] for i in range(len(outputs[0]))}
    np.savez(resolve(job.get("outputs", "outputs.npz")), **merged)
    return {
        "ok": True, "runtime": job["runtime"], "runtime_version": version,
        "threads": job.get("threads") or _threads_in_use(job["runtime"]),
        "load_ms": load_ms, "timings_ms": timings, "peak_rss_mb": peak_rss_mb(),
        "samples": n, "outputs": job.get("outputs", "outputs.npz"), "notes": notes,
        "host": {"platform": platform.platform(), "machine": platform.machine(),
                 "python": platform.python_version(), "cpus": os.cpu_count()},
    }


def _threads_in_use(name):
    if name in ("eager", "pytorch-mobile"):
        import torch
        return torch.get_num_threads()
    return os.cpu_count()


def stop_at_deadline(seconds):
    """Stop this runner at the job's deadline (POSIX), so a job whose host gave up on it, or
    whose connection dropped, does not keep the device busy while the next job is timed."""
    import signal

    if not seconds or not hasattr(signal, "SIGALRM"):
        return

    def expire(signum, frame):
        raise TimeoutError("the runner stopped itself at the job's %.0f s timeout" % seconds)
    signal.signal(signal.SIGALRM, expire)
    signal.alarm(max(1, int(-(-seconds // 1))))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: runner.py JOB.json", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        job = json.load(f)
    base = os.path.dirname(os.path.abspath(argv[0]))
    result_path = os.path.join(base, job.get("result", "result.json"))
    try:
        if job["runtime"] not in RUNTIMES:
            raise RuntimeError("unknown runtime %r; this runner has: %s"
                               % (job["runtime"], ", ".join(sorted(RUNTIMES))))
        stop_at_deadline(job.get("deadline_s"))
        result = run(job, base)
        code = 0
    except Exception as e:  # the host reads the failure from the result, with the traceback
        result = {"ok": False, "error": "%s: %s" % (type(e).__name__, e), "traceback": traceback.format_exc()}
        code = 1
    tmp = result_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, result_path)
    return code


if __name__ == "__main__":
    sys.exit(main())
