"""Accuracy and latency statistics. Pure numpy; nothing here measures, it only summarizes.

Definitions follow DESIGN.md: ``sqnr_db = 10·log10(Σref² / Σ(out−ref)²)`` over all evaluation
outputs; ``agreement`` is the share of samples whose top-1 class equals the float model's;
``top1_drop`` is in percentage points. A value that is not finite (SQNR of identical outputs) is
reported as None, and the reason goes into the notes. Outputs holding NaN or inf give no figures
at all (``non_finite`` counts them), and :func:`uninformative_reason` says when the float model's
outputs carry no information to compare against (constant, all zero, or constant inputs).
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


# Reference outputs whose largest magnitude is below this are "all zero" for comparison purposes,
# and outputs that vary by less than this share of their magnitude are constant.
NEAR_ZERO = 1e-8
CONSTANT_RTOL = 1e-6


def non_finite_count(array: np.ndarray) -> int:
    """How many values of ``array`` are NaN or ±inf (0 for integer arrays)."""
    a = np.asarray(array)
    if not np.issubdtype(a.dtype, np.inexact):
        return 0
    return int(a.size - np.count_nonzero(np.isfinite(a)))


def out_of_range_labels(labels: np.ndarray, classes: int) -> np.ndarray:
    """The label values outside ``[0, classes)``, sorted and unique."""
    labels = np.asarray(labels)
    return np.unique(labels[(labels < 0) | (labels >= classes)])


def top1(logits: np.ndarray, labels: np.ndarray) -> float:
    """Share of samples whose arg-max class equals the label (labels must be in ``[0, classes)``)."""
    flat = logits.reshape(len(labels), -1)
    bad = out_of_range_labels(labels, flat.shape[1])
    if bad.size:
        raise ValueError(f"labels {bad[:5].tolist()} are outside [0, {flat.shape[1]}): the outputs have "
                         f"{flat.shape[1]} classes")
    return float(np.mean(flat.argmax(1) == labels))


def agreement(ref: np.ndarray, out: np.ndarray) -> float:
    """Share of samples whose arg-max class equals the reference's."""
    n = len(ref)
    return float(np.mean(ref.reshape(n, -1).argmax(1) == out.reshape(n, -1).argmax(1)))


def uninformative_reason(ref: np.ndarray, inputs: dict[str, np.ndarray]) -> str | None:
    """Why comparing outputs with the float model's ``ref`` (on ``inputs``) would prove nothing, or
    None: non-finite reference outputs, all-zero or constant outputs (every artifact that outputs
    the same constant "matches"), or evaluation samples that are all the same."""
    n = len(ref)
    bad = non_finite_count(ref)
    if bad:
        return f"the float model's outputs contain {bad} non-finite value(s) (NaN or inf)"
    if n > 1 and inputs and all(_constant_over_samples(a) for a in inputs.values()):
        return f"the {n} evaluation samples are all identical"
    flat = np.asarray(ref, np.float64).reshape(n, -1)
    scale = float(np.max(np.abs(flat))) if flat.size else 0.0
    if scale <= NEAR_ZERO:
        return ("the float model's outputs are all zero" if scale == 0.0 else
                f"the float model's outputs are all near zero (largest magnitude {scale:.3g})")
    if float(flat.max() - flat.min()) <= CONSTANT_RTOL * scale:
        return f"the float model's outputs are the same value ({flat.flat[0]:.6g}) everywhere"
    if n > 1 and float(np.max(flat.max(0) - flat.min(0))) <= CONSTANT_RTOL * scale:
        return f"the float model gives the same output for all {n} evaluation samples (it ignores its input)"
    return None


def chunks(array: np.ndarray, nbytes: int = 64 << 20) -> list[np.ndarray]:
    """Views of ``array`` along its first axis, about ``nbytes`` each: a whole-array temporary
    (a mask, a comparison) of a large memory-mapped set is made one piece at a time."""
    if array.ndim == 0 or len(array) == 0:
        return [array]
    step = max(1, nbytes // max(1, array[:1].nbytes))
    return [array[i:i + step] for i in range(0, len(array), step)]


def _constant_over_samples(a: np.ndarray) -> bool:
    """Whether every sample equals the first (compared a piece at a time: no whole-array mask)."""
    return bool(len(a) > 1 and all(np.array_equal(c, np.broadcast_to(a[:1], c.shape)) for c in chunks(a)))


def accuracy(ref: np.ndarray, out: np.ndarray, labels: np.ndarray | None) -> dict[str, float | int | None]:
    """The accuracy block of results.json for one variant's outputs against the float outputs.

    Where either holds NaN or inf, no figure is computed (they would be NaN, and NaN passes every
    ``<`` gate): all are None and ``non_finite`` counts the non-finite values in ``out``."""
    if ref.shape != out.shape:
        raise ValueError(f"output shape {list(out.shape)} differs from the float model's {list(ref.shape)}")
    non_finite = non_finite_count(out)
    if non_finite or non_finite_count(ref):
        return {"samples": int(len(ref)), "top1": None, "top1_drop": None, "agreement": None, "sqnr_db": None,
                "cosine": None, "max_abs_err": None, "non_finite": non_finite}
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
        "non_finite": 0,
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
