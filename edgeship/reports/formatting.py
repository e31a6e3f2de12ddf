"""The text of each report cell, from the results: a formatted number, or "not measured" and why.

Shared by the Markdown, HTML and CSV writers so that each shows the same thing.
"""
from __future__ import annotations

from edgeship.reports.rows import Line, Report, Shown, why_no_accuracy, why_no_field, why_no_latency

NOT_MEASURED = "not measured"
NOT_INFORMATIVE = "not informative"
NON_FINITE = "NaN/inf"


def ms(value: float) -> str:
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def size_text(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.2f} MiB"


def size(line: Line) -> Shown:
    v = line.variant
    if v.backend == "eager":
        return Shown("—")
    if v.size_bytes is None:
        return Shown(NOT_MEASURED, f"{v.name} was not built: {v.error}" if v.error else "no artifact recorded")
    return Shown(size_text(v.size_bytes))


def latency(line: Line, device: str, key: str = "p50_ms") -> Shown:
    lat = line.latency(device)
    value = getattr(lat, key) if lat is not None else None
    if value is None:
        return Shown(NOT_MEASURED, why_no_latency(line, device))
    return Shown(ms(value))


def speedup(report: Report, line: Line, device: str) -> Shown:
    """Eager p50 / this p50, both on ``device`` in the same build (> 1: faster than eager)."""
    if line.variant.backend == "eager":
        return Shown("1.00×" if line.p50(device) is not None else "—")
    mine = line.p50(device)
    if mine is None:
        return Shown(NOT_MEASURED, why_no_latency(line, device))
    eager = report.eager(line)
    base = eager.p50(device) if eager else None
    if base is None:
        return Shown(NOT_MEASURED, f"the float model was not timed on {device} in build {line.build.label}"
                                   + (f": {why_no_latency(eager, device)}" if eager else ""))
    return Shown(f"{base / mine:.2f}×")


def relative(line: Line, device: str, first: str) -> Shown:
    """p50 on ``device`` / p50 on the first device: how many times slower (> 1) or faster."""
    mine, base = line.p50(device), line.p50(first)
    if mine is None:
        return Shown(NOT_MEASURED, why_no_latency(line, device))
    if base is None:
        return Shown(NOT_MEASURED, why_no_latency(line, first))
    return Shown(f"{mine / base:.2f}×")


def accuracy(line: Line, key: str, device: str | None = None) -> Shown:
    """top1, top1_drop, agreement or sqnr_db of ``line``, formatted; "not informative" (never a
    number) when the float model's outputs carry no information, "NaN/inf" for non-finite outputs."""
    acc = line.accuracy(device)
    if acc is None:
        return Shown(NOT_MEASURED, why_no_accuracy(line))
    if not acc.informative:
        return Shown(NOT_INFORMATIVE, f"accuracy not informative: {acc.uninformative_reason}")
    if acc.non_finite:
        return Shown(NON_FINITE, f"{line.variant.name}: outputs contain {acc.non_finite} non-finite values (NaN or "
                                 "inf); no accuracy figure is computed from them")
    value = getattr(acc, key)
    if value is None:
        if key == "sqnr_db" and acc.max_abs_err == 0.0:
            return Shown("exact")
        return Shown(NOT_MEASURED, why_no_field(line, key))
    if key in ("top1", "agreement"):
        return Shown(f"{100 * value:.2f}%")
    if key == "top1_drop":
        return Shown(f"{value:.2f}")
    return Shown(f"{value:.1f}")


def gates(line: Line) -> Shown:
    v = line.variant
    if v.backend == "eager" and v.gates.passed:
        return Shown("reference")
    return Shown("pass" if v.gates.passed else "FAIL: " + "; ".join(v.gates.failures))
