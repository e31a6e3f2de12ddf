"""Budgeted selection: mark the fastest variant whose accuracy cost stays inside the budget.

Every built variant is a candidate (the eager float model is the reference, not a candidate).
One is eligible when it was measured on the deciding device (the first device of the build),
passed its gates, and stays inside the budget: ``top1_drop <= max_top1_drop`` where the
evaluation data has labels; without labels, ``agreement >= 1 - max_top1_drop / 100`` instead
(a sample whose top-1 class agrees with the float model's cannot change top-1 accuracy, so this
bounds the top-1 drop from above), plus ``sqnr_db >= min_sqnr_db`` when set. The eligible
variant with the lowest p50 is selected. When none is eligible, none is selected and the build
fails (exit 3) after writing everything: a budget nothing meets is a failed requirement.
"""
from __future__ import annotations

from edgeship.quantize.settings import SelectionSettings
from edgeship.results import Selection, SelectionCandidate, VariantResult


def select_variant(settings: SelectionSettings, rows: list[VariantResult], device: str | None) -> Selection:
    """Judge every built row, mark the winner's ``selected``, and return the whole judgement."""
    labelled = any(r.accuracy is not None and r.accuracy.top1 is not None for r in rows)
    budget = budget_text(settings, labelled)
    candidates = [_judge(settings, row, device) for row in rows if not row.is_reference]
    eligible = [c for c in candidates if c.eligible]
    winner = min(eligible, key=lambda c: c.p50_ms) if eligible else None
    for row in rows:
        row.selected = winner is not None and row.name == winner.name
    notes = [] if labelled else ["the evaluation data has no labels: the budget is judged by agreement "
                                 "with the float model, which bounds the top-1 drop"]
    if winner is None:
        notes.append(f"no variant is inside the budget ({budget}); none is selected")
    return Selection(policy=settings.select, budget=budget, device=device,
                     selected=winner.name if winner else None, candidates=candidates, notes=notes)


def budget_text(settings: SelectionSettings, labelled: bool) -> str:
    parts = [f"top1_drop <= {settings.max_top1_drop:g} points" if labelled
             else f"agreement >= {min_agreement(settings):.4g}"]
    if settings.min_sqnr_db is not None:
        parts.append(f"sqnr_db >= {settings.min_sqnr_db:g}")
    return " and ".join(parts)


def min_agreement(settings: SelectionSettings) -> float:
    return 1.0 - settings.max_top1_drop / 100.0


def _judge(settings: SelectionSettings, row: VariantResult, device: str | None) -> SelectionCandidate:
    p50 = row.p50_on(device)
    reason = _why_not(settings, row, p50, device)
    return SelectionCandidate(name=row.name, p50_ms=p50, eligible=reason is None, reason=reason)


def _why_not(settings: SelectionSettings, row: VariantResult, p50: float | None, device: str | None) -> str | None:
    """Why ``row`` is not eligible, or None when it is."""
    acc = row.accuracy
    if row.error:
        return "not built"
    if p50 is None:
        return row.untimed_why(device)
    if not row.gates.passed:
        return "failed its gates"
    if acc is None:
        return "accuracy not measured"
    if acc.top1_drop is not None:
        if acc.top1_drop > settings.max_top1_drop:
            return f"top1_drop {acc.top1_drop:.3g} points > {settings.max_top1_drop:g}"
    elif acc.agreement is None or acc.agreement < min_agreement(settings):
        return f"agreement {acc.agreement} < {min_agreement(settings):.4g}"
    identical = acc.max_abs_err == 0.0  # sqnr_db is None for identical outputs (infinite SQNR)
    if (settings.min_sqnr_db is not None and not identical
            and (acc.sqnr_db is None or acc.sqnr_db < settings.min_sqnr_db)):
        return f"sqnr_db {acc.sqnr_db} < {settings.min_sqnr_db:g}"
    return None
