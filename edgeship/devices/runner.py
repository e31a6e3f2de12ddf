"""edgeship device runner: load one artifact with its runtime, time it, return timings and outputs.

    python runner.py JOB.json

Runs on the device (or in a fresh process on the host). Needs only the standard library, numpy
and the runtime the job names, so it runs on a stock JetPack or macOS Python; it is copied to the
device beside the artifact, with its companions protocol.py, hashing.py, tensorrt_engine.py, aoti_build.py
and cpu.py, and imports nothing of edgeship. The job (JSON) names the runtime, the artifact and its sha256, an inputs
``.npz`` (one array per input, N samples), the batch size, warmup, iterations and threads; its fields, and the
result's, are protocol.py's, which the runner checks the job against (a job of another protocol version is
refused, naming both) and builds the result through.
The runner checks the artifact's sha256 first, times ``iterations`` inferences on the first batch
after ``warmup`` untimed ones, then runs every batch and writes the outputs ``.npz`` (``out0``,
``out1``, ... in the model's flattened output order; ``out<i>.<sample>`` for an output whose length
varies by sample) and a result JSON, which also names the CPU it ran on (``cpu``). Accuracy is
computed by the host from those outputs.

Each runtime is a ``Runner`` (after Polygraphy's runners): ``load()`` the artifact, ``infer()`` a
batch, ``close()``; ``run()`` does all the timing. The host-only ``eager`` runtime lives in
``edgeship/devices/eager.py``, which registers its runner here and calls ``main()``.
"""
from __future__ import annotations

import gc
import importlib
import json
import os
import platform
import struct
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def sibling(name):
    """Import the module shipped beside this file (hashing, tensorrt_engine). On the host, where this
    file is edgeship.devices.runner, that is the package's own module; on a device runner.py runs as a
    lone script, so it imports its companions by folder (which leaves sys.path again afterwards)."""
    if __package__:
        return importlib.import_module("%s.%s" % (__package__, name))
    sys.path.insert(0, HERE)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(HERE)


sha256_path = sibling("hashing").sha256_path
protocol = sibling("protocol")

RUNNERS = {}  # runtime id -> Runner subclass, filled as each subclass is defined


class NotForThisCpu(RuntimeError):
    """The artifact is made for CPUs this one is not (a bf16 IR on a CPU without bf16 instructions):
    not run here, by design, rather than failed (its lowering names such devices)."""


class Runner:
    """How one runtime runs an artifact: ``load()`` it, ``infer()`` a batch, ``close()``.

    A subclass names its ``runtime`` id, which registers it in RUNNERS, and the modules to
    ``imports`` (``import_runtime()`` imports them) before the load timer starts, so load_ms is the
    artifact's load, not the runtime's import. ``load()`` sets ``version`` (the runtime as the report
    shows it) and may add ``notes``.
    Runners do not time themselves: ``run()`` times every runtime the same way.
    """

    runtime = None
    imports = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.runtime:
            RUNNERS[cls.runtime] = cls

    def __init__(self, path, options, threads):
        self.path = path
        self.options = options or {}
        self.threads = threads
        self.version = "unknown"
        self.notes = []

    def load(self):
        """Load the artifact at ``path``, ready to infer."""
        raise NotImplementedError

    def infer(self, arrays):
        """Outputs (a list of numpy arrays) for one batch: ``arrays``, one per input."""
        raise NotImplementedError

    def close(self):
        """Release what load() holds; default: nothing beyond what the process exit frees."""

    @classmethod
    def import_runtime(cls):
        """Import the runtime (``imports``), before the load timer starts."""
        for module in cls.imports:
            importlib.import_module(module)

    def threads_in_use(self):
        """The threads the runtime runs with when the job does not say."""
        return os.cpu_count()

    @classmethod
    def measured_elsewhere(cls, job, artifact):
        """A whole result document measured by an outside tool instead of load/infer, or None."""
        return None


def runner_class(runtime):
    """The Runner registered for ``runtime``; the error lists the ones this runner has."""
    if runtime not in RUNNERS:
        raise RuntimeError("unknown runtime %r; this runner has: %s" % (runtime, ", ".join(sorted(RUNNERS))))
    return RUNNERS[runtime]


