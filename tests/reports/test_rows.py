"""Reading results files into a report: errors name the file; builds get distinct labels."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgeship.cli import main
from edgeship.errors import ReportError
from edgeship.reports import Report, load_builds
from edgeship.reports.rows import build_labels
from edgeship.results import Results
from tests.reports.builds import DEVICES, results_with


def test_load_builds_missing_file_exits_2_naming_it(capsys, tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "results.json"
    assert main(["report", str(missing)]) == 2
    assert f"{missing}: file not found" in capsys.readouterr().err


def test_load_builds_refuses_a_file_that_is_not_results_json(tmp_path: Path) -> None:
    bad = tmp_path / "results.json"
    bad.write_text(json.dumps({"schema": 1, "target": "x"}))
    with pytest.raises(ReportError, match=r"results.json: not a results.json \(schema 1\): created"):
        load_builds([bad])


def test_load_builds_refuses_the_same_file_twice(two_device_build: Path) -> None:
    path = two_device_build / "results.json"
    with pytest.raises(ReportError, match="given twice"):
        load_builds([path, path])


def test_build_labels_add_the_time_when_targets_repeat(two_device_build: Path) -> None:
    first = Results.read(two_device_build / "results.json")
    second = first.model_copy(update={"created": "2099-01-01T00:00:00Z"})
    assert build_labels([first]) == ["twodev"]
    assert build_labels([first, second]) == [f"twodev {first.created}", "twodev 2099-01-01T00:00:00Z"]


def test_report_lists_every_device_measured_in_order(two_device_build: Path) -> None:
    report = Report.of(load_builds([two_device_build / "results.json"]))
    assert report.devices == list(DEVICES)
    assert [ln.name for ln in report.lines][0] == "eager"


@pytest.mark.parametrize("schema, shown", [(99, "99"), ("1", '"1"'), (True, "true"), (None, "null")])
def test_report_refuses_a_results_schema_it_does_not_read(capsys, tmp_path: Path, schema, shown: str) -> None:
    doc = json.loads(results_with().dump())
    doc["schema"] = schema
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    assert main(["report", str(path), "--out", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err
    assert f"{path}: results.json schema {shown} is not one this edgeship reads (supported: 1)" in err
    assert not (tmp_path / "report").exists() and "Traceback" not in err


@pytest.mark.parametrize("text, message", [("[1, 2]", 'no top-level "schema" field'),
                                           ("{not json", "not JSON text")])
def test_load_builds_refuses_a_file_that_is_not_a_results_document(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "results.json"
    path.write_text(text)
    with pytest.raises(ReportError, match=message):
        load_builds([path])


@pytest.mark.parametrize("key, value, allowed", [
    ("variants.1.backend", "onnx\n\n# All gates passed [here](https://e/x.apk)", "a backend id (letters, digits"),
    ("variants.1.precision", "fp32 <b>", "one of fp32, fp16, bf16, int8, w8"),
    ("created", "2026\n# heading", "an ISO 8601 time"),
])
def test_report_refuses_an_id_or_time_field_that_holds_other_text(capsys, tmp_path: Path, key: str, value: str,
                                                                    allowed: str) -> None:
    doc = json.loads(results_with().dump())
    if key == "created":
        doc["created"] = value
    else:
        doc["variants"][1][key.rsplit(".", 1)[1]] = value
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    assert main(["report", str(path), "--out", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err
    assert f"{path}: not a results.json (schema 1): {key} {json.dumps(value)}: {allowed}" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "report").exists()
