"""Embedding metrics: each sample's embedding against the float model's, and what a search over
the embeddings would find.

Outputs are [N, ...]; each sample is compared over all its trailing dimensions flattened (a
[N, T, D] sequence is one vector of T·D values per sample, not pooled). A sample whose reference
is all zeros has no direction, so its cosine is undefined: it is left out of the mean and worst
and named in the notes, never counted as 1. A candidate sample that is all zeros against a
non-zero reference scores 0 (it has lost everything).

What a user of embeddings reads is the neighbourhood, not one vector: over the evaluation set,
``recall_at_1_vs_float`` is the share of samples whose nearest other sample (by cosine) is the one
the float model finds, and ``spearman_vs_float`` the rank correlation of all pairwise cosine
similarities with the float model's. With ``groups`` (the data's ``y``: samples that belong
together, e.g. paraphrases) ``recall_at_1_vs_labels`` is the share of samples whose nearest other
sample is in their own group, counted over samples whose group has another member. These are
properties of a set: below :data:`SET_MIN_SAMPLES` samples they are not computed (the note says so).
"""
from __future__ import annotations

import numpy as np

from edgeship.tasks.common import TaskMetrics, checked, same_shape

SET_MIN_SAMPLES = 16  # fewer samples say little about neighbours: the set metrics are not computed
SET_METRICS = ("recall_at_1_vs_float", "spearman_vs_float", "recall_at_1_vs_labels")


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


def embedding_metrics(reference: object, candidate: object, groups: object = None) -> TaskMetrics:
    """``cosine_mean`` and ``cosine_worst`` over the informative samples (reference not all zero),
    and the set metrics (:data:`SET_METRICS`; the labels one only with ``groups``)."""
    per_sample = _per_sample(reference, candidate)
    values, notes = dict(per_sample.values), dict(per_sample.notes)
    set_values, set_notes = set_metrics(np.asarray(reference), np.asarray(candidate), groups)
    return TaskMetrics("embedding", {**values, **set_values}, {**notes, **set_notes})


def _per_sample(reference: object, candidate: object) -> TaskMetrics:
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


def set_metrics(reference: np.ndarray, candidate: np.ndarray, groups: object = None,
                ) -> tuple[dict[str, float | None], dict[str, str]]:
    """recall@1 and Spearman against the float model (and recall@1 against ``groups``) over the
    whole set; None with a note where the set is too small or the figure undefined."""
    names = SET_METRICS if groups is not None else SET_METRICS[:2]
    n = len(reference)
    if n < SET_MIN_SAMPLES:
        why = f"needs at least {SET_MIN_SAMPLES} samples to say anything about neighbours; {n} here"
        return dict.fromkeys(names), dict.fromkeys(names, why)
    ref, out = similarities(reference), similarities(candidate)
    values: dict[str, float | None] = {"recall_at_1_vs_float": recall_at_1(ref, out)}
    notes: dict[str, str] = {}
    values["spearman_vs_float"], why = spearman_of_pairs(ref, out)
    if why:
        notes["spearman_vs_float"] = why
    if groups is not None:
        values["recall_at_1_vs_labels"], why = recall_vs_groups(out, np.asarray(groups))
        if why:
            notes["recall_at_1_vs_labels"] = why
    return values, notes


def similarities(embeddings: np.ndarray) -> np.ndarray:
    """Pairwise cosine similarities [N, N] of the flattened samples (an all-zero sample: 0 to all)."""
    a = embeddings.astype(np.float64).reshape(len(embeddings), -1)
    norms = np.linalg.norm(a, axis=1, keepdims=True)
    unit = np.divide(a, norms, out=np.zeros_like(a), where=norms > 0)
    return unit @ unit.T


def nearest_other(sim: np.ndarray) -> np.ndarray:
    """Each sample's nearest other sample (the highest similarity off the diagonal)."""
    masked = sim.copy()
    np.fill_diagonal(masked, -np.inf)
    return masked.argmax(axis=1)


def recall_at_1(ref: np.ndarray, out: np.ndarray) -> float:
    """Share of samples whose nearest other sample under ``out`` is the one under ``ref``. Where the
    float model's best two neighbours tie exactly, either counts (the float model did not choose)."""
    chosen = nearest_other(out)
    masked = ref.copy()
    np.fill_diagonal(masked, -np.inf)
    best = masked.max(axis=1)
    return float(np.mean(masked[np.arange(len(ref)), chosen] >= best))


def spearman_of_pairs(ref: np.ndarray, out: np.ndarray) -> tuple[float | None, str | None]:
    """Spearman's rank correlation of the pairwise similarities above the diagonal (scipy's,
    ties at their average rank); None with the reason when either side has no spread."""
    from scipy.stats import spearmanr

    upper = np.triu_indices(len(ref), k=1)
    a, b = ref[upper], out[upper]
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        who = "the float model's" if np.ptp(a) == 0 else "the artifact's"
        return None, f"{who} pairwise similarities are all equal: no ranking to correlate"
    return float(spearmanr(a, b).statistic), None


def recall_vs_groups(out: np.ndarray, groups: np.ndarray) -> tuple[float | None, str | None]:
    """Share of samples whose nearest other sample shares their group, over samples whose group has
    another member; None with the reason when no group has two."""
    if groups.shape != (len(out),):
        raise ValueError(f"embedding groups (y) have shape {list(groups.shape)}; expected [{len(out)}], one "
                         "group id per sample")
    counts = {g: int(c) for g, c in zip(*np.unique(groups, return_counts=True))}
    usable = np.array([counts[g] > 1 for g in groups.tolist()])
    if not usable.any():
        return None, "every group (y) has a single sample: no sample has a neighbour to find"
    hits = groups[nearest_other(out)] == groups
    return float(np.mean(hits[usable])), None