def start(cls, path, options, threads):
    """A loaded ``cls`` runner and its load time in ms (the runtime's imports done first, untimed)."""
    cls.import_runtime()
    runner = cls(path, options, threads)
    t0 = time.perf_counter_ns()
    runner.load()
    return runner, (time.perf_counter_ns() - t0) / 1e6


def open_runner(runtime, path, options=None, threads=None):
    """A loaded runner for ``runtime``, loaded exactly as a job loads it; close() it when done."""
    return start(runner_class(runtime), path, options or {}, threads)[0]


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


class TorchRunner(Runner):
    """What the runtimes running a torch module share: torch's thread count, tensors in and out."""

    def set_threads(self):
        import torch

        if self.threads:
            torch.set_num_threads(int(self.threads))

    def use(self, module):
        """Infer with ``module`` (a callable on torch tensors)."""
        import torch

        self._torch, self._module = torch, module
        self.version = "torch " + torch.__version__.split("+")[0]

    def infer(self, arrays):
        torch = self._torch
        with torch.inference_mode():
            return _to_numpy_list(self._module(*[torch.from_numpy(a) for a in arrays]))

    def threads_in_use(self):
        return self._torch.get_num_threads()


class PyTorchMobileRunner(TorchRunner):
    """A ``.ptl`` in torch's lite interpreter (what PyTorch Mobile runs on phones)."""

    runtime = "pytorch-mobile"
    imports = ("torch", "torch.jit.mobile")

    def load(self):
        import torch
        from torch.jit.mobile import _load_for_lite_interpreter

        self.set_threads()
        if self.options.get("quantized_engine"):  # int8 weights are packed for the engine at load time
            torch.backends.quantized.engine = self.options["quantized_engine"]
        self.use(_load_for_lite_interpreter(self.path))


class TorchScriptRunner(TorchRunner):
    """A ``.pt`` (torch.jit.save) in full LibTorch's TorchScript interpreter, as torch::jit::load runs it."""

    runtime = "torchscript"
    imports = ("torch",)

    def load(self):
        import torch

        self.set_threads()
        self.use(torch.jit.load(self.path, map_location="cpu").eval())


class AotiRunner(TorchRunner):
    """An AOTInductor ``.pt2`` package, loaded by torch._inductor.aoti_load_package (the Python side of
    AOTIModelPackageLoader). Refused, before its code is loaded, on a CPU lacking a flag the package
    was compiled for (its metadata's ``edgeship.cpu_flags``): it would die of an illegal instruction.

    An exported program instead (options.compile_on = "device") is compiled into a package here
    first, with aoti_build.py, or the one compiled from it by an earlier run is reused
    (``aoti_package_for``). That happens when the runner is made, before start() starts the load
    timer: load_ms stays the package's load, and the compile's time goes into the notes."""

    runtime = "aoti"
    imports = ("torch", "torch._inductor")

    def __init__(self, path, options, threads):
        super().__init__(path, options, threads)
        self.package, self.compile_notes = aoti_package_for(path)

    def load(self):
        import torch

        self.notes = self.compile_notes + check_package_cpu(aoti_metadata(self.package), cpu_facts())
        self.set_threads()
        self.use(torch._inductor.aoti_load_package(self.package))
        self.version = "torch %s AOTInductor" % torch.__version__.split("+")[0]


def aoti_package_for(path):
    """The package to load for the artifact at ``path``, and notes: the artifact itself when it is a
    package; for an exported program, the package beside it (``<name>.aoti.pt2``), reused when it
    can stand in for this artifact here (``stale_package``), else compiled here with aoti_build.py."""
    aoti_build = sibling("aoti_build")
    if aoti_build.is_package(path):
        return path, []
    package = os.path.splitext(os.path.abspath(path))[0] + ".aoti.pt2"
    stale = stale_package(package, sha256_path(path))
    if stale is None:
        return package, ["package reused: %s, compiled on this device from this artifact" % os.path.basename(package)]
    began = time.perf_counter()
    try:
        aoti_build.build_package(path, aoti_build.read_settings(path), package)
    except TimeoutError as e:
        raise TimeoutError("%s, compiling the AOTInductor package (the first run on a device compiles it): "
                           "raise [latency] timeout_s in the profile" % e) from None
    return package, ["package compiled on this device in %.1f s (%s)" % (time.perf_counter() - began, stale)]


