"""Retrain the demo's weights and regenerate its data splits, deterministically.

    python -m edgeship.demo.train            # writes edgeship/demo/: digitnet.pt, calib.npz, eval.npz

scikit-learn ships the digits data set (1,797 8x8 images), so nothing is downloaded. The split is
stratified and seeded: 360 held-out evaluation images, the rest for training, and 256 training
images as the calibration set. Pixels are scaled to [0, 1] (the raw values run 0..16).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from torch import nn

from edgeship.demo.digitnet import build

DEMO_DIR = Path(__file__).resolve().parent
SEED = 0


def splits() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Train, calibration and evaluation splits of sklearn's digits, as (x [N,1,8,8], y)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    y = digits.target.astype(np.int64)
    x_train, x_eval, y_train, y_eval = train_test_split(x, y, test_size=360, stratify=y, random_state=SEED)
    pick = np.random.default_rng(SEED).choice(len(x_train), 256, replace=False)
    return {"train": (x_train, y_train), "calib": (x_train[pick], y_train[pick]), "eval": (x_eval, y_eval)}


def train(x: np.ndarray, y: np.ndarray, epochs: int = 60) -> nn.Module:
    """Adam with a cosine schedule and light shift augmentation; deterministic on CPU."""
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    model = build()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs)
    xs, ys = torch.from_numpy(x), torch.from_numpy(y)
    gen = torch.Generator().manual_seed(SEED)
    for _ in range(epochs):
        model.train()
        for idx in torch.randperm(len(xs), generator=gen).split(64):
            batch = _shift(xs[idx], gen)
            loss = nn.functional.cross_entropy(model(batch), ys[idx], label_smoothing=0.05)
            opt.zero_grad()
            loss.backward()
            opt.step()
        sched.step()
    return model.eval()


def _shift(batch: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Shift each image by up to one pixel (zero padding): cheap, label-preserving augmentation."""
    padded = nn.functional.pad(batch, (1, 1, 1, 1))
    dy, dx = torch.randint(0, 3, (2,), generator=gen).tolist()
    return padded[:, :, dy:dy + 8, dx:dx + 8]


def top1(model: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    with torch.no_grad():
        return float((model(torch.from_numpy(x)).argmax(1).numpy() == y).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=60)
    args = parser.parse_args()
    data = splits()
    model = train(*data["train"], epochs=args.epochs)
    acc = top1(model, *data["eval"])
    print(f"held-out top-1: {acc:.4f} on {len(data['eval'][1])} images")
    for name in ("calib", "eval"):
        np.savez_compressed(DEMO_DIR / f"{name}.npz", x=data[name][0], y=data[name][1])
    torch.save(model.state_dict(), DEMO_DIR / "digitnet.pt")
    print(f"wrote {DEMO_DIR}/{{digitnet.pt,calib.npz,eval.npz}}")


if __name__ == "__main__":
    main()
