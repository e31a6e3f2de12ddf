"""TensorRT's runner: an ONNX model built into an engine here (engine.py), run by Polygraphy or trtexec.

Device-side: shipped beside runner.py as tensorrt_device.py and imported by it, so it needs only the
standard library, numpy and its runtime, and imports nothing of edgeship (no f-strings, for old
device Pythons). On the host it is edgeship.backends.tensorrt.device.
"""
import importlib
import os
import time

runner = importlib.import_module("edgeship.devices.runner" if __package__ else "runner")


class TensorrtRunner(runner.Runner):
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
        self._proxy = runner.runner_class(proxy["runtime"])(self.path, options, self.threads)
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
    runner.companion(__name__, "engine").build_engine(settings, folder)
    return engine, ["engine built on this device in %.1f s (%s)" % (time.perf_counter() - began, settings["precision"])]


def _trtexec_instead():
    """trtexec's path when TensorRT's Python bindings are missing but trtexec is there."""
    try:
        import tensorrt  # noqa: F401
        return None
    except ImportError:
        pass
    import shutil
    default = runner.companion(__name__, "engine").DEFAULT_TRTEXEC
    return shutil.which("trtexec") or (default if os.path.exists(default) else None)


def run_trtexec(job, artifact, trtexec):
    """Build and time the engine with trtexec; its summary gives the statistics (no outputs)."""
    import subprocess

    tensorrt_engine = runner.companion(__name__, "engine")
    folder, name = os.path.split(os.path.abspath(artifact))
    settings = dict(job["options"]["engine"], onnx=name, engine=os.path.splitext(name)[0] + ".engine")
    cmd = tensorrt_engine.trtexec_command(settings, trtexec) + [
        "--iterations=%d" % job["iterations"], "--duration=0", "--avgRuns=1"]
    proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True)
    summary = tensorrt_engine.parse_trtexec_summary(proc.stdout).get("latency")
    if proc.returncode != 0 or not summary:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        raise RuntimeError("trtexec exited %d: %s" % (proc.returncode, " | ".join(tail)))
    return runner.protocol.result_document(
        ok=True, runtime="tensorrt", runtime_version="tensorrt (trtexec)", threads=None, import_ms=None,
        load_ms=None, first_inference_ms=None, timings_ms=[], summary_ms=summary, peak_rss_mb=None,
        rss_over_baseline_mb=None, samples=0, outputs=None,
        notes=["timed by trtexec (host latency: H2D + compute + D2H); warm-up is trtexec's "
               "default 200 ms; no outputs, so accuracy is not measured on this device",
               runner.protocol.not_measured(["import_ms", "load_ms", "first_inference_ms", "rss_over_baseline_mb"],
                                            "trtexec builds and times the engine in its own process and prints "
                                            "no load time, first run or memory of it")])