def stale_package(package, source_sha256):
    """Why the package at ``package`` cannot stand in for the exported program whose sha256 is
    ``source_sha256`` on this device (None: it can): none there, made from another artifact (the
    sha256 its metadata records) or by another torch, or compiled for a CPU this one is not."""
    import torch

    if not os.path.exists(package):
        return "none compiled here before"
    try:
        metadata = aoti_metadata(package)
    except Exception as e:  # a truncated or foreign file: compile again over it
        return "the one there is unreadable (%s)" % e
    if metadata.get("edgeship.source_sha256") != source_sha256:
        return "the one there was made from another artifact"
    if metadata.get("edgeship.torch") != torch.__version__:
        return "the one there was compiled by torch %s" % metadata.get("edgeship.torch")
    try:
        check_package_cpu(metadata, cpu_facts())
    except RuntimeError as e:
        return "the one there does not run here: %s" % e
    return None


def aoti_metadata(path):
    """The metadata an AOTInductor package carries (AOTI_MACHINE, AOTI_CPU_ISA, edgeship.cpu_flags ...),
    read from the archive without loading its code; {} when it has none."""
    import zipfile

    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            if name.endswith("wrapper_metadata.json"):
                return json.loads(archive.read(name).decode("utf-8"))
    return {}


def check_package_cpu(metadata, facts):
    """Raise when this CPU cannot run the package (another architecture, a missing flag, named);
    return notes (what was checked, or why it could not be)."""
    needed = [f for f in (metadata.get("edgeship.cpu_flags") or "").split(",") if f]
    machine = (metadata.get("AOTI_MACHINE") or "").lower()
    here = (platform.machine() or "").lower()
    if machine and here and machine != here and not {machine, here} <= {"x86_64", "amd64"}:
        raise RuntimeError("this AOTInductor package was compiled for %s; this device is %s" % (machine, here))
    if not needed:
        return ["the package names no CPU flags it needs (not built by edgeship?): not checked"]
    if not facts or facts.get("source") == "unknown" or not facts.get("flags"):
        return ["this CPU's flags could not be read: the package's needs (%s) were not checked" % ", ".join(needed)]
    lacking = [f for f in needed if f not in facts["flags"]]
    if lacking:
        raise RuntimeError("this AOTInductor package was compiled for a CPU with %s; this CPU (%s) lacks %s and "
                           "would stop with an illegal instruction: rebuild it with options.isa = \"auto\" for "
                           "this device, or a level it has" % (", ".join(needed), facts.get("model") or "model unknown",
                                                               ", ".join(lacking)))
    # the flags are in the package's metadata (and, compiled by the build, in lowering.details.cpu_flags_required)
    return ["the package's CPU needs (%s, %d flags) checked against this CPU: all present"
            % (metadata.get("edgeship.isa", "?"), len(needed))]


# ExecuTorch's C++ runtime as a Python extension module: ``_C`` since ExecuTorch 1.2, ``_portable_lib`` before.
EXECUTORCH_BINDINGS = ("executorch.extension.pybindings._C", "executorch.extension.pybindings._portable_lib")


def executorch_binding():
    """ExecuTorch's runtime binding, without the compiler. The public wrappers (``executorch.runtime``,
    ``pybindings.portable_lib``) first import ``executorch.exir``, the whole compiler with
    torch._inductor, for one warning class: measured here, 6 s for torch and the binding against 25 s
    through the wrapper, and 41 s more under qemu-aarch64. The binding needs only libtorch loaded, which
    ``import torch`` does (as the wrapper does). The wrapper stays the fallback for an ExecuTorch that
    names its binding otherwise."""
    import torch  # noqa: F401 - loads libtorch, which the binding links against

    for name in EXECUTORCH_BINDINGS:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    return importlib.import_module("executorch.extension.pybindings.portable_lib")


