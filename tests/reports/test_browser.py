"""report.html in a real headless Chromium (Debian's package, driven by playwright): no console
errors, no network requests, the charts are there. A screenshot is kept as a test artifact."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests import system
from tests.conftest import REPO

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run"]
SCREENSHOTS = REPO / "artifacts" / "test-screenshots"


@pytest.mark.skipif(system.chromium() is not None, reason=str(system.chromium()))
def test_html_report_in_chromium_shows_charts_without_errors_or_requests(two_device_build: Path,
                                                                         tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    page_file = two_device_build / "report.html"
    requests, problems = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("request", lambda r: requests.append(r.url))
            page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.goto(page_file.as_uri(), wait_until="load")
            charts = page.locator("figure.chart")
            titles = charts.locator("figcaption").all_inner_texts()
            svg_count = page.locator("figure.chart svg").count()
            box = page.locator("#chart-latency svg").bounding_box()
            shot = tmp_path / "report.png"
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert requests == [page_file.as_uri()], "the page requested something besides itself"
    assert problems == []
    assert svg_count == 3 and len(titles) == 3
    assert titles[0].startswith("Latency per variant and device") and "Pareto front" in titles[1]
    assert box is not None and box["width"] > 300 and box["height"] > 100, "the latency chart is drawn visibly"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    kept = SCREENSHOTS / "report-two-devices.png"
    shutil.copyfile(shot, kept)
    print(f"screenshot: {kept}")
