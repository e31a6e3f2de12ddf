"""Seeded synthetic images for the zoo's evaluation and calibration (``data.evaluation`` /
``data.calibration = "zoo_data:calibration_128"``), in [0, 1) like edgeship's own random inputs.

Without data a build evaluates on independent uniform pixels. Every such image has the same
statistics (mean 0.5 in every channel, no structure), so models that average over the image — a
VisionTransformer's class token, SqueezeNet's pooled classifier — give nearly the same output for
all of them and pick one class for every input: top-1 agreement then proves nothing. These images
differ as photographs do, in brightness, colour and layout: random fields of 4x4 and 16x16 cells,
bilinearly upsampled, mostly shared by the channels (luminance) with a weaker colour part, plus a
little pixel noise. They are not
labelled: accuracy is agreement with the float model and SQNR.
"""
from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import numpy as np

EVALUATION_SEED = 1
CALIBRATION_SEED = 2


def _upsample(cells: np.ndarray, size: int) -> np.ndarray:
    """[n, c, k, k] -> [n, c, size, size], bilinear (align_corners) along both axes."""
    k = cells.shape[-1]
    pos = np.linspace(0, k - 1, size)
    low = np.minimum(pos.astype(int), k - 2)
    frac = (pos - low).astype(np.float32)
    rows = cells[..., low, :] * (1 - frac)[:, None] + cells[..., low + 1, :] * frac[:, None]
    return rows[..., low] * (1 - frac) + rows[..., low + 1] * frac


def images(samples: int, size: int, seed: int, channels: int = 3) -> Iterator[np.ndarray]:
    """``samples`` images of [1, channels, size, size] float32 in [0, 1), one batch each: a shared
    luminance field (coarse and fine), a weaker colour field, an overall brightness and colour
    cast drawn per image, and a little pixel noise."""
    rng = np.random.default_rng(seed)
    for _ in range(samples):
        luminance = (_upsample(rng.random((1, 1, 4, 4), dtype=np.float32) - 0.5, size)
                     + 0.3 * _upsample(rng.random((1, 1, 16, 16), dtype=np.float32) - 0.5, size))
        colour = 0.3 * (_upsample(rng.random((1, channels, 4, 4), dtype=np.float32), size) - 0.5)
        cast = rng.uniform(0.25, 0.75) + rng.uniform(-0.1, 0.1, (1, channels, 1, 1))
        noise = rng.normal(0.0, 0.02, (1, channels, size, size))
        image = cast + rng.uniform(0.6, 1.4) * luminance + colour + noise
        yield np.clip(image, 0.0, 1 - 1e-6).astype(np.float32)


# One source per resolution the zoo uses: a data source is called without arguments. 32 for
# evaluation (the profiles' default count: every variant runs them), 64 to calibrate int8 (half
# the profiles' default of 128, to keep calibration short; not compared with 128 here).
evaluation_64 = partial(images, 32, 64, EVALUATION_SEED)
calibration_64 = partial(images, 64, 64, CALIBRATION_SEED)
evaluation_128 = partial(images, 32, 128, EVALUATION_SEED)
calibration_128 = partial(images, 64, 128, CALIBRATION_SEED)
evaluation_160 = partial(images, 32, 160, EVALUATION_SEED)
calibration_160 = partial(images, 64, 160, CALIBRATION_SEED)