class ExecuTorchRunner(Runner):
    """A ``.pte`` in the ExecuTorch runtime; ``threads`` sizes the XNNPACK threadpool. Loaded as
    ``executorch.runtime.Runtime.load_program`` loads it (the same call, the same verification), through
    the binding alone."""

    runtime = "executorch"
    imports = ("torch", "executorch")

    @classmethod
    def import_runtime(cls):
        super().import_runtime()
        executorch_binding()

    def load(self):
        import torch

        binding = executorch_binding()
        if self.threads:
            binding._unsafe_reset_threadpool(int(self.threads))
        self._torch = torch
        program = binding._load_program(self.path, enable_etdump=False, debug_buffer_size=0,
                                        program_verification=binding.Verification.InternalConsistency)
        self._method = program.load_method("forward")
        self.version = "executorch " + _version("executorch")

    def infer(self, arrays):
        return _to_numpy_list(self._method([self._torch.from_numpy(a) for a in arrays]))


ORT_LEVELS = {"disabled": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
              "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}


class OnnxRuntimeRunner(Runner):
    """An ``.onnx`` in ONNX Runtime; options: graph_optimization (disabled|basic|extended|all), providers."""

    runtime = "onnxruntime"
    imports = ("onnxruntime",)

    def load(self):
        import onnxruntime as ort

        so = ort.SessionOptions()
        if self.threads:
            so.intra_op_num_threads = int(self.threads)
        so.inter_op_num_threads = 1
        level = self.options.get("graph_optimization", "all")
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, ORT_LEVELS[level])
        providers = self.options.get("providers") or ["CPUExecutionProvider"]
        self._session = ort.InferenceSession(self.path, sess_options=so, providers=providers)
        self._names = [i.name for i in self._session.get_inputs()]
        self.version = "onnxruntime " + ort.__version__

    def infer(self, arrays):
        return self._session.run(None, dict(zip(self._names, arrays)))


OV_PRECISIONS = {"f32": "f32", "float32": "f32", "bf16": "bf16", "bfloat16": "bf16", "f16": "f16",
                 "float16": "f16"}
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


class OpenVinoRunner(Runner):
    """An OpenVINO IR folder (model.xml + model.bin) compiled for the CPU plugin; options:
    inference_precision (f32|bf16; unset: what the IR's rt_info edgeship/inference_precision says),
    performance_hint (LATENCY|THROUGHPUT). The plugin is told the precision and the threads, and
    what it compiled with is read back: a run whose plugin computes in another precision than the
    one asked is refused, not timed under the wrong name (on CPUs with AVX512-BF16 or AMX the plugin
    runs f32 models in bf16 unless told otherwise)."""

    runtime = "openvino"
    imports = ("openvino",)

    def load(self):
        import openvino as ov

        core = ov.Core()
        xml = os.path.join(self.path, "model.xml") if os.path.isdir(self.path) else self.path
        model = core.read_model(xml)
        want = self.options.get("inference_precision") or _ov_rt_precision(model)
        facts = cpu_facts()
        if want == "bf16" and facts and facts.get("flags") and not any(f in facts["flags"] for f in BF16_FLAGS):
            raise NotForThisCpu("this IR is validated in bf16 and this CPU (%s) has no bf16 instructions (%s): "
                                "OpenVINO would compute it in f32; build openvino fp32 or int8 for this device"
                                % (facts.get("model") or "model unknown", " or ".join(BF16_FLAGS)))
        config = {"PERFORMANCE_HINT": self.options.get("performance_hint", "LATENCY")}
        if self.threads:
            config["INFERENCE_NUM_THREADS"] = int(self.threads)
        if want:
            config["INFERENCE_PRECISION_HINT"] = want
        self._compiled = core.compile_model(model, "CPU", config)
        self._request = self._compiled.create_infer_request()
        used = _ov_precision(self._compiled.get_property("INFERENCE_PRECISION_HINT"))
        if want and used != want:
            raise RuntimeError("asked OpenVINO's CPU plugin for %s inference and it compiled for %s" % (want, used))
        self._threads = int(self._compiled.get_property("INFERENCE_NUM_THREADS"))
        self.version = "openvino %s CPU (%s, %s)" % (ov.__version__.split("-")[0], _x86_isa(facts), used)
        self.notes = ["OpenVINO CPU plugin: inference precision %s%s, %s hint, %d threads"
                      % (used, "" if want else " (the plugin's default: none was asked)",
                         config["PERFORMANCE_HINT"], self._threads)]

    def infer(self, arrays):
        return [np.asarray(a) for a in self._request.infer(list(arrays)).to_tuple()]

    def threads_in_use(self):
        return self._threads


