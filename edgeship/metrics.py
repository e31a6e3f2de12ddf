"""Accuracy and latency statistics. Pure numpy; nothing here measures, it only summarizes.

Definitions follow DESIGN.md: ``sqnr_db = 10·log10(Σref² / Σ(out−ref)²)`` over all evaluation
outputs; ``agreement`` is the share of samples whose top-1 class equals the float model's;
``top1_drop`` is in percentage points. A value that is not finite (SQNR of identical outputs) is
reported as None, and the reason goes into the notes.
"""
from __future__ import annotations

import math

import numpy as np


def sqnr_db(ref: np.ndarray, out: np.ndarray) -> float | None:
    """Signal-to-quantization-noise ratio in dB; None when the outputs are identical (infinite)."""
    ref64, out64 = ref.astype(np.float64).ravel(), out.astype(np.float64).ravel()
    noise = float(np.sum((out64 - ref64) ** 2))
    signal = float(np.sum(ref64 ** 2))
    if noise == 0.0 or signal == 0.0:
        return None
    return 10.0 * math.log10(signal / noise)


def cosine(ref: np.ndarray, out: np.ndarray) -> float | None:
    """Cosine similarity of the flattened outputs; None when either is all zeros."""
    a, b = ref.astype(np.float64).ravel(), out.astype(np.float64).ravel()
    denom = float(np.linalg.norm(a) * np.linalg.norm(b))
    return None if denom == 0.0 else float(np.dot(a, b) / denom)


def top1(logits: np.ndarray, labels: np.ndarray) -> float:
    """Share of samples whose arg-max class equals the label."""
    return float(np.mean(logits.reshape(len(labels), -1).argmax(1) == labels))


def agreement(ref: np.ndarray, out: np.ndarray) -> float:
    """Share of samples whose arg-max class equals the reference's."""
    n = len(ref)
    return float(np.mean(ref.reshape(n, -1).argmax(1) == out.reshape(n, -1).argmax(1)))


def accuracy(ref: np.ndarray, out: np.ndarray, labels: np.ndarray | None) -> dict[str, float | int | None]:
    """The accuracy block of results.json for one variant's outputs against the float outputs."""
    if ref.shape != out.shape:
        raise ValueError(f"output shape {list(out.shape)} differs from the float model's {list(ref.shape)}")
    ref_top1 = None if labels is None else top1(ref, labels)
    out_top1 = None if labels is None else top1(out, labels)
    return {
        "samples": int(len(ref)),
        "top1": out_top1,
        "top1_drop": None if labels is None else round(100.0 * (ref_top1 - out_top1), 6),
        "agreement": agreement(ref, out),
        "sqnr_db": sqnr_db(ref, out),
        "cosine": cosine(ref, out),
        "max_abs_err": float(np.max(np.abs(out.astype(np.float64) - ref.astype(np.float64)))),
    }


def latency_stats(timings_ms: list[float]) -> dict[str, float]:
    """p50/p90/p99/mean/std (ms) and the coefficient of variation of timed iterations."""
    t = np.asarray(timings_ms, dtype=np.float64)
    if t.size == 0:
        raise ValueError("no timings")
    mean = float(t.mean())
    std = float(t.std(ddof=1)) if t.size > 1 else 0.0
    return {
        "p50_ms": float(np.percentile(t, 50)),
        "p90_ms": float(np.percentile(t, 90)),
        "p99_ms": float(np.percentile(t, 99)),
        "mean_ms": mean,
        "std_ms": std,
        "cv": std / mean if mean > 0 else 0.0,
    }
