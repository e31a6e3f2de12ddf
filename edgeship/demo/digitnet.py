"""DigitNet: depthwise-separable convolutions, batch norm, hardswish and a residual, for 8x8 digits.

Small enough to lower in seconds, built from the blocks that matter on phones (MobileNet-style),
so every backend meets the same operators a real mobile model has.
"""
from __future__ import annotations

from torch import Tensor, nn


def conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1, act: bool = True) -> nn.Sequential:
    """Convolution without bias, batch norm, then hardswish unless ``act`` is False."""
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if act:
        layers.append(nn.Hardswish())
    return nn.Sequential(*layers)


class SeparableBlock(nn.Module):
    """Depthwise 3x3 then pointwise 1x1; a residual when shapes allow it."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.depthwise = conv_bn(cin, cin, 3, stride, groups=cin)
        self.residual = stride == 1 and cin == cout
        self.pointwise = conv_bn(cin, cout, 1, act=not self.residual)
        self.act = nn.Hardswish() if self.residual else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        y = self.pointwise(self.depthwise(x))
        return self.act(y + x) if self.residual else y


class DigitNet(nn.Module):
    """1x8x8 grayscale digit -> 10 class logits."""

    def __init__(self, width: int = 32, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(1, width, 3),
            SeparableBlock(width, 2 * width),
            SeparableBlock(2 * width, 2 * width),
            SeparableBlock(2 * width, 4 * width, stride=2),
            SeparableBlock(4 * width, 4 * width),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(4 * width, classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.pool(self.features(x)).flatten(1))


def build(width: int = 32, classes: int = 10) -> DigitNet:
    """The entry named in the demo's model.toml."""
    return DigitNet(width, classes)