def _ov_rt_precision(model):
    """The compute precision the IR records it was validated with (edgeship's rt_info), or None."""
    key = ["edgeship", "inference_precision"]
    return model.get_rt_info(key).astype(str) if model.has_rt_info(key) else None


def _ov_precision(value):
    """An INFERENCE_PRECISION_HINT property value (an element type) as f32 / bf16 / f16."""
    text = str(getattr(value, "get_type_name", lambda: value)()).lower()
    text = text.replace("<type: '", "").replace("'>", "")
    return OV_PRECISIONS.get(text, text)


def _x86_isa(facts):
    """The widest x86 extension set the CPU plugin's kernels use on this CPU, for the runtime label."""
    flags = (facts or {}).get("flags") or []
    for flag, name in (("amx_tile", "AMX"), ("avx512_vnni", "AVX-512 VNNI"), ("avx512f", "AVX-512"),
                       ("avx_vnni", "AVX2 VNNI"), ("avx2", "AVX2"), ("sse4_2", "SSE4.2")):
        if flag in flags:
            return name
    return (facts or {}).get("arch") or "ISA unknown"


class CoreMlRunner(Runner):
    """An ``.mlpackage`` in Core ML (macOS only) with the compute units the profile names."""

    runtime = "coreml"
    imports = ("coremltools",)

    def load(self):
        import coremltools as ct

        units = self.options.get("compute_units", "ALL")
        self._model = ct.models.MLModel(self.path, compute_units=getattr(ct.ComputeUnit, units))
        spec = self._model.get_spec()
        self._inputs = [f.name for f in spec.description.input]
        self._outputs = [f.name for f in spec.description.output]
        self.version = "coremltools %s (Core ML, %s)" % (ct.__version__, units)

    def infer(self, arrays):
        result = self._model.predict(dict(zip(self._inputs, arrays)))
        return [np.asarray(result[name]) for name in self._outputs]


class TensorRtRunner(Runner):
    """An ONNX model built into a TensorRT engine here (once; kept beside the model), run through
    Polygraphy's TrtRunner. Without TensorRT's Python bindings, trtexec times the engine when it is
    installed; otherwise the job's proxy runtime runs the ONNX instead, labelled as a proxy, with
    the reason in the notes."""

    runtime = "tensorrt"
    _trt = None
    _proxy = None

    @classmethod
    def measured_elsewhere(cls, job, artifact):
        trtexec = _trtexec_instead()
        return run_trtexec(job, artifact, trtexec) if trtexec else None

    def load(self):
        try:
            import tensorrt
        except ImportError as e:
            self._load_proxy("TensorRT engine latency not measured here: cannot import tensorrt (%s)" % e)
            return
        engine, self.notes = _engine_for(self.path, self.options["engine"])
        try:
            from polygraphy.backend.common import BytesFromPath
            from polygraphy.backend.trt import EngineFromBytes, TrtRunner
        except ImportError:
            raise RuntimeError("running TensorRT engines needs Polygraphy on the device: "
                               "pip install polygraphy") from None
        self._trt = TrtRunner(EngineFromBytes(BytesFromPath(engine)))
        self._trt.activate()
        self._names = list(self._trt.get_input_metadata().keys())
        self.version = "tensorrt " + tensorrt.__version__

    def _load_proxy(self, reason):
        proxy = self.options.get("proxy")
        if not proxy:
            raise RuntimeError(reason)
        options = proxy.get("options", {})
        self._proxy = runner_class(proxy["runtime"])(self.path, options, self.threads)
        self._proxy.load()
        self.version = proxy["label"]
        self.notes = [reason, "timed instead with %s, graph optimization %s"
                      % (self._proxy.version, options.get("graph_optimization", "all"))]

    def infer(self, arrays):
        if self._proxy is not None:
            return self._proxy.infer(arrays)
        return list(self._trt.infer(feed_dict=dict(zip(self._names, arrays))).values())

    def close(self):
        if self._proxy is not None:
            self._proxy.close()
        if self._trt is not None:
            self._trt.deactivate()
            self._trt = None


