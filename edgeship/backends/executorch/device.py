"""ExecuTorch's runner: a ``.pte`` in the ExecuTorch runtime, through its binding alone.

Device-side: shipped beside runner.py as executorch_device.py and imported by it, so it needs only the
standard library, numpy and its runtime, and imports nothing of edgeship (no f-strings, for old
device Pythons). On the host it is edgeship.backends.executorch.device.
"""
import importlib

runner = importlib.import_module("edgeship.devices.runner" if __package__ else "runner")


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


class ExecutorchRunner(runner.Runner):
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
        self.version = "executorch " + runner.dist_version("executorch")

    def infer(self, arrays):
        return runner.to_numpy_list(self._method([self._torch.from_numpy(a) for a in arrays]))
