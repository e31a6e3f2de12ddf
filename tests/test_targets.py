"""edgeship targets: every profile --target NAME accepts, with its variants and devices; edgeship targets show
NAME: one profile with every setting as a build uses it."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import tomllib
from rich.console import Console

from edgeship import api
from edgeship.backends.registry import SPECS
from edgeship.cli import main
from edgeship.profile import Gates, LatencySettings
from edgeship.profile.load import PROJECT_TARGETS
from tests.conftest import REPO

MINE = """\
description = "a project's own profile"
devices = ["orin"]
[[variants]]
name = "mine-fp32"
backend = "onnx"
"""


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch) -> Path:
    """A working folder without a targets/ folder: only the built-in profiles."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _lines(capsys) -> tuple[list[list[str]], str]:
    out, err = capsys.readouterr()
    return [line.split() for line in out.splitlines()], " ".join(err.split())


def test_targets_lists_every_built_in_profile_with_its_variants(elsewhere, capsys) -> None:
    assert main(["targets"]) == 0
    lines, _ = _lines(capsys)
    assert lines[0] == ["target", "variant", "backend", "precision", "devices", "profile"]
    listed = {tuple(cells[:4]) for cells in lines[1:]}
    files = sorted((REPO / "targets").glob("*.toml"))
    expected = {(path.stem, v["name"], v["backend"], v.get("precision", "fp32"))
                for path in files for v in tomllib.loads(path.read_text())["variants"]}
    assert len(files) >= 7 and listed == expected
    assert all(cells[-3:] == [str(PROJECT_TARGETS / f"{cells[0]}.toml"), "(built", "in)"] for cells in lines[1:])


def test_targets_lists_a_projects_profiles_first_and_the_built_in_one_they_hide(elsewhere, capsys) -> None:
    (elsewhere / "targets").mkdir()
    (elsewhere / "targets" / "mine.toml").write_text(MINE)
    (elsewhere / "targets" / "host.toml").write_text(MINE)
    (elsewhere / "targets" / "not a name.toml").write_text(MINE)   # --target cannot name it: not listed
    entries = {e.name: e for e in api.targets()}
    assert "not a name" not in entries and entries["mine"].origin == "this project"
    assert entries["host"].path == Path("targets/host.toml").absolute() and entries["host"].hides is not None
    assert main(["targets"]) == 0
    lines, _ = _lines(capsys)
    host = [cells for cells in lines[1:] if cells[0] == "host"]
    assert [cells[:4] for cells in host] == [["host", "mine-fp32", "onnx", "fp32"]]   # the built-in host is hidden
    assert " ".join(host[0][4:]) == (f"orin (with --devices) {Path('targets/host.toml').absolute()} (this project; "
                                     f"hides {PROJECT_TARGETS / 'host.toml'})")


def test_targets_exits_2_when_a_profile_does_not_load_and_lists_the_others(elsewhere, capsys) -> None:
    (elsewhere / "targets").mkdir()
    (elsewhere / "targets" / "broken.toml").write_text(MINE.replace('"onnx"', '"onx"'))
    assert main(["targets"]) == 2
    lines, err = _lines(capsys)
    assert {"broken", "host", "android"} <= {cells[0] for cells in lines[1:]}
    assert "1 profile(s) cannot be used" in err and 'variants[0].backend = "onx"' in err


def test_targets_on_a_terminal_is_a_rich_table(elsewhere) -> None:
    from edgeship.reports.targets import print_targets

    console = Console(file=io.StringIO(), force_terminal=True, width=200, color_system=None)
    print_targets(api.targets(), console)
    table = console.file.getvalue()
    assert "┃ target" in table and "│ host " in table and "host (default)" in table


def test_targets_show_resolves_every_default(tmp_path, capsys) -> None:
    profile = tmp_path / "mine.toml"
    profile.write_text(MINE.replace("[[variants]]", "[gates]\nmin_sqnr_db = 50.0\n[[variants]]")
                       + "gates = { min_cosine = 0.99 }\n")
    assert main(["targets", "show", str(profile)]) == 0
    doc = json.loads(capsys.readouterr().out)
    variant = doc["variants"][0]
    assert doc["name"] == "mine" and doc["path"] == str(profile) and doc["devices"] == ["orin"]
    assert doc["latency"] == LatencySettings().model_dump(mode="json") and doc["latency"]["warmup"] == 10
    assert doc["gates"] == Gates(min_sqnr_db=50.0).model_dump(mode="json")
    assert variant["gates"] == Gates(min_sqnr_db=50.0, min_cosine=0.99).model_dump(mode="json")
    assert variant["options"] == SPECS["onnx"].parse_options({}).model_dump(mode="json") and variant["options"]
    assert variant["capture"] == ["export", "trace", "script"] and variant["precision"] == "fp32"


def test_targets_show_unknown_name_exits_2_listing_the_known_ones(elsewhere, capsys) -> None:
    assert main(["targets", "show", "andriod"]) == 2
    _, err = _lines(capsys)
    assert "target 'andriod'" in err and "known targets: android, host" in err and 'did you mean "android"' in err
