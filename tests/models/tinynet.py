"""Tiny models for tests: fast to capture and lower, each built to exercise one behaviour."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn


class TinyNet(nn.Module):
    """Conv, batch norm, ReLU, a depthwise-separable residual block, pooling and a linear head."""

    def __init__(self, classes: int = 4) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pw = nn.Conv2d(8, 8, 1)
        self.head = nn.Linear(8, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.stem(x)
        y = torch.relu(self.pw(self.dw(y)) + y)
        return self.head(y.mean((2, 3)))


class AttentionNet(nn.Module):
    """nn.MultiheadAttention: fails jit.trace's own consistency check."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.attn(x, x, x)
        return self.head(y.mean(1))


class Uncapturable(nn.Module):
    """Data-dependent control flow (export fails), a code path that refuses tracing (trace fails,
    as libraries with untraceable code do) and numpy (script fails): no capture method can take it,
    yet it runs eagerly."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            x = x * 2
        if torch.jit.is_tracing():
            raise RuntimeError("this model's forward cannot be traced")
        return x + float(np.prod(x.shape))


def build(classes: int = 4) -> TinyNet:
    torch.manual_seed(0)
    model = TinyNet(classes)
    with torch.no_grad():  # non-trivial batch-norm statistics, so folding them is tested
        bn = model.stem[1]
        bn.running_mean.uniform_(-0.2, 0.2)
        bn.running_var.uniform_(0.5, 1.5)
    return model


def build_attention() -> AttentionNet:
    torch.manual_seed(0)
    return AttentionNet()


def build_uncapturable() -> Uncapturable:
    return Uncapturable()


def not_a_module() -> str:
    return "not a module"


class Inverse(nn.Module):
    """A matrix inverse: TorchScript runs it, Core ML's converter has no lowering for it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.inv(x + 4 * torch.eye(x.shape[-1])).sum(-1)


def build_inverse() -> Inverse:
    return Inverse()


class KeepsBest(nn.Module):
    """Scores rows of boxes and keeps the best by torchvision's NMS: a custom operator (torchvision::nms)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torchvision.ops import nms

        boxes = torch.cat([x[0, :, :2], x[0, :, :2] + 1 + x[0, :, 2:]], dim=1)
        keep = nms(boxes, x[0].sum(1), 0.5)
        return boxes[keep[:1]]


def build_keeps_best() -> KeepsBest:
    return KeepsBest()


class LayerOutputs(nn.Module):
    """Bias-free linear layers whose results the model returns: a weighted layer's output port is
    already a model output (OpenVINO's add_outputs then adds none for it)."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(16, 16, bias=False)
        self.second = nn.Linear(16, 4, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.first(x)
        return self.second(torch.relu(y)), y


def build_layer_outputs() -> LayerOutputs:
    torch.manual_seed(0)
    return LayerOutputs()


class Branchy(nn.Module):
    """Data-dependent control flow that torch.jit.script keeps: OpenVINO converts it to an If node,
    on which NNCF refuses its full bias correction."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x))
        if bool(y.mean() > 0.1):
            y = y * 2.0
        else:
            y = y + 1.0
        return self.head(y.mean((2, 3)))


def build_branchy() -> Branchy:
    torch.manual_seed(0)
    return Branchy()