def _engine_for(onnx_path, settings):
    """The engine for ``onnx_path``: reused when present, else built with tensorrt_engine.py."""
    folder, name = os.path.split(os.path.abspath(onnx_path))
    settings = dict(settings, onnx=name, engine=os.path.splitext(name)[0] + ".engine")
    engine = os.path.join(folder, settings["engine"])
    if os.path.exists(engine):
        return engine, ["engine reused: %s" % settings["engine"]]
    began = time.perf_counter()
    sibling("tensorrt_engine").build_engine(settings, folder)
    return engine, ["engine built on this device in %.1f s (%s)" % (time.perf_counter() - began, settings["precision"])]


def _trtexec_instead():
    """trtexec's path when TensorRT's Python bindings are missing but trtexec is there."""
    try:
        import tensorrt  # noqa: F401
        return None
    except ImportError:
        pass
    import shutil
    default = sibling("tensorrt_engine").DEFAULT_TRTEXEC
    return shutil.which("trtexec") or (default if os.path.exists(default) else None)


def run_trtexec(job, artifact, trtexec):
    """Build and time the engine with trtexec; its summary gives the statistics (no outputs)."""
    import subprocess

    tensorrt_engine = sibling("tensorrt_engine")
    folder, name = os.path.split(os.path.abspath(artifact))
    settings = dict(job["options"]["engine"], onnx=name, engine=os.path.splitext(name)[0] + ".engine")
    cmd = tensorrt_engine.trtexec_command(settings, trtexec) + [
        "--iterations=%d" % job["iterations"], "--duration=0", "--avgRuns=1"]
    proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True)
    summary = tensorrt_engine.parse_trtexec_summary(proc.stdout).get("latency")
    if proc.returncode != 0 or not summary:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        raise RuntimeError("trtexec exited %d: %s" % (proc.returncode, " | ".join(tail)))
    return protocol.result_document(
        ok=True, runtime="tensorrt", runtime_version="tensorrt (trtexec)", threads=None, load_ms=None,
        timings_ms=[], summary_ms=summary, peak_rss_mb=None, samples=0, outputs=None,
        notes=["timed by trtexec (host latency: H2D + compute + D2H); warm-up is trtexec's "
               "default 200 ms; no outputs, so accuracy is not measured on this device"])


def _version(dist):
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:
        return "unknown"


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


def is_stored(info):
    """Whether zip member ``info`` is stored uncompressed and unencrypted (as numpy.savez writes it)."""
    import zipfile

    return info.compress_type == zipfile.ZIP_STORED and not info.flag_bits & 1


def stored_offset(raw, info):
    """Where the bytes of zip member ``info`` start in the open file ``raw`` when ``is_stored``; else None."""
    if not is_stored(info):
        return None
    raw.seek(info.header_offset + 26)  # the local file header: its name and extra field lengths
    lengths = raw.read(4)
    if len(lengths) < 4:
        raise ValueError("a zip member's local header is cut short")
    name_len, extra_len = struct.unpack("<HH", lengths)
    return info.header_offset + 30 + name_len + extra_len


def load_npz(path):
    """The arrays of an .npz by name. Those stored uncompressed (numpy.savez, as edgeship writes
    them) are memory-mapped copy-on-write (writable; a write never reaches the file), so a large
    evaluation set is paged in a batch at a time instead of read whole; the rest are read."""
    import zipfile

    out = {}
    with zipfile.ZipFile(path) as zf, open(path, "rb") as raw:
        for info in zf.infolist():
            if not info.filename.endswith(".npy"):  # not an array (np.load would return its bytes)
                continue
            name = info.filename[:-4]
            start = stored_offset(raw, info)
            if start is not None:
                raw.seek(start)
                version = np.lib.format.read_magic(raw)
                read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                    np.lib.format.read_array_header_2_0
                shape, fortran, dtype = read_header(raw)
                if not dtype.hasobject and all(shape):
                    out[name] = np.memmap(path, dtype=dtype, mode="c", offset=raw.tell(), shape=shape,
                                          order="F" if fortran else "C")
                    continue
            with zf.open(info) as f:
                out[name] = np.lib.format.read_array(f, allow_pickle=False)
    return out


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


