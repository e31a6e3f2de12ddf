"""build --variant: only the variants named are lowered and measured (with the eager reference); the other
variants' rows and files from the build already in the folder are kept while they still hold, else left
out and their folders removed; only the variants named decide the exit status."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

import edgeship.pipeline.run as run
from edgeship import api
from edgeship.cli import main
from edgeship.pipeline.output import MANIFEST, RESULTS
from edgeship.profile import load_profile
from tests.conftest import add_other_weights, make_tiny_project, write_profile
from tests.test_cli import sentinel_spec

TWO = """
[[variants]]
name = "lite"
backend = "pytorch-mobile"

[[variants]]
name = "ts"
backend = "torchscript"
"""


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory):
    """A full build of the tiny model (lite and ts) into ``first.out``, with its own stage cache; each test
    builds again from a copy of the folder."""
    root = tmp_path_factory.mktemp("partial")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("EDGESHIP_CACHE_DIR", str(root / "cache"))
        project = make_tiny_project(root / "tiny")
        profile, out = write_profile(root, TWO), root / "first"
        assert main(["build", "--target", str(profile), "--model", str(project / "model.toml"), "--out", str(out),
                     "--quiet"]) == 0
        yield SimpleNamespace(project=project, spec=project / "model.toml", profile=profile, out=out,
                              cache=root / "cache")


@pytest.fixture
def spied(first, monkeypatch) -> dict[str, list[str]]:
    """The variants this build lowers and the rows it measures, as the pipeline calls them."""
    monkeypatch.setenv("EDGESHIP_CACHE_DIR", str(first.cache))
    seen: dict[str, list[str]] = {"lowered": [], "measured": []}
    lower, measure = run.lower_variant, run.measure_all

    def lowering(profile, variant, *args, **kwargs):
        seen["lowered"].append(variant.name)
        return lower(profile, variant, *args, **kwargs)

    def measuring(tasks, *args, **kwargs):
        seen["measured"] += [t.row.name for t in tasks if t.reused is None]
        return measure(tasks, *args, **kwargs)

    monkeypatch.setattr(run, "lower_variant", lowering)
    monkeypatch.setattr(run, "measure_all", measuring)
    return seen


def _build(first, out: Path, capsys, *args: str, spec: Path | None = None, profile: Path | None = None
           ) -> tuple[int, str]:
    code = main(["build", "--target", str(profile or first.profile), "--model", str(spec or first.spec),
                 "--out", str(out), *args])
    _, err = capsys.readouterr()
    return code, " ".join(err.split())


def _copy(first, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(first.out, out)
    return out


def _rows(out: Path) -> dict[str, dict]:
    return {row["name"]: row for row in json.loads((out / RESULTS).read_text())["variants"]}


def test_partial_build_lowers_and_measures_only_the_named_variant_and_keeps_the_other(
        first, spied, tmp_path, capsys) -> None:
    out = _copy(first, tmp_path)
    before, ts_bytes = _rows(out), (out / "ts" / "model.pt").read_bytes()
    profile = write_profile(tmp_path, TWO.replace('backend = "pytorch-mobile"',
                                                  'backend = "pytorch-mobile"\noptions = { optimize = false }'))
    code, said = _build(first, out, capsys, "--variant", "lite", "--remeasure", profile=profile)
    assert code == 0, said
    assert spied["lowered"] == ["lite"] and sorted(spied["measured"]) == ["eager", "lite"]
    doc, rows = json.loads((out / RESULTS).read_text()), _rows(out)
    assert doc["requested_variants"] == ["lite"] and list(rows) == ["eager", "lite", "ts"]
    assert rows["ts"]["sha256"] == before["ts"]["sha256"] and (out / "ts" / "model.pt").read_bytes() == ts_bytes
    assert rows["ts"]["latency"][0]["measured_at"] == before["ts"]["latency"][0]["measured_at"]
    assert any(n.startswith("kept from the build of") for n in rows["ts"]["notes"])
    assert rows["lite"]["latency"][0]["measured_at"] != before["lite"]["latency"][0]["measured_at"]
    manifest = json.loads((out / MANIFEST).read_text())["files"]
    assert {"lite/model.ptl", "ts/model.pt"} <= set(manifest)
    assert "keep ts from the earlier build" in said and "lower ts" not in said
    # again (measurements reused), then once more: unchanged, the folder reused as it is
    spied["lowered"].clear(), spied["measured"].clear()
    assert _build(first, out, capsys, "--variant", "lite", profile=profile)[0] == 0
    assert spied == {"lowered": [], "measured": []} and "ts" in _rows(out)
    code, said = _build(first, out, capsys, "--variant", "lite", profile=profile)
    assert code == 0 and "unchanged since" in said and spied == {"lowered": [], "measured": []}


def test_partial_build_into_a_new_folder_holds_only_the_named_variant(first, spied, tmp_path, capsys) -> None:
    """Through the Python API: nothing to keep from, so the other variant is not in the build at all."""
    out = tmp_path / "new"
    results = api.build(str(first.profile), str(first.spec), out=out, variants=["ts"], quiet=True)
    assert [r.name for r in results.variants] == ["eager", "ts"] and results.requested_variants == ["ts"]
    assert results.notes == ["variant lite is not in this build (build --variant ts): no earlier build to keep it from"]
    assert spied["lowered"] == [] and "lite" not in spied["measured"]  # ts restored from the stage cache
    assert (out / "ts" / "model.pt").is_file() and not (out / "lite").exists()


def test_partial_build_of_another_model_removes_the_other_variants_artifacts(first, spied, tmp_path,
                                                                             capsys) -> None:
    """The earlier build's ts was made from other weights: it does not describe this model, so it goes."""
    out = _copy(first, tmp_path)
    other = add_other_weights(first.project)
    code, said = _build(first, out, capsys, "--variant", "lite", spec=other)
    assert code == 0, said
    assert spied["lowered"] == ["lite"] and "ts" not in spied["measured"]
    assert list(_rows(out)) == ["eager", "lite"] and not (out / "ts").exists()
    notes = json.loads((out / RESULTS).read_text())["notes"]
    assert any(n.startswith("variant ts is not in this build (build --variant lite): its artifact there is not")
               for n in notes)
    assert "ts: not kept from the earlier build" in said and "is not the one this build would make" in said
    assert f"removed {out / 'ts'}" in said
    assert not any(name.startswith("ts/") for name in json.loads((out / MANIFEST).read_text())["files"])


