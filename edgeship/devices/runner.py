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
    loader = RUNTIMES[job["runtime"]]
    import importlib
    for module in IMPORTS.get(job["runtime"], []):
        importlib.import_module(module)
    t0 = time.perf_counter_ns()
    predict, version = loader(artifact, job.get("options", {}), job.get("threads"))
    load_ms = (time.perf_counter_ns() - t0) / 1e6
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
        "samples": n, "outputs": job.get("outputs", "outputs.npz"),
        "host": {"platform": platform.platform(), "machine": platform.machine(),
                 "python": platform.python_version(), "cpus": os.cpu_count()},
    }


def _threads_in_use(name):
    if name in ("eager", "pytorch-mobile"):
        import torch
        return torch.get_num_threads()
    return os.cpu_count()


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
