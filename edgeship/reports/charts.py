"""Charts for the HTML report, drawn server-side by matplotlib as SVG text to inline in the page.

Three charts: latency per variant and device (p50 bars, whiskers to p90), accuracy against
latency with the Pareto front marked, and artifact sizes. Only measured values are drawn; a
(variant, device) slot without a p50 says "not measured". The SVG keeps its text as text
(``svg.fonttype = none``), so the page stays small and the charts stay searchable. Every text is
drawn as written: no mathtext (``$...$`` in a name), no TeX, and a legend label starting with ``_``
(which matplotlib would leave out) kept by a zero-width space before it.
"""
from __future__ import annotations

import io
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from edgeship.reports.formatting import size_text
from edgeship.reports.rows import Line, Report

if TYPE_CHECKING:
    from matplotlib.figure import Figure

COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
RC = {"svg.fonttype": "none", "font.size": 9, "font.family": "sans-serif", "text.parse_math": False,
      "text.usetex": False, "axes.spines.top": False, "axes.spines.right": False}


@dataclass
class Chart:
    """One chart: its id and title, and the SVG, or why it could not be drawn."""

    id: str
    title: str
    svg: str | None = None
    why: str | None = None


def charts(report: Report) -> list[Chart]:
    """The report's charts, in page order."""
    return [latency_chart(report), accuracy_chart(report), size_chart(report)]


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both counts: lower x and higher y."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front, best = [], -math.inf
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front


def latency_chart(report: Report) -> Chart:
    chart = Chart("chart-latency", "Latency per variant and device: p50 bars, whiskers to p90 (ms)")
    if not any(ln.p50(d) is not None for ln in report.lines for d in report.devices):
        chart.why = "no latency was measured in these results"
        return chart
    chart.svg = _draw(chart.id, lambda fig: _latency_axes(fig, report), _height(report, per_line=len(report.devices)))
    return chart


def _latency_axes(fig: Figure, report: Report) -> None:
    ax = fig.add_subplot()
    lines, devices = report.lines, report.devices
    height = 0.8 / len(devices)
    for j, device in enumerate(devices):
        bars: list[tuple[float, float, float]] = []
        for i, ln in enumerate(lines):
            y = i + (j - (len(devices) - 1) / 2) * height
            lat = ln.latency(device)
            if lat is None or ln.p50(device) is None:
                why = " emulated (not the CPU's time)" if lat is not None and lat.emulated else " not measured"
                ax.text(0, y, why, va="center", fontsize=7, color="#777777")
                continue
            whisker = max(lat.p90_ms - lat.p50_ms, 0.0) if lat.p90_ms is not None else 0.0
            bars.append((y, lat.p50_ms, whisker))
        if bars:
            ys, widths, whiskers = zip(*bars)
            ax.barh(ys, widths, height=height * 0.9, color=COLORS[j % len(COLORS)], label=_label(device),
                    xerr=[[0.0] * len(whiskers), list(whiskers)], capsize=2, error_kw={"elinewidth": 0.8})
    ax.set_yticks(range(len(lines)), [ln.name for ln in lines])
    ax.invert_yaxis()
    ax.set_xlabel("latency (ms): bar = p50, whisker = p90")
    ax.legend(title="device", loc="lower right", fontsize=8)


def accuracy_chart(report: Report) -> Chart:
    key = "top1" if any(_acc(ln, None, "top1") is not None for ln in report.lines) else "agreement"
    what = "top-1 accuracy" if key == "top1" else "agreement with the float model's top-1"
    chart = Chart("chart-accuracy", f"{what.capitalize()} against p50 latency, Pareto front marked")
    points = {d: [(p50, acc, ln) for ln in report.lines
                  if (p50 := ln.p50(d)) is not None and (acc := _acc(ln, d, key)) is not None] for d in report.devices}
    if not any(points.values()):
        chart.why = f"no variant has both a p50 and {what} measured"
        return chart
    chart.svg = _draw(chart.id, lambda fig: _accuracy_axes(fig, points, what), 4.2)
    return chart


def _acc(line: Line, device: str | None, key: str) -> float | None:
    """The figure in percent; None where not measured or not informative (never plotted)."""
    acc = line.accuracy(device)
    value = getattr(acc, key) if acc is not None and acc.informative else None
    return 100 * value if value is not None else None


def _accuracy_axes(fig: Figure, points: dict[str, list[tuple[float, float, Line]]], what: str) -> None:
    ax = fig.add_subplot()
    for j, (device, pts) in enumerate(points.items()):
        if not pts:
            continue
        color = COLORS[j % len(COLORS)]
        xs, ys, lines = zip(*pts)
        ax.scatter(xs, ys, color=color, marker=MARKERS[j % len(MARKERS)], label=_label(device), zorder=3)
        for i, (x, y, ln) in enumerate(pts):  # alternate above and below: close points stay readable
            ax.annotate(ln.name, (x, y), textcoords="offset points", xytext=(5, 5 if i % 2 == 0 else -11), fontsize=7)
        front = [pts[i] for i in pareto_front([(x, y) for x, y, _ in pts])]
        ax.plot([p[0] for p in front], [p[1] for p in front], linestyle="--", color=color, drawstyle="steps-post",
                linewidth=1, label=_label(f"Pareto front on {device}"))
        ax.scatter([p[0] for p in front], [p[1] for p in front], s=140, facecolors="none", edgecolors=color, zorder=2)
    ys = [y for pts in points.values() for _, y, _ in pts]
    pad = max((max(ys) - min(ys)) * 0.15, 0.5)
    ax.set_ylim(min(ys) - pad, min(max(ys) + pad, 100.5))
    ax.set_xlabel("p50 latency (ms): lower is better")
    ax.set_ylabel(f"{what} (%): higher is better")
    ax.legend(fontsize=8, loc="lower right")


def size_chart(report: Report) -> Chart:
    chart = Chart("chart-size", "Artifact size per variant")
    sized = [ln for ln in report.lines if ln.variant.size_bytes is not None]
    if not sized:
        chart.why = "no artifact size in these results (no variant was built)"
        return chart
    chart.svg = _draw(chart.id, lambda fig: _size_axes(fig, sized), 0.6 + 0.32 * len(sized))
    return chart


def _size_axes(fig: Figure, sized: list[Line]) -> None:
    ax = fig.add_subplot()
    kib = [ln.variant.size_bytes / 1024 for ln in sized]
    ax.barh(range(len(sized)), kib, color=COLORS[0], height=0.6)
    for i, (ln, value) in enumerate(zip(sized, kib)):
        ax.text(value, i, " " + size_text(ln.variant.size_bytes), va="center", fontsize=7)
    ax.set_yticks(range(len(sized)), [ln.name for ln in sized])
    ax.invert_yaxis()
    ax.set_xlabel("size (KiB)")
    ax.margins(x=0.15)


def _label(name: str) -> str:
    """A legend label shown as written: matplotlib leaves out a label starting with ``_``."""
    return "\u200b" + name if name.startswith("_") else name


def _height(report: Report, per_line: int) -> float:
    return 0.9 + 0.22 * len(report.lines) * max(per_line, 1.5)


def _draw(salt: str, paint: Callable[[Figure], None], height: float) -> str:
    """Paint a figure and return its SVG element (no XML prolog), with ids unique to this chart."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context({**RC, "svg.hashsalt": salt}):
        fig = Figure(figsize=(8, height), layout="constrained")
        paint(fig)
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]