def test_partial_build_exit_status_is_decided_by_the_named_variants_only(first, spied, tmp_path, capsys) -> None:
    """ts fails a gate the profile now sets (gates are not part of an artifact's key: ts is kept and judged)."""
    out = _copy(first, tmp_path)
    strict = write_profile(tmp_path, TWO + "gates = { min_sqnr_db = 1000.0 }\n")
    code, said = _build(first, out, capsys, "--variant", "lite", profile=strict)
    rows = _rows(out)
    assert code == 0, said
    assert rows["ts"]["gates"]["passed"] is False and rows["lite"]["gates"]["passed"] is True
    code, said = _build(first, out, capsys, "--variant", "ts", profile=strict)
    assert code == 3 and "failed validation: ts" in said
    assert spied["lowered"] == []


def test_partial_build_unknown_variant_exits_2_before_any_work(capsys, tiny_project: Path, tmp_path) -> None:
    spec, marker = sentinel_spec(tiny_project, tmp_path)
    profile = write_profile(tmp_path, TWO)
    out = tmp_path / "out"
    code = main(["build", "--target", str(profile), "--model", str(spec), "--out", str(out), "--variant", "lite",
                 "--variant", "tss"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and f"--variant tss: {profile} has no variant 'tss'; its variants: lite, ts" in err
    assert 'did you mean "ts"' in err and "Traceback" not in err
    assert not marker.exists() and not out.exists()


def test_requested_variants_are_the_profiles_order_each_once(tmp_path) -> None:
    """``--variant ts --variant lite --variant ts`` is the build ``--variant lite --variant ts`` (one build key)."""
    from edgeship.pipeline.plan import requested_variants

    profile = load_profile(write_profile(tmp_path, TWO))
    assert requested_variants(profile, ["ts", "lite", "ts"]) == ["lite", "ts"]
    assert requested_variants(profile, "ts") == ["ts"] and requested_variants(profile, None) is None
