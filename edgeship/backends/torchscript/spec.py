"""The torchscript backend's declaration (TorchScript for LibTorch): name, suffix, runtime, capture
methods, precisions, its int8 quantizer, its Options model and its answers to the shared hooks."""
from __future__ import annotations

from pydantic import Field

from edgeship.backends.spec import BackendSpec
from edgeship.config import StrictModel


class TorchscriptSpec(BackendSpec):
    """TorchScript for full LibTorch: a ``.pt`` loaded by ``torch::jit::load`` (not the lite interpreter)."""

    name = "torchscript"
    suffix = ".pt"
    runtime = "torchscript"
    device_modules = ("device",)
    runs_in_arm_root = True
    capture_methods = ("trace", "script")
    bundle_platforms = ("linux",)
    bundle_templates = {"README.md:linux-loads": "app/README.linux-loads.md.j2",
                        "README.md:linux-cpu": "app/README.linux-cpu.md.j2"}
    precisions = ("fp32",)
    dynamic_shapes = None  # TorchScript keeps sizes symbolic where the code does; lowering runs min, opt and max

    class Options(StrictModel):
        """Options of the torchscript backend."""

        freeze: bool = Field(True, description="torch.jit.freeze: weights inlined as constants, batch norm "
                                               "folded into convolutions.")
        optimize_for_inference: bool = Field(
            False, description="torch.jit.optimize_for_inference after freezing (oneDNN layouts on x86; the "
                               "artifact then needs a LibTorch built with oneDNN).")
