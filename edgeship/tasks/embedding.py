"""Embedding metrics: cosine similarity of each sample's output with the float model's.

Outputs are [N, ...]; each sample is compared over all its trailing dimensions flattened (a
[N, T, D] sequence is one vector of T·D values per sample, not pooled). A sample whose reference
is all zeros has no direction, so its cosine is undefined: it is left out of the mean and worst
and named in the notes, never counted as 1. A candidate sample that is all zeros against a
non-zero reference scores 0 (it has lost everything).
"""
from __future__ import annotations

import numpy as np

from edgeship.tasks.common import TaskMetrics, checked, same_shape


def cosine_per_sample(reference: object, candidate: object) -> list[float | None]:
    """Cosine of each sample's flattened candidate output with the reference's; None where the
    reference sample is all zeros."""
    ref = checked("reference outputs", reference)
    out = checked("candidate outputs", candidate)
    same_shape("reference outputs", ref, "candidate outputs", out)
    if ref.ndim == 0 or ref.size == 0:
        raise ValueError(f"reference outputs have shape {list(ref.shape)}; expected [N, ...] with N >= 1 samples")
    a = ref.astype(np.float64).reshape(len(ref), -1)
    b = out.astype(np.float64).reshape(len(out), -1)
    norm_a, norm_b = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    result: list[float | None] = []
    for i in range(len(a)):
        if norm_a[i] == 0.0:
            result.append(None)
        elif norm_b[i] == 0.0:
            result.append(0.0)
        else:
            result.append(float(np.clip(np.dot(a[i], b[i]) / (norm_a[i] * norm_b[i]), -1.0, 1.0)))
    return result


def embedding_metrics(reference: object, candidate: object) -> TaskMetrics:
    """``cosine_mean`` and ``cosine_worst`` over the informative samples (reference not all zero)."""
    cosines = cosine_per_sample(reference, candidate)
    zero = [i for i, c in enumerate(cosines) if c is None]
    usable = [c for c in cosines if c is not None]
    notes: dict[str, str] = {}
    if zero:
        shown = ", ".join(str(i) for i in zero[:10]) + (", ..." if len(zero) > 10 else "")
        why = f"{len(zero)} of {len(cosines)} samples have an all-zero reference (not informative; left out): {shown}"
        if not usable:
            why = f"every reference sample is all zeros ({len(cosines)}): cosine is undefined"
        notes["cosine_mean"] = notes["cosine_worst"] = why
    values: dict[str, float | None] = {"cosine_mean": float(np.mean(usable)) if usable else None,
                                       "cosine_worst": float(np.min(usable)) if usable else None}
    return TaskMetrics("embedding", values, notes)
