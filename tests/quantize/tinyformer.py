"""A tiny transformer block (attention with softmax, layer norm, residual adds, a feed-forward
layer) for the operator-scope tests: quantize/scope.py reads it as a transformer."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from edgeship.calibration import Dataset


class TinyFormer(nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.ffn = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        attention = torch.softmax(q @ k.transpose(1, 2) / 4.0, dim=-1) @ v
        h = self.norm(x + self.out(attention))
        return h + self.ffn(h)


def build() -> TinyFormer:
    torch.manual_seed(0)
    return TinyFormer().eval()


def samples(n: int = 16, seed: int = 0) -> Dataset:
    return Dataset({"input": np.random.default_rng(seed).normal(size=(n, 8, 16)).astype(np.float32)}, None,
                   "tinyformer samples")
