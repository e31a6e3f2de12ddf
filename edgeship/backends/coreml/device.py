"""Core ML's runner: an ``.mlpackage`` in Core ML (macOS only).

Device-side: shipped beside runner.py as coreml_device.py and imported by it, so it needs only the
standard library, numpy and its runtime, and imports nothing of edgeship (no f-strings, for old
device Pythons). On the host it is edgeship.backends.coreml.device.
"""
import importlib

import numpy as np

runner = importlib.import_module("edgeship.devices.runner" if __package__ else "runner")


class CoremlRunner(runner.Runner):
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
