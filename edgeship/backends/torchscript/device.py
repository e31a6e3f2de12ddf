"""TorchScript's runner: a ``.pt`` in full LibTorch's TorchScript interpreter.

Device-side: shipped beside runner.py as torchscript_device.py and imported by it, so it needs only the
standard library, numpy and its runtime, and imports nothing of edgeship (no f-strings, for old
device Pythons). On the host it is edgeship.backends.torchscript.device.
"""
import importlib

runner = importlib.import_module("edgeship.devices.runner" if __package__ else "runner")


class TorchscriptRunner(runner.TorchRunner):
    """A ``.pt`` (torch.jit.save) in full LibTorch's TorchScript interpreter, as torch::jit::load runs it."""

    runtime = "torchscript"
    imports = ("torch",)

    def load(self):
        import torch

        self.set_threads()
        self.use(torch.jit.load(self.path, map_location="cpu").eval())
