"""Charts: inline SVG drawn from measured values only; the Pareto front; why a chart is missing."""
from __future__ import annotations

import re
from pathlib import Path

from edgeship.reports import Report, load_builds
from edgeship.reports.charts import charts, pareto_front
from edgeship.reports.rows import Build
from tests.reports.builds import DEVICES


def test_pareto_front_keeps_the_points_no_other_point_beats() -> None:
    # (latency, accuracy): 0 fastest; 2 most accurate; 1 is beaten by 0 on both; 3 ties 0's latency, less accurate
    points = [(1.0, 90.0), (2.0, 89.0), (3.0, 95.0), (1.0, 80.0), (2.5, 92.0)]
    assert pareto_front(points) == [0, 4, 2]
    assert pareto_front([]) == []


def test_charts_draw_every_device_and_mark_what_was_not_measured(two_device_build: Path) -> None:
    report = Report.of(load_builds([two_device_build / "results.json"]))
    latency, accuracy, size = charts(report)
    assert [c.id for c in (latency, accuracy, size)] == ["chart-latency", "chart-accuracy", "chart-size"]
    for chart in (latency, accuracy, size):
        assert chart.svg.startswith("<svg") and chart.why is None
    for device in DEVICES:
        assert device in latency.svg and f"Pareto front on {device}" in accuracy.svg
    assert "not measured" in latency.svg  # too-old has no p50 on either device
    assert "too-old" not in size.svg and "onnx-fp32" in size.svg


def test_charts_say_why_when_nothing_was_measured(two_device_build: Path) -> None:
    results = Report.of(load_builds([two_device_build / "results.json"])).builds[0].results.model_copy(deep=True)
    for v in results.variants:
        v.latency = []
    latency, accuracy, _ = charts(Report.of([Build("twodev", results, "test")]))
    assert latency.svg is None and latency.why == "no latency was measured in these results"
    assert accuracy.svg is None and "no variant has both a p50 and top-1 accuracy measured" in accuracy.why


def test_charts_draw_names_with_math_markup_as_written() -> None:
    """A variant named with unbalanced mathtext and devices named ``$x$`` and ``_lab``: every chart is
    drawn, each name as written (tick labels, annotations, legend), none dropped from the legend."""
    import html

    from tests.reports.builds import hostile_results

    name, device = r"onnx $\frac{a}{$ x", "$x$"
    results = hostile_results(name)
    for v in results.variants:
        for lat, dev in zip(v.latency, (device, "_lab")):
            lat.device = dev
    latency, accuracy, size = charts(Report.of([Build("b", results, "results.json")]))
    texts = [html.unescape(t) for chart in (latency, accuracy, size)
             for t in re.findall(r"<text[^>]*>([^<]*)<", chart.svg)]
    assert texts.count(name) == 4  # the latency and size charts' tick labels, an annotation per device
    assert {device, "\u200b_lab", f"Pareto front on {device}", "Pareto front on _lab"} <= set(texts)
