"""PyTorch Mobile's runner: a ``.ptl`` in torch's lite interpreter.

Device-side: shipped beside runner.py as pytorch_mobile_device.py and imported by it, so it needs only the
standard library, numpy and its runtime, and imports nothing of edgeship (no f-strings, for old
device Pythons). On the host it is edgeship.backends.pytorch_mobile.device.
"""
import importlib

runner = importlib.import_module("edgeship.devices.runner" if __package__ else "runner")


class PytorchMobileRunner(runner.TorchRunner):
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
