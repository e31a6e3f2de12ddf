"""Faults during a build: killed (kill -9) at each stage boundary, a damaged stage cache entry, a
full disk, a locked results store. After each, the build folder is consistent: results.json, when
there, agrees with every file it names (sha256), no report claims another build, and a folder in
the middle of changing says so (``.edgeship-incomplete.json``). The next build repairs it.

Kills run the real command in a subprocess through ``tests/pipeline/kill_at.py``, which wraps one
function of the build to SIGKILL the process there: no hook in edgeship, and the same point every
time. The model is the tiny one with one ONNX fp32 variant; a second weights file (``model_b.toml``)
makes the killed build differ from the one already in the folder.
"""
from __future__ import annotations

import csv
import errno
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from edgeship.cache import default_cache, entry_damage
from edgeship.cli import main
from edgeship.devices.hashing import sha256_file, sha256_path
from edgeship.pipeline import run
from edgeship.pipeline.output import INCOMPLETE, MANIFEST, UNRECORDED
from edgeship.store import ResultsStore
from tests.conftest import REPO, add_other_weights, make_tiny_project, write_profile

ORT = """
[[variants]]
name = "ort"
backend = "onnx"
"""
BUNDLE = """
[bundle]
platforms = ["jetson"]
"""


def folder_state(out: Path) -> str:
    """'whole' or 'incomplete'; AssertionError when a file disagrees with results.json or the manifest."""
    incomplete = (out / INCOMPLETE).exists()
    if not (out / "results.json").exists():
        assert incomplete, "no results.json, and the folder does not say it is incomplete"
        return "incomplete"
    results = json.loads((out / "results.json").read_text())
    rows = {row["name"]: row for row in results["variants"]}
    for row in rows.values():
        if row["file"]:
            assert sha256_path(out / row["file"]) == row["sha256"], f"{row['file']} is not what results.json says"
    if (out / "report.md").exists():  # one build's report.md shows its p50s (not its time)
        text = (out / "report.md").read_text()
        p50s = [f"{lat['p50_ms']:.3f}" for row in rows.values() for lat in row["latency"] if lat["p50_ms"]]
        # a cell: the p50, with a footnote number where it was reused from another build's measurement
        assert all(re.search(rf"\| {re.escape(p50)}( \[\d+\])? \|", text) for p50 in p50s), \
            "report.md describes another build"
    if (out / "results.csv").exists():
        for line in csv.DictReader((out / "results.csv").open()):
            assert line["created"] == results["created"], "results.csv describes another build"
            assert line["sha256"] == (rows[line["variant"]]["sha256"] or ""), "results.csv names other artifacts"
    for bundle in out.glob("*.zip"):
        with zipfile.ZipFile(bundle) as zf:
            made_from = json.loads(zf.read("manifest.json"))["results_created"]
        assert made_from == results["created"], f"{bundle.name} was made from another build"
    if incomplete:
        return "incomplete"
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["build_key"] == results["build_key"]
    for rel, sha in manifest["files"].items():
        assert sha256_file(out / rel) == sha, f"{rel} is not the file this build wrote"
    assert {"results.json", "report.md", "report.html", "results.csv", "tiny-jetson.zip"} <= set(manifest["files"])
    return "whole"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """A finished build of weights A (``base.out``), and everything needed to build weights B over it."""
    root = tmp_path_factory.mktemp("faults")
    project = make_tiny_project(root / "tiny")
    add_other_weights(project)
    ns = SimpleNamespace(root=root, project=project, profile=write_profile(root, ORT, extra=BUNDLE), out=root / "base",
                         db=f"sqlite:///{root / 'results.db'}?timeout=0.2")
    assert main(ns_args(ns, ns.out, "model.toml")) == 0
    assert folder_state(ns.out) == "whole"
    return ns


def said(text: str) -> str:
    """Progress lines as one line each way: the console wraps long ones at spaces."""
    return " ".join(text.split())