def merge_batches(per_batch, batch, n):
    """One entry per output from the outputs of every batch (lists in the same order): an array
    [n, ...] when every batch's output has the batch first, else (the length varies: detections
    after NMS) a list with one array per sample, which needs a batch of 1."""
    counts = set(len(o) for o in per_batch)
    if len(counts) > 1:
        raise RuntimeError("the artifact returned %s outputs for different batches" % sorted(counts))
    merged = []
    for i in range(len(per_batch[0])):
        parts = [np.asarray(o[i]) for o in per_batch]
        if all(p.ndim and p.shape[0] == batch for p in parts) and len(set(p.shape for p in parts)) == 1:
            merged.append(np.concatenate(parts)[:n])
        elif batch == 1:
            merged.append(parts[:n])
        else:
            raise RuntimeError("output %d has shapes %s, not [%d, ...] for a batch of %d: outputs whose length "
                               "varies by sample need a batch of 1" % (i, [list(p.shape) for p in parts[:3]],
                                                                        batch, batch))
    return merged


def encode_outputs(merged):
    """The npz entries of merged outputs: ``out<i>`` for an array, ``out<i>.<sample>`` per sample of a
    list (``out<i>.count`` holds the sample count, so a list of none is kept too)."""
    entries = {}
    for i, value in enumerate(merged):
        if isinstance(value, list):
            entries["out%d.count" % i] = np.asarray(len(value))
            for s, part in enumerate(value):
                entries["out%d.%d" % (i, s)] = part
        else:
            entries["out%d" % i] = value
    return entries


def decode_outputs(npz):
    """The merged outputs back from :func:`encode_outputs`' entries (a loaded npz or a dict)."""
    files = set(npz.files if hasattr(npz, "files") else npz)
    merged = []
    while True:
        i = len(merged)
        if "out%d" % i in files:
            merged.append(npz["out%d" % i])
        elif "out%d.count" % i in files:
            merged.append([npz["out%d.%d" % (i, s)] for s in range(int(npz["out%d.count" % i]))])
        else:
            return merged


def check_sha256(artifact, expected):
    """Refuse an artifact that is not the one the host measured for (a stale or partial copy)."""
    if artifact and expected:
        actual = sha256_path(artifact)
        if actual != expected:
            raise RuntimeError("artifact %s: sha256 %s does not match the expected %s" % (artifact, actual, expected))


def time_inference(runner, batch, warmup, iterations):
    """Milliseconds of each of ``iterations`` inferences on ``batch``, after ``warmup`` untimed ones,
    and how many CPUs other processes kept busy meanwhile (``other_cpu_load``; None where unknown)."""
    for _ in range(warmup):
        runner.infer(batch)
    timings = []
    before = cpu_time_snapshot()
    for _ in range(iterations):
        t0 = time.perf_counter_ns()
        runner.infer(batch)
        timings.append((time.perf_counter_ns() - t0) / 1e6)
    return timings, other_cpu_load(before, cpu_time_snapshot())


