"""Budgeted selection: the fastest variant inside the accuracy budget, and only one."""
from __future__ import annotations

from edgeship.quantize.selection import select_variant
from edgeship.quantize.settings import SelectionSettings
from edgeship.results import Accuracy, GateResult, Latency, VariantResult

BUDGET = SelectionSettings(select="fastest-within-budget", max_top1_drop=1.0)


def _row(name: str, p50: float | None, drop: float | None = 0.0, agreement: float = 1.0, sqnr: float = 30.0,
         passed: bool = True, error: str | None = None, backend: str = "onnx") -> VariantResult:
    top1 = None if drop is None else 0.9 - drop / 100
    return VariantResult(name=name, backend=backend, precision="int8", error=error,
                         accuracy=Accuracy(samples=100, top1=top1, top1_drop=drop, agreement=agreement,
                                           sqnr_db=sqnr, max_abs_err=0.1),
                         latency=[Latency(device="host", runtime="x", warmup=1, iterations=1, p50_ms=p50)],
                         gates=GateResult(passed=passed))


def test_selection_marks_the_fastest_inside_the_budget() -> None:
    rows = [_row("eager", 9.0, backend="eager"), _row("fp32", 5.0), _row("int8-fast-bad", 1.0, drop=2.5),
            _row("int8", 2.0, drop=0.8), _row("int8-failed-gate", 0.5, passed=False)]
    result = select_variant(BUDGET, rows, "host")
    assert result.selected == "int8" and [r.name for r in rows if r.selected] == ["int8"]
    reasons = {c.name: c.reason for c in result.candidates}
    assert reasons["int8-fast-bad"] == "top1_drop 2.5 points > 1" and reasons["int8-failed-gate"] == "failed its gates"
    assert "eager" not in reasons and result.budget == "top1_drop <= 1 points"


def test_selection_without_labels_judges_by_agreement() -> None:
    rows = [_row("a", 1.0, drop=None, agreement=0.985), _row("b", 3.0, drop=None, agreement=0.995)]
    result = select_variant(BUDGET, rows, "host")
    assert result.selected == "b" and result.budget == "agreement >= 0.99"
    assert any("no labels" in n for n in result.notes)


def test_selection_none_inside_the_budget_selects_none_and_says_so() -> None:
    rows = [_row("a", 1.0, drop=3.0), _row("b", None), _row("c", 0.3, error="lowering failed")]
    result = select_variant(SelectionSettings(select="fastest-within-budget", max_top1_drop=1.0, min_sqnr_db=20),
                            rows, "host")
    assert result.selected is None and not any(r.selected for r in rows)
    assert {c.name: c.reason for c in result.candidates} == {"a": "top1_drop 3 points > 1",
                                                             "b": "no p50 measured on host", "c": "not built"}
    assert "none is selected" in result.notes[-1] and "sqnr_db >= 20" in result.budget


def test_selection_min_sqnr_excludes_noisy_variants() -> None:
    rows = [_row("noisy", 1.0, sqnr=12.0), _row("clean", 2.0, sqnr=35.0)]
    result = select_variant(SelectionSettings(select="fastest-within-budget", max_top1_drop=1.0, min_sqnr_db=20),
                            rows, "host")
    assert result.selected == "clean"
