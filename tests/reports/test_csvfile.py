"""results.csv: one row per (variant, device), the numbers of results.json, reasons when missing."""
from __future__ import annotations

import csv
import json
from pathlib import Path

from edgeship.reports.csvfile import COLUMNS
from tests.reports.builds import DEVICES


def test_csv_has_one_row_per_variant_and_device_with_the_results_numbers(two_device_build: Path) -> None:
    with open(two_device_build / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    results = json.loads((two_device_build / "results.json").read_text())
    assert list(rows[0]) == COLUMNS
    assert len(rows) == len(results["variants"]) * len(DEVICES)
    by_key = {(r["variant"], r["device"]): r for r in rows}
    for v in results["variants"]:
        for lat in v["latency"]:
            row = by_key[(v["name"], lat["device"])]
            assert float(row["p50_ms"]) == lat["p50_ms"] and float(row["p90_ms"]) == lat["p90_ms"]
            assert row["runtime"] == lat["runtime"] and row["not_measured"] == ""
            for key in ("load_ms", "import_ms", "first_inference_ms", "rss_over_baseline_mb", "peak_rss_mb"):
                assert float(row[key]) == lat[key] and lat[key] > 0, key
    broken = by_key[("too-old", DEVICES[1])]
    assert broken["p50_ms"] == "" and broken["size_bytes"] == "" and broken["gates_passed"] == "False"
    assert broken["not_measured"].startswith("too-old was not built: lowering failed")
