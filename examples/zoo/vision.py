"""torchvision classifiers and segmenters with seeded random weights that carry information.

No weights can be downloaded here, so every model is torchvision's architecture with random
weights (the spec's seed seeds torch before the entry runs: every process builds the same ones).
A freshly initialised network is not yet a fair stand-in for a trained one, in three ways this
module corrects:

- Batch-norm statistics start at mean 0, variance 1, which random weights do not produce: in
  mobilenet_v3 the activations then shrink layer by layer until the logits are about 1e-9, and
  no int8 format represents that. ``settle_batch_norm`` estimates the statistics on the zoo's
  synthetic images (zoo_data.py) at the spec's resolution, as training on them would.
- Some parameters start at zero or near it, so part of the network carries nothing: the
  VisionTransformer's head (all-zero logits) and class token, and ConvNeXt's layer scale (1e-6:
  every block's contribution is a millionth of the residual, so an artifact that dropped the
  blocks would still match). They get the values a trained model's are of the order of.
- Nothing else is changed: an artifact is compared with exactly this float model.

Every entry takes the input side length (``image_size``, from the spec's ``entry_kwargs``) so the
batch-norm statistics are estimated at the resolution the model is built and evaluated at.
"""
from __future__ import annotations

from torch import nn

SETTLE_IMAGES = 32   # enough for stable running statistics, quick at 128-160 px
SETTLE_SEED = 3      # zoo_data's evaluation and calibration images use seeds 1 and 2


def settle_batch_norm(model: nn.Module, image_size: int) -> nn.Module:
    """Batch-norm running statistics estimated on zoo_data's synthetic images (cumulative average,
    batches of 8), then eval mode: the statistics of the kind of images the model is evaluated and
    calibrated on, as training leaves them. The images come from their own seeded generator."""
    import numpy as np
    import torch
    from zoo_data import images

    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return model.eval()
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    batch = np.concatenate(list(images(SETTLE_IMAGES, image_size, SETTLE_SEED)))
    model.train()
    with torch.no_grad(), torch.random.fork_rng(devices=[]):  # dropout's draws leave the global RNG alone
        for part in np.split(batch, SETTLE_IMAGES // 8):
            model(torch.from_numpy(part))
    return model.eval()


def _classifier(name: str, image_size: int, **kwargs: object) -> nn.Module:
    from torchvision import models

    return settle_batch_norm(getattr(models, name)(weights=None, **kwargs), image_size)


def resnet18(image_size: int = 128) -> nn.Module:
    """ResNet-18 (11.7 M parameters)."""
    return _classifier("resnet18", image_size)


def mobilenet_v3_small(image_size: int = 128) -> nn.Module:
    """MobileNetV3-Small (2.5 M): hard-swish, squeeze-excitation."""
    return _classifier("mobilenet_v3_small", image_size)


def mobilenet_v2(image_size: int = 128) -> nn.Module:
    """MobileNetV2 (3.5 M): inverted residuals, ReLU6."""
    return _classifier("mobilenet_v2", image_size)


def efficientnet_b0(image_size: int = 128) -> nn.Module:
    """EfficientNet-B0 (5.3 M): SiLU, squeeze-excitation, stochastic depth (off in eval)."""
    return _classifier("efficientnet_b0", image_size)


def squeezenet1_1(image_size: int = 128) -> nn.Module:
    """SqueezeNet 1.1 (1.2 M): no batch norm; fire modules, a convolutional classifier."""
    return _classifier("squeezenet1_1", image_size)


def shufflenet_v2_x0_5(image_size: int = 128) -> nn.Module:
    """ShuffleNetV2 x0.5 (1.4 M): channel split and shuffle (reshape/transpose)."""
    return _classifier("shufflenet_v2_x0_5", image_size)


def mnasnet0_5(image_size: int = 128) -> nn.Module:
    """MNASNet 0.5 (2.2 M)."""
    return _classifier("mnasnet0_5", image_size)


def regnet_y_400mf(image_size: int = 128) -> nn.Module:
    """RegNetY-400MF (4.3 M): grouped convolutions, squeeze-excitation."""
    return _classifier("regnet_y_400mf", image_size)


def convnext_tiny(image_size: int = 128, layer_scale: float = 0.1) -> nn.Module:
    """ConvNeXt-Tiny (28.6 M): 7x7 depthwise convolutions, LayerNorm, GELU. Its layer scale
    starts at 1e-6 (blocks nearly silent); set to ``layer_scale`` instead, so the blocks count.
    No batch norm, so nothing to settle (``image_size`` is taken for a uniform entry signature)."""
    from torchvision.models import convnext_tiny as build

    model = build(weights=None, layer_scale=layer_scale)
    return model.eval()


def vit_small(image_size: int = 64, patch_size: int = 8, layers: int = 4, heads: int = 3, hidden: int = 192,
              classes: int = 1000) -> nn.Module:
    """A small VisionTransformer (DeiT-Tiny widths, 4 layers; 1.9 M): 64 patches of 8x8 and a
    class token. torchvision starts the head and the class token at zero (all-zero logits); both
    are drawn here as a Linear layer and a position embedding are."""
    from torchvision.models import VisionTransformer

    model = VisionTransformer(image_size=image_size, patch_size=patch_size, num_layers=layers, num_heads=heads,
                              hidden_dim=hidden, mlp_dim=4 * hidden, num_classes=classes)
    model.heads.head.reset_parameters()
    nn.init.normal_(model.class_token, std=0.02)   # as torchvision draws the position embedding
    return model.eval()


def lraspp_mobilenet_v3_large(image_size: int = 160, classes: int = 21) -> nn.Module:
    """LR-ASPP on MobileNetV3-Large (3.2 M), 21 classes (Pascal VOC's count); returns {"out": logits}."""
    from torchvision.models.segmentation import lraspp_mobilenet_v3_large as build

    return settle_batch_norm(build(weights=None, weights_backbone=None, num_classes=classes), image_size)


def deeplabv3_mobilenet_v3_large(image_size: int = 160, classes: int = 21) -> nn.Module:
    """DeepLabV3 on MobileNetV3-Large (11 M), 21 classes, no auxiliary head; returns {"out": logits}."""
    from torchvision.models.segmentation import deeplabv3_mobilenet_v3_large as build

    model = build(weights=None, weights_backbone=None, num_classes=classes, aux_loss=False)
    return settle_batch_norm(model, image_size)
