"""``--out`` belongs to one build at a time: real ``edgeship build`` processes into one folder. The
second waits for the first (or stops, exit 2, with ``--no-wait``), the folder ends whole with the
later build's files, and a build that fails leaves the folder as it found it: no ``.work``, no lock
file, and no folder at all when it made it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgeship.devices.hashing import sha256_path
from edgeship.pipeline.output import LOCK, MANIFEST, WORK
from tests.conftest import REPO, add_other_weights, make_tiny_project, write_profile
from tests.pipeline.test_faults import ORT

HOLD = """
import sys, time
from pathlib import Path
from edgeship.locks import FileLock
with FileLock(Path(sys.argv[1]), remove=True):
    Path(sys.argv[2]).write_text("held")
    while not Path(sys.argv[3]).exists():
        time.sleep(0.05)
"""


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path]:
    """The tiny model and a one-variant ONNX profile: (model.toml, profile); beside model.toml,
    model_b.toml: the same model with other weights (tiny_b.pt)."""
    folder = make_tiny_project(tmp_path / "tiny")
    add_other_weights(folder)
    return folder / "model.toml", write_profile(tmp_path, ORT)


def break_forward(model: Path) -> None:
    """The tiny model's forward raises (a model error: exit 2)."""
    code = model.parent / "tinynet.py"
    broken = "        raise RuntimeError('broken model')\n"
    code.write_text(code.read_text().replace("        y = self.stem(x)\n", broken, 1))


def build(model: Path, profile: Path, out: Path, *extra: str) -> subprocess.Popen:
    """``edgeship build`` started as a process; its stage cache and results database beside the profile."""
    env = {**os.environ, "EDGESHIP_CACHE_DIR": str(profile.parent / "cache")}
    return subprocess.Popen([sys.executable, "-m", "edgeship", "build", "--target", str(profile), "--model",
                             str(model), "--out", str(out), "--db", f"sqlite:///{profile.parent / 'r.db'}", *extra],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    _, err = proc.communicate(timeout=600)
    return proc.returncode, " ".join(err.split())


def wait_for(path: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while not path.exists():
        assert proc.poll() is None, finish(proc)
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.02)


def files(out: Path) -> dict[Path, bytes]:
    """Every file in a build folder with its bytes, ``.work`` (a build's scratch space) aside."""
    return {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and WORK not in p.relative_to(out).parts}


def whole(out: Path) -> dict:
    """The folder's results.json, after checking every file it and the manifest name."""
    results = json.loads((out / "results.json").read_text())
    for row in results["variants"]:
        if row["file"]:
            assert sha256_path(out / row["file"]) == row["sha256"]
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["build_key"] == results["build_key"] and not (out / LOCK).exists()
    return results


@pytest.mark.slow
def test_faults_two_builds_into_one_folder_the_second_waits_and_the_folder_ends_whole(project, tmp_path) -> None:
    model, profile = project
    out = tmp_path / "out"
    first = build(model, profile, out)
    wait_for(out / LOCK, first)  # the first holds the folder
    second = build(model.parent / "model_b.toml", profile, out)
    (code1, err1), (code2, err2) = finish(first), finish(second)
    assert (code1, code2) == (0, 0), (err1[-2000:], err2[-2000:])
    assert f"waiting for the build pid {first.pid} on " in err2 and f"that is using {out}" in err2, err2
    assert "waiting for the build" not in err1
    results = whole(out)  # the second build's, whole
    assert results["model"]["weights_sha256"] == sha256_path(model.parent / "tiny_b.pt")
    assert (out / "ort" / "model.onnx").is_file()


@pytest.mark.slow
def test_faults_no_wait_stops_with_exit_2_naming_the_holder_and_changes_nothing(project, tmp_path) -> None:
    model, profile = project
    out = tmp_path / "out"
    code, err = finish(build(model, profile, out))
    assert code == 0, err[-2000:]
    before = files(out)
    held, release = tmp_path / "held", tmp_path / "release"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out / LOCK), str(held), str(release)], cwd=REPO)
    try:
        wait_for(held, holder)
        code, err = finish(build(model, profile, out, "--remeasure", "--no-wait"))  # waiting would hang here
    finally:
        release.touch()
        holder.wait(30)
    assert code == 2 and "Traceback" not in err, err[-2000:]
    assert f"error: {out} is in use by another build (pid {holder.pid} on " in err and "--no-wait was given" in err
    assert files(out) == before
    whole(out)


def test_faults_a_failed_build_into_a_new_folder_leaves_no_folder(project, tmp_path) -> None:
    model, profile = project
    break_forward(model)
    out = tmp_path / "new" / "out"
    code, err = finish(build(model, profile, out))
    assert code == 2 and "broken model" in err and "Traceback" not in err, err[-2000:]
    assert not (tmp_path / "new").exists()


@pytest.mark.slow
def test_faults_a_failed_build_over_a_finished_one_leaves_it_as_it_was(project, tmp_path) -> None:
    model, profile = project
    out = tmp_path / "out"
    code, err = finish(build(model, profile, out))
    assert code == 0, err[-2000:]
    before = files(out)
    break_forward(model)
    code, err = finish(build(model, profile, out))
    assert code == 2 and "broken model" in err, err[-2000:]
    assert not (out / WORK).exists() and not (out / LOCK).exists()
    assert files(out) == before


@pytest.mark.slow
def test_faults_bundle_waits_while_a_build_holds_the_folder(project, tmp_path) -> None:
    """``edgeship bundle`` writes into the build's folder, so it waits for a build using it too."""
    model, profile = project
    out = tmp_path / "out"
    code, err = finish(build(model, profile, out))
    assert code == 0, err[-2000:]
    held, release = tmp_path / "held", tmp_path / "release"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out / LOCK), str(held), str(release)], cwd=REPO)
    try:
        wait_for(held, holder)
        bundle = subprocess.Popen([sys.executable, "-m", "edgeship", "bundle", "--target", str(profile), "--model",
                                   str(model), "--out", str(out), "--platform", "jetson"], cwd=REPO,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(8)  # edgeship's start (a few seconds here), then the wait
        assert bundle.poll() is None and not list(out.glob("*.zip"))  # still waiting, nothing written
    finally:
        release.touch()
        holder.wait(30)
    code, err = finish(bundle)
    assert code == 0 and f"waiting for the build pid {holder.pid} on " in err, err[-2000:]
    assert (out / "tiny-jetson.zip").is_file() and not (out / LOCK).exists()
