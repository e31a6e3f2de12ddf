"""torchscript: a frozen module saved for full LibTorch's torch::jit::load."""
from __future__ import annotations

from tests.lowering.conftest import sqnr_against_eager


def test_torchscript_fp32_saves_a_frozen_module_for_torch_jit_load_with_its_operators(lower, tiny_model) -> None:
    import torch

    artifact, predict = lower("torchscript", "trace")
    assert artifact.path.suffix == ".pt" and sqnr_against_eager(tiny_model, predict) >= 60
    assert artifact.details["frozen"] and "aten::linear" in artifact.details["operators"]
    assert all("::" in op and "." not in op for op in artifact.details["operators"])
    torch.jit.load(str(artifact.path))  # full TorchScript, not the lite interpreter's format