def ns_args(base: SimpleNamespace, out: Path, spec: str = "model_b.toml") -> list[str]:
    return ["build", "--target", str(base.profile), "--model", str(base.project / spec), "--out", str(out),
            "--db", base.db]


def copy_of_base(base: SimpleNamespace, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(base.out, out)
    return out


def weights_of(out: Path) -> str:
    return json.loads((out / "results.json").read_text())["model"]["weights_sha256"]


@pytest.mark.parametrize(("point", "state"), [  # make test kills at two points, one of each outcome; test-slow at all
    ("lowered", "whole"), pytest.param("staged", "whole", marks=pytest.mark.slow), ("merged", "incomplete"),
    pytest.param("moved", "incomplete", marks=pytest.mark.slow),
    pytest.param("published", "whole", marks=pytest.mark.slow)])
def test_faults_killed_build_leaves_a_consistent_folder_that_the_next_build_repairs(
        base, tmp_path, point: str, state: str) -> None:
    out = copy_of_base(base, tmp_path)
    before = (out / "results.json").read_text()
    # A cache of its own: with the session's, an earlier test's model_b build would be restored from
    # the cache and the "lowered" kill point (lower_variant) never reached.
    env = {**os.environ, "EDGESHIP_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "tests.pipeline.kill_at", point, *ns_args(base, out)], cwd=REPO,
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert folder_state(out) == state
    if point in ("lowered", "staged"):  # nothing of the new build is in the folder yet
        assert (out / "results.json").read_text() == before
    # the next build runs as a process too: it hashes edgeship's source afresh, as the killed one did
    again = subprocess.run([sys.executable, "-m", "edgeship", *ns_args(base, out)], cwd=REPO, capture_output=True,
                           text=True, timeout=600, env=env)
    err = said(again.stderr)
    assert again.returncode == 0, err[-3000:]
    assert folder_state(out) == "whole" and weights_of(out) == sha256_file(base.project / "tiny_b.pt")
    assert not (out / UNRECORDED).exists() and not (out / ".work" / ".staged").exists()
    if point in ("moved", "published"):  # whole but unrecorded: the next run records it, nothing rebuilt
        created = json.loads((out / "results.json").read_text())["created"]
        assert "unchanged since" in err and "recorded build" in err, err
        assert any(r["created"] == created for r in ResultsStore(base.db).rows(model="tiny"))


def test_faults_truncated_stage_cache_entry_is_discarded_and_lowered_again(base, tmp_path, capsys) -> None:
    sha = json.loads((base.out / "results.json").read_text())["variants"][1]["sha256"]
    entries = [p for p in (default_cache().root / "artifact").iterdir() if (p / "lowered.json").is_file()
               and json.loads((p / "lowered.json").read_text())["sha256"] == sha
               and str(base.project) in (p / "key.json").read_text()]
    assert len(entries) == 1, "the base build's artifact is not in the stage cache"
    artifact = entries[0] / "files" / "model.onnx"
    artifact.write_bytes(artifact.read_bytes()[: artifact.stat().st_size // 2])  # lowered.json still says `sha`
    out = tmp_path / "fresh"
    capsys.readouterr()
    assert main(ns_args(base, out, "model.toml")) == 0
    err = said(capsys.readouterr().err)
    unwrapped = "".join(err.split())   # the console may fold the entry's long name anywhere
    assert "".join(f"stage cache entry artifact/{entries[0].name} is damaged".split()) in unwrapped, err
    assert "lowering again" in err, err
    assert folder_state(out) == "whole"
    assert entry_damage(entries[0]) is None  # stored again, whole


@pytest.mark.parametrize("where", ["report", "measuring"])
def test_faults_full_disk_exits_1_naming_the_file_and_leaves_the_folder_whole(
        base, tmp_path, capsys, monkeypatch, where: str) -> None:
    out = copy_of_base(base, tmp_path)
    before = (out / "results.json").read_text()
    if where == "report":  # an atomic write: the staged report.html
        real_write = os.write

        def full_disk(fd: int, data) -> int:
            target = os.readlink(f"/proc/self/fd/{fd}")
            if os.path.basename(target).startswith(".report.tmp-") and target.endswith(".html"):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real_write(fd, data)

        monkeypatch.setattr(os, "write", full_disk)
        expected = "report.html: no space left on the device while writing it ("  # then: N bytes to write
    else:  # any other write of the build (numpy, shutil, a device's job folder)
        outputs = out / ".work" / "ort" / "host" / "outputs.npz"

        def measure(*args, **kwargs):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(outputs))

        monkeypatch.setattr(run, "validate_all", measure)
        expected = f"{outputs}: no space left on the device while writing it (size not known in advance"
    capsys.readouterr()
    assert main(ns_args(base, out)) == 1
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err, err
    assert ("bytes to write" in err) == (where == "report")
    assert folder_state(out) == "whole" and (out / "results.json").read_text() == before
    monkeypatch.undo()
    assert main(ns_args(base, out)) == 0
    assert folder_state(out) == "whole" and weights_of(out) == sha256_file(base.project / "tiny_b.pt")


def test_faults_locked_results_store_exits_2_and_the_next_build_records_the_build(
        base, tmp_path, capsys, monkeypatch) -> None:
    out = copy_of_base(base, tmp_path)
    db = tmp_path / "locked.db"
    args = ns_args(base, out)
    args[args.index("--db") + 1] = f"sqlite:///{db}?timeout=0.2"
    holder: dict[str, sqlite3.Connection] = {}
    measure = run.validate_all

    def measure_then_lock(*a, **k):  # another process takes the database while this build measures
        measure(*a, **k)
        holder["lock"] = sqlite3.connect(db, isolation_level=None)
        holder["lock"].execute("BEGIN EXCLUSIVE")

    monkeypatch.setattr(run, "validate_all", measure_then_lock)
    capsys.readouterr()
    assert main(args) == 2
    err = said(capsys.readouterr().err)
    assert str(db) in err and "database is locked" in err and "written and consistent" in err, err
    assert folder_state(out) == "whole" and (out / UNRECORDED).exists()
    created = json.loads((out / "results.json").read_text())["created"]
    holder["lock"].rollback()
    holder["lock"].close()
    monkeypatch.undo()
    assert main(args) == 0
    err = said(capsys.readouterr().err)
    assert "unchanged since" in err and "recorded build" in err and not (out / UNRECORDED).exists()
    assert {r["created"] for r in ResultsStore(args[args.index("--db") + 1]).rows()} == {created}


def test_faults_user_files_in_an_existing_out_folder_are_kept(base, tmp_path, capsys) -> None:
    out = copy_of_base(base, tmp_path)
    (out / "ort" / "notes.txt").write_text("mine")
    (out / "notes.txt").write_text("mine too")
    capsys.readouterr()
    assert main(ns_args(base, out)) == 0
    err = said(capsys.readouterr().err)
    assert (out / "ort" / "notes.txt").read_text() == "mine" and (out / "notes.txt").read_text() == "mine too"
    assert "ort/notes.txt:notwrittenbyedgeship" in "".join(err.split())  # long paths wrap anywhere
    assert folder_state(out) == "whole"


def test_faults_unchanged_build_writes_again_a_report_that_is_not_its_own(base, tmp_path, capsys) -> None:
    out = copy_of_base(base, tmp_path)
    (out / "report.md").write_text("# a report of some other build\n")
    (out / "results.csv").unlink()
    (out / "tiny-jetson.zip").unlink()
    capsys.readouterr()
    assert main(ns_args(base, out, "model.toml")) == 0
    err = said(capsys.readouterr().err)
    assert "report.md, results.csv, tiny-jetson.zip in" in err and "writing them again from results.json" in err, err
    assert "unchanged since" in err and "✓ lower" not in err and "✓ measure" not in err
    assert folder_state(out) == "whole"
    assert (out / "results.json").read_text() == (base.out / "results.json").read_text()
