"""A model whose quantization error starts in its first layer, where the two sensitivity measures
disagree: each later layer's output inherits the first layer's error and adds a little of its own,
so the accumulated measure ranks the last layer worst, while quantizing the first layer alone is
what costs the model most."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from edgeship.calibration import Dataset

OUTLIER = 50.0  # one input pixel, far out of the others' [0, 1): it sets the input's quantization range


class Culprit(nn.Module):
    """A 3x3 convolution whose input range an outlier pixel sets (in channel 0, which it reads with
    zero weights, so the float outputs never see it), then three identity 1x1 convolutions whose
    biases each take a third of the mean off: the signal shrinks layer by layer while the first
    layer's error passes through unchanged, so each layer's output reads worse than the one before."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Conv2d(3, 8, 3, padding=1)
        self.body = nn.Sequential(*[nn.Conv2d(8, 8, 1) for _ in range(3)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(self.first(x))


def build() -> Culprit:
    torch.manual_seed(0)
    model = Culprit()
    with torch.no_grad():
        model.first.weight[:, 0] = 0
        mean = model.first(torch.from_numpy(samples().inputs["input"])).mean((0, 2, 3))
        for conv in model.body:
            conv.weight.copy_(torch.eye(8).view(8, 8, 1, 1))
            conv.bias.copy_(-mean / len(model.body))
    return model


def samples(n: int = 32, seed: int = 0) -> Dataset:
    """``n`` seeded inputs in [0, 1) with the outlier pixel in channel 0."""
    x = np.random.default_rng(seed).random((n, 3, 16, 16), dtype=np.float32)
    x[:, 0, 0, 0] = OUTLIER
    return Dataset({"input": x}, None, "culprit samples")
