"""edgeship matrix without Ray: the file checked up front, each build's folder where `edgeship build`
puts it, the matrix report, and a failing build reported without losing the others."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from edgeship.cli import main
from edgeship.matrix.spec import MatrixError, load_matrix
from tests.conftest import REPO

ONNX = '[[variants]]\nname = "ort"\nbackend = "onnx"\noptions = { dynamic_batch = false }\n'
MOBILE = '[[variants]]\nname = "lite"\nbackend = "pytorch-mobile"\n'
OPENVINO = '[[variants]]\nname = "ov"\nbackend = "openvino"\n'


def write_matrix(folder: Path, tiny_project: Path, body: str = "") -> Path:
    (folder / "onnxonly.toml").write_text(ONNX)
    (folder / "mobile.toml").write_text(MOBILE)
    path = folder / "matrix.toml"
    path.write_text(f'models = ["{tiny_project / "model.toml"}"]\ntargets = ["onnxonly.toml", "mobile.toml"]\n'
                    f'devices = ["host"]\n{body}')
    return path


def test_a_matrix_file_is_checked_before_the_first_build_naming_the_key(tmp_path, tiny_project) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('models = ["demo", "demo"]\ntargets = ["hots"]\nnum_cpus = 0\n')
    with pytest.raises(MatrixError, match=r"models = \['demo', 'demo'\]: listed twice: demo") as e:
        load_matrix(bad)
    assert "num_cpus" in str(e.value)
    bad.write_text('models = ["nowhere/model.toml"]\ntargets = ["hots"]\n')
    with pytest.raises(MatrixError, match=r"models\[0\] = 'nowhere/model.toml': .*not found.*targets\[0\] = 'hots'"
                                          r".*did you mean \"host\""):
        load_matrix(bad)
    bad.write_text('models = ["demo"]\ntargets = ["host"]\ndevices = ["pixel8"]\n')
    with pytest.raises(MatrixError, match="devices: --device pixel8: unknown device"):
        load_matrix(bad)
    assert main(["matrix", str(bad), "--out", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()


def test_the_example_matrix_file_loads() -> None:
    matrix = load_matrix(REPO / "examples" / "matrix.toml")
    assert [c.folder for c in matrix.cells()] == ["host/digitnet", "android/digitnet"] and matrix.devices == ["host"]


def test_matrix_locally_writes_each_build_as_edgeship_build_does_and_the_report(tmp_path, tiny_project,
                                                                                capsys) -> None:
    path = write_matrix(tmp_path, tiny_project)
    out, db = tmp_path / "out", f"sqlite:///{tmp_path / 'results.db'}"
    assert main(["matrix", str(path), "--out", str(out), "--db", db]) == 0
    printed = capsys.readouterr().out
    assert "tiny × " in printed and "done in" in printed and "wrote " in printed
    assert "| tiny | mobile | host | lite (pytorch-mobile fp32) |" in printed  # the summary table
    for target, variant in (("onnxonly", "ort"), ("mobile", "lite")):
        results = json.loads((out / target / "tiny" / "results.json").read_text())
        assert [v["name"] for v in results["variants"]] == ["eager", variant]
        assert (out / target / "tiny" / ".edgeship-build.json").exists()
    report = json.loads((out / "matrix.json").read_text())
    assert [(r["target"], r["device"], r["best"]) for r in report["rows"]] == [
        ("onnxonly", "host", "ort"), ("mobile", "host", "lite")]
    assert all(r["p50_ms"] > 0 and r["accuracy"].startswith("top-1 ") and "points)" in r["accuracy"]
               for r in report["rows"])  # the report's own top-1 cells
    assert "| tiny | onnxonly | host | ort (onnx fp32) |" in (out / "matrix.md").read_text()
    from edgeship.store import ResultsStore
    rows = ResultsStore(db).rows()
    assert {r["target"] for r in rows} == {"onnxonly", "mobile"}


def test_a_build_that_fails_is_reported_and_the_others_are_kept(tmp_path, tiny_project, capsys) -> None:
    path = write_matrix(tmp_path, tiny_project)
    (tmp_path / "mobile.toml").write_text(MOBILE + 'gates = { max_p50_ms = 0.000001 }\n')
    out = tmp_path / "out"
    assert main(["matrix", str(path), "--out", str(out), "--db", f"sqlite:///{tmp_path / 'r.db'}"]) == 3
    assert "1 of 2 builds did not pass: tiny × mobile (gates failed)" in capsys.readouterr().err
    report = json.loads((out / "matrix.json").read_text())
    assert [b["state"] for b in report["builds"]] == ["done", "gates failed"]
    assert (out / "onnxonly" / "tiny" / "results.json").exists() and (out / "mobile" / "tiny" / "results.json").exists()
    assert "## Builds that did not pass" in (out / "matrix.md").read_text()


def test_lab_node_starts_ray_with_one_resource_per_device_of_its_file(tmp_path, monkeypatch) -> None:
    from edgeship.errors import DeviceError
    from edgeship.matrix import lab

    devices = tmp_path / "lab.toml"
    devices.write_text('[devices.pixel8]\ntransport = "adb"\nserial = "X1"\n'
                       '[devices.orin]\ntransport = "ssh"\nhost = "orin.local"\nuser = "nvidia"\n')
    monkeypatch.setattr(lab, "ray_command", lambda: "ray")
    command = lab.node_command(devices, "head:6379", [], 2)
    assert command == ["ray", "start", "--address=head:6379",
                       '--resources={"device:pixel8": 1, "device:orin": 1}', "--num-cpus=2"]
    assert lab.node_command(devices, "head:6379", ["orin"], None)[-1] == '--resources={"device:orin": 1}'
    with pytest.raises(DeviceError, match="no device 'jetson'"):
        lab.node_command(devices, "head:6379", ["jetson"], None)


def test_a_folder_edgeship_did_not_write_is_never_replaced_by_a_matrix_build(tmp_path) -> None:
    from edgeship.devices.hashing import sha256_file
    from edgeship.matrix.run import land, pack_folder, refuse_foreign

    foreign = tmp_path / "out" / "host" / "tiny"
    foreign.mkdir(parents=True)
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(MatrixError, match=r"holds notes.txt, which edgeship did not write"):
        refuse_foreign(foreign)
    assert (foreign / "notes.txt").read_text() == "mine"
    build = tmp_path / "build"
    (build / ".work").mkdir(parents=True)
    (build / "results.json").write_text("{}")
    (build / ".work" / "job.json").write_text("{}")  # edgeship's own bookkeeping
    (build / ".edgeship-build.json").write_text(json.dumps(
        {"format": "edgeship-build", "version": 1, "build_key": "k",
         "files": {"results.json": sha256_file(build / "results.json")}}))
    ours = tmp_path / "out" / "android" / "tiny"
    land(pack_folder(build), ours)
    land(pack_folder(build), ours)  # an edgeship folder: a later run replaces it
    assert sorted(p.name for p in ours.iterdir()) == [".edgeship-build.json", ".work", "results.json"]
    assert sorted(p.name for p in ours.parent.iterdir()) == ["tiny"]  # no temporary folder left
    (ours / "results.json.bak").write_text("a user's copy")  # a file edgeship did not write, inside its folder
    with pytest.raises(MatrixError, match=r"holds results.json.bak, which edgeship did not write"):
        land(pack_folder(build), ours)
    assert (ours / "results.json.bak").read_text() == "a user's copy"


def test_matrix_md_shows_model_target_device_and_variant_names_as_written(tmp_path) -> None:
    """Names from a matrix file and its builds' results (Markdown, HTML, a newline, a table's ``|``)
    are shown in matrix.md as written: one table row each, no heading, link, image or emphasis; a
    measurement the build reused is marked and the mark explained."""
    from markdown_it import MarkdownIt

    from edgeship.matrix.outcome import CellResult
    from edgeship.matrix.report import write_matrix_report
    from edgeship.matrix.spec import Matrix
    from tests.reports.builds import reused_results

    model, target, device = "m | x <img src=x> [here](https://evil.example)\n# Heading", "t*x*", "dev|<b>"
    results = reused_results()
    results.variants[1].name = "ort_[link](http://e)"
    for row in results.variants:
        row.latency[0].device = device
    (tmp_path / "t" / "m").mkdir(parents=True)
    results.write(tmp_path / "t" / "m" / "results.json")
    cells = [CellResult(model, target, "t/m", "done", 1.0),
             CellResult(model, "u", "u/m", "failed", 1.0, error="[x](y)")]
    matrix = Matrix(tmp_path / "m.toml", [(model, "m.toml")], [(target, "t")], [device], None, 1, 0)
    html = MarkdownIt("commonmark").enable(["table"]).render(
        write_matrix_report(matrix, tmp_path, cells, "local", 1.0).read_text())
    tags = set(re.findall(r"<([a-z0-9]+)[\s>]", html))
    assert tags <= {"h1", "h2", "p", "table", "thead", "tbody", "tr", "th", "td", "ul", "li"}, tags
    assert html.count("<h1>") == 1 and html.count("<tr>") == 3 and html.count("<h2>") == 1
    literal = " ".join(model.split()).replace("<", "&lt;").replace(">", "&gt;")
    assert html.count(literal) == 3 and f"<td>{target}</td>" in html and "ort_[link](http://e) (onnx fp32)" in html
    assert ">0.001*</td>" in html and "* not measured by this run" in html


def test_matrix_locally_reports_its_finished_builds_when_a_stall_in_native_code_ends_it(tmp_path, tiny_project) -> None:
    """A build stuck in native code (tests.faults.stall_at native: the ONNX lowering deadlocks) ends the
    process, which nothing can unwind; before it goes, that build is failed with the watchdog's message, the
    builds after it are named as not run, and matrix.json and matrix.md hold the builds finished before.
    Before, the process ended at once: no matrix report at all."""
    import os
    import subprocess
    import sys

    fast = "[latency]\nwarmup = 1\niterations = 3\nthreads = 1\n[evaluation]\nsamples = 8\n"
    (tmp_path / "lite.toml").write_text(fast + MOBILE)
    (tmp_path / "stuck.toml").write_text(fast + "[limits]\nlowering_s = 2\n" + ONNX)
    (tmp_path / "later.toml").write_text(fast + MOBILE)
    path = tmp_path / "matrix.toml"
    path.write_text(f'models = ["{tiny_project / "model.toml"}"]\ntargets = ["lite.toml", "stuck.toml", "later.toml"]\n'
                    'devices = ["host"]\n')
    out = tmp_path / "out"
    env = {**os.environ, "EDGESHIP_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "tests.faults.stall_at", "native", str(tmp_path), "matrix", str(path),
                           "--out", str(out), "--db", f"sqlite:///{tmp_path / 'r.db'}"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "the step 'lower ort (onnx fp32)' did not finish within 2 s" in proc.stderr, proc.stderr[-2000:]
    report = json.loads((out / "matrix.json").read_text())
    assert [(b["target"], b["state"]) for b in report["builds"]] == [("lite", "done"), ("stuck", "failed")]
    error = report["builds"][1]["error"]
    assert "did not come back from native code, so edgeship ended its process" in error
    assert error.endswith("the matrix ended with it (the process could not go on), so 1 build(s) were not run: "
                          "tiny × later")
    assert "tiny × stuck: failed: the step" in (out / "matrix.md").read_text()
    assert "wrote " in proc.stdout and (out / "lite" / "tiny" / "results.json").exists()


def test_matrix_builds_record_into_a_relative_sqlite_store_by_its_absolute_path(tmp_path, monkeypatch) -> None:
    """`--db sqlite:///lab.db` is this folder's lab.db for every build: Ray's workers run in a folder of their
    own, where the relative path made a new store per worker (two builds made one at once, one failed)."""
    import edgeship.matrix.report as report
    from edgeship.matrix import run

    monkeypatch.chdir(tmp_path)
    seen: list[str] = []
    monkeypatch.setattr(run, "run_local", lambda matrix, out, db, say: seen.append(db) or [])
    monkeypatch.setattr(report, "write_matrix_report", lambda *a: None)
    for url in ("sqlite:///lab.db", f"sqlite:///{tmp_path / 'abs.db'}"):
        run.run_matrix(load_matrix(REPO / "examples" / "matrix.toml"), tmp_path / "out", db=url, say=lambda _: None)
    assert seen == [f"sqlite:///{tmp_path / 'lab.db'}", f"sqlite:///{tmp_path / 'abs.db'}"]
    assert run.absolute_db("postgresql+psycopg://ci@db/edgeship") == "postgresql+psycopg://ci@db/edgeship"
