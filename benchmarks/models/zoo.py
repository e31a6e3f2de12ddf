"""The benchmark's model set beyond the demo: torchvision's resnet18 and mobilenet_v3_large, and a
small transformer encoder. No weights can be downloaded here, so weights are random but seeded:
latency, size and SQNR are meaningful with them; top-1 is not (their evaluation uses SQNR).

Freshly initialized batch-norm statistics (mean 0, variance 1) do not match what random weights
produce, and in mobilenet_v3_large the activations then shrink layer by layer until the logits
are about 1e-9: no int8 format can represent that, so quantization would read 0 dB for reasons
no trained model has. ``settle_batch_norm`` estimates the statistics on seeded random images, as
training would, so activations keep a realistic scale.
"""
from __future__ import annotations

import torch
from torch import nn


def settle_batch_norm(model: nn.Module, shape: tuple[int, ...] = (16, 3, 224, 224), batches: int = 4) -> nn.Module:
    """Batch-norm running statistics estimated on seeded uniform images (cumulative average)."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    gen = torch.Generator().manual_seed(1)
    model.train()
    with torch.no_grad():
        for _ in range(batches):
            model(torch.rand(shape, generator=gen))
    return model.eval()


def resnet18() -> nn.Module:
    from torchvision.models import resnet18 as build

    torch.manual_seed(0)
    return settle_batch_norm(build(weights=None))


def mobilenet_v3_large() -> nn.Module:
    from torchvision.models import mobilenet_v3_large as build

    torch.manual_seed(0)
    return settle_batch_norm(build(weights=None))


class Encoder(nn.Module):
    """A BERT-mini-sized encoder over 64 tokens of width 256: attention, layer norm, GELU MLP."""

    def __init__(self, width: int = 256, layers: int = 4, heads: int = 4, classes: int = 10) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x).mean(1))


def encoder() -> nn.Module:
    torch.manual_seed(0)
    model = Encoder()
    # nn.TransformerEncoder deep-copies one layer, so every layer would start with the same weights
    # (and exporters that share equal constants would store one): draw each layer afresh.
    for module in model.modules():
        for reset in ("reset_parameters", "_reset_parameters"):
            if module is not model and hasattr(module, reset):
                getattr(module, reset)()
    return model
