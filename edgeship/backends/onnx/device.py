"""ONNX's runner: an ``.onnx`` in ONNX Runtime.

Device-side: shipped beside runner.py as onnx_device.py and imported by it, so it needs only the
standard library, numpy and its runtime, and imports nothing of edgeship (no f-strings, for old
device Pythons). On the host it is edgeship.backends.onnx.device.
"""
import importlib

runner = importlib.import_module("edgeship.devices.runner" if __package__ else "runner")


ORT_LEVELS = {"disabled": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
              "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}


class OnnxRunner(runner.Runner):
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