def cpu_time_snapshot():
    """(wall seconds, CPU seconds every process on this machine used, CPU seconds this process used),
    from /proc/stat (Linux); None elsewhere."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        hz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return None
    # user nice system idle iowait irq softirq steal ...: busy is all but idle and iowait
    busy = sum(fields[:8]) - fields[3] - fields[4]
    own = os.times()
    return time.perf_counter(), float(busy) / hz, own[0] + own[1]


def other_cpu_load(before, after):
    """CPUs' worth of work other processes did while the iterations were timed: 0 on a quiet machine,
    1.0 when another process kept one core busy (the timings then show a shared machine)."""
    if before is None or after is None or after[0] - before[0] < 0.05:
        return None
    wall = after[0] - before[0]
    others = (after[1] - before[1]) - (after[2] - before[2])
    return round(max(0.0, others / wall), 2)


def run(job, base):
    """Do the job (checked, with every field: ``protocol.job_with_defaults``); return the result
    document (raises on failure)."""
    resolve = lambda p: p if os.path.isabs(p) else os.path.join(base, p)  # noqa: E731
    cls = runner_class(job["runtime"])
    artifact = resolve(job["artifact"]) if job["artifact"] else None
    check_sha256(artifact, job["sha256"])
    inputs = load_npz(resolve(job["inputs"]))  # a large evaluation set: paged in a batch at a time
    data, n = batches(inputs, job["input_names"], job["batch"])
    measured = cls.measured_elsewhere(job, artifact)
    if measured is not None:
        return measured
    runner, load_ms = start(cls, artifact, job["options"], job["threads"])
    try:
        iterations = job["iterations"]  # 0: outputs only (a dynamic model at its min or max size)
        warmup = job["warmup"] if iterations else 0
        timings, other_load = time_inference(runner, data[0], warmup, iterations)
        # own copies: a view of torch's output kept ~50 KB of the runtime's memory alive per batch
        # (1.1 GB over 21,900 batches, measured); the timed runs above are not copied
        outputs = [[np.array(o) for o in runner.infer(b)] for b in data]
        threads = job["threads"] or runner.threads_in_use()
    finally:
        runner.close()
    merged = merge_batches(outputs, job["batch"], n)
    np.savez(resolve(job["outputs"]), **encode_outputs(merged))
    return protocol.result_document(
        ok=True, runtime=job["runtime"], runtime_version=runner.version, threads=threads,
        warmup=warmup, iterations=iterations, load_ms=load_ms, timings_ms=timings,
        other_cpu_load=other_load, peak_rss_mb=peak_rss_mb(),
        samples=n, outputs=job["outputs"], notes=runner.notes,
        host={"platform": platform.platform(), "machine": platform.machine(),
              "python": platform.python_version(), "cpus": os.cpu_count()},
    )


def cpu_facts():
    """This device's CPU (model, architecture, the ISA flags that decide int8 kernels) from the
    companion cpu.py; None when it is not beside this file (a runner copied alone)."""
    try:
        return sibling("cpu").cpu_facts()
    except ImportError:
        return None


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


def refusal(job, problems):
    """Why this runner refuses ``job``: written in another protocol version (both named), or its problems."""
    version = protocol.other_version(job)
    if version is not None:
        return ("job.json is device protocol %r; this runner.py reads and writes protocol %d: it was written by "
                "another edgeship than the one this runner.py came with (a runner left on the device from an "
                "older or newer edgeship? run the job with the runner.py of the edgeship that wrote it)"
                % (version, protocol.PROTOCOL_VERSION))
    return "job.json does not follow device protocol %d: %s" % (protocol.PROTOCOL_VERSION, "; ".join(problems))


def main(argv=None):
    """Run the job file named on the command line; write its result JSON (a failure included)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: runner.py JOB.json", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        job = json.load(f)
    base = os.path.dirname(os.path.abspath(argv[0]))
    name = job.get("result") if isinstance(job, dict) else None
    result_path = os.path.join(base, name if isinstance(name, str) else protocol.JOB["result"].default)
    try:
        problems = protocol.job_problems(job)
        if problems:
            raise protocol.ProtocolError(refusal(job, problems))
        job = protocol.job_with_defaults(job)
        stop_at_deadline(job["deadline_s"])
        result = run(job, base)
        result["cpu"] = cpu_facts()
        problems = protocol.result_problems(result)
        if problems:  # this runner's own slip: fail here rather than hand the host a result it misreads
            raise protocol.ProtocolError("the runner's result does not follow device protocol %d: %s"
                                         % (protocol.PROTOCOL_VERSION, "; ".join(problems)))
        code = 0
    except Exception as e:  # the host reads the failure from the result, with the traceback
        mine = isinstance(e, (NotForThisCpu, protocol.ProtocolError))  # its message says it all
        result = protocol.result_document(
            ok=False, error=str(e) if mine else "%s: %s" % (type(e).__name__, e),
            traceback=traceback.format_exc(), not_for_this_cpu=isinstance(e, NotForThisCpu))
        code = 1
    tmp = result_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, result_path)
    return code


if __name__ == "__main__":
    code = main()
    gc.freeze()  # the result is written: exit without a last full collection of torch's heap (0.7 s)
    sys.exit(code)
