"""Nothing read back from a build folder is trusted: a path in ``.edgeship-build.json`` or
results.json that leads out of the folder is refused (exit 2) before anything is deleted, and
``edgeship bundle`` neither copies a file results.json names outside the folder nor one it gives
no sha256 for. (Build folders are shared: NFS, CI caches, "build job, then sign job".)"""
from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path

import pytest

from edgeship.cli import main
from edgeship.pipeline.output import MANIFEST
from tests.conftest import make_tiny_project, write_profile
from tests.faults.test_one_build_per_folder import files
from tests.pipeline.test_faults import BUNDLE, ORT


@pytest.fixture
def built(tmp_path: Path) -> tuple[list[str], Path, Path]:
    """A finished build of the tiny model with a jetson bundle: (the build's arguments, --out, a
    file beside the folder that no build may touch)."""
    project = make_tiny_project(tmp_path / "tiny")
    profile = write_profile(tmp_path, ORT, extra=BUNDLE)
    out = tmp_path / "out"
    args = ["--target", str(profile), "--model", str(project / "model.toml"), "--out", str(out)]
    assert main(["build", *args, "--db", f"sqlite:///{tmp_path / 'r.db'}"]) == 0
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file\n")
    return args, out, victim


def test_faults_a_manifest_path_out_of_the_folder_is_refused_and_nothing_is_deleted(built, tmp_path, capsys) -> None:
    args, out, victim = built
    doc = json.loads((out / MANIFEST).read_text())
    doc["files"]["ort/../../victim.txt"] = "0" * 64
    (out / MANIFEST).write_text(json.dumps(doc))
    before = files(out)
    capsys.readouterr()
    assert main(["build", *args, "--remeasure", "--db", f"sqlite:///{tmp_path / 'r.db'}"]) == 2
    err = capsys.readouterr().err
    assert f"{out / MANIFEST}: names 'ort/../../victim.txt', outside {out}" in " ".join(err.split())
    assert victim.read_text() == "the user's file\n" and files(out) == before


def test_faults_a_results_json_path_out_of_the_folder_is_refused(built, tmp_path, capsys) -> None:
    args, out, victim = built
    (out / MANIFEST).unlink()  # a folder from before manifests: results.json says which files are edgeship's
    doc = json.loads((out / "results.json").read_text())
    next(v for v in doc["variants"] if v["name"] == "ort")["file"] = "../victim.txt"
    (out / "results.json").write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["build", *args, "--remeasure", "--db", f"sqlite:///{tmp_path / 'r.db'}"]) == 2
    assert f"names '../victim.txt', outside {out}" in " ".join(capsys.readouterr().err.split())
    assert victim.read_text() == "the user's file\n"


@pytest.mark.parametrize(("file", "sha256", "said"), [
    ("ABSOLUTE", None, "ort's file is '/', not a name edgeship writes"),
    ("../victim.txt", "SHA", "ort's file is '..', not a name edgeship writes"),
    ("ort/model.onnx", None, "no sha256 for ort's artifact, so {out}/ort/model.onnx cannot be checked"),
    ("SYMLINK", "SHA", "the artifact of ort is 'ort/model.onnx', outside {out}; refused"),
])
def test_faults_bundle_copies_only_checked_files_of_the_folder(built, capsys, file: str, sha256, said: str) -> None:
    from edgeship.devices.hashing import sha256_file

    args, out, victim = built
    if file == "SYMLINK":  # the variant folder a link to a folder elsewhere, holding the "artifact"
        elsewhere = victim.parent / "elsewhere"
        elsewhere.mkdir()
        (elsewhere / "model.onnx").write_bytes(victim.read_bytes())
        shutil.rmtree(out / "ort")
        (out / "ort").symlink_to(elsewhere)
    file = str(victim) if file == "ABSOLUTE" else "ort/model.onnx" if file == "SYMLINK" else file
    doc = json.loads((out / "results.json").read_text())
    row = next(v for v in doc["variants"] if v["name"] == "ort")
    row["file"], row["sha256"] = file, sha256_file(victim) if sha256 == "SHA" else sha256
    (out / "results.json").write_text(json.dumps(doc))
    zips = {p: p.read_bytes() for p in out.glob("*.zip")}
    capsys.readouterr()
    assert main(["bundle", *args, "--platform", "jetson"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert said.format(file=file, out=out) in err and "Traceback" not in err, err
    assert {p: p.read_bytes() for p in out.glob("*.zip")} == zips


def test_build_writes_nothing_through_links_planted_in_its_work_folder(tmp_path, capsys) -> None:
    """A link at ``--out/.work/watchdog-stacks.txt``, or ``--out/.work`` itself a link to another folder, put
    there before a build (a shared folder, a CI cache): the build makes ``.work`` new (mode 0700) and writes
    nothing where they point. Before, the watchdog's stacks file overwrote the linked file (as root: any
    file), and the evaluation inputs landed in the linked folder."""
    project = make_tiny_project(tmp_path / "tiny")
    profile = write_profile(tmp_path, ORT)
    victim, elsewhere = tmp_path / "victim.txt", tmp_path / "elsewhere"
    victim.write_text("precious data\n")
    elsewhere.mkdir()
    (elsewhere / "thesis.tex").write_text("the user's\n")
    (tmp_path / "out" / ".work").mkdir(parents=True)
    (tmp_path / "out" / ".work" / "watchdog-stacks.txt").symlink_to(victim)
    (tmp_path / "out2").mkdir()
    (tmp_path / "out2" / ".work").symlink_to(elsewhere)
    for out in (tmp_path / "out", tmp_path / "out2"):
        assert main(["build", "--target", str(profile), "--model", str(project / "model.toml"), "--out", str(out),
                     "--db", f"sqlite:///{tmp_path / 'r.db'}"]) == 0, capsys.readouterr().err
    assert victim.read_text() == "precious data\n"
    assert [p.name for p in elsewhere.iterdir()] == ["thesis.tex"] and (elsewhere / "thesis.tex").read_text() == \
        "the user's\n"
    for out in (tmp_path / "out", tmp_path / "out2"):
        work = (out / ".work").lstat()
        assert stat.S_ISDIR(work.st_mode) and stat.S_IMODE(work.st_mode) == 0o700
