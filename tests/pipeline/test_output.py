"""The build folder: publishing a staged build keeps every file edgeship did not write, replaces and
removes only its own, refuses to overwrite anyone else's, and leaves a manifest of what it wrote."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgeship.errors import OutputError
from edgeship.pipeline.output import INCOMPLETE, MANIFEST, RESULTS, BuildFolder
from edgeship.results import ModelInfo, Results, VariantResult


def _results(*variants: str) -> str:
    rows = [VariantResult(name="eager", backend="eager", precision="fp32")]
    rows += [VariantResult(name=v, backend="onnx", precision="fp32", file=f"{v}/model.onnx") for v in variants]
    return Results(target="t", created="2026-01-01T00:00:00Z", model=ModelInfo(name="m", entry="m:b", inputs=[],
                   params=1), toolchain={}, variants=rows, build_key="k").dump()


def _stage(folder: BuildFolder, files: dict[str, str]) -> None:
    staged = folder.stage()
    for rel, text in files.items():
        (staged / rel).parent.mkdir(parents=True, exist_ok=True)
        (staged / rel).write_text(text)


def _build(folder: BuildFolder, variants: list[str], extra: dict[str, str] | None = None) -> list[str]:
    files = {RESULTS: _results(*variants), "report.md": "report", **{f"{v}/model.onnx": f"onnx {v}" for v in variants}}
    _stage(folder, {**files, **(extra or {})})
    return folder.publish("k", variants)


def test_output_publish_writes_every_file_and_a_manifest_with_their_sha256(tmp_path: Path) -> None:
    folder = BuildFolder(tmp_path / "out")
    _build(folder, ["a"], {"a/sensitivity.json": "{}"})
    manifest = json.loads((tmp_path / "out" / MANIFEST).read_text())
    assert set(manifest["files"]) == {RESULTS, "report.md", "a/model.onnx", "a/sensitivity.json"}
    assert all(folder.sha(rel) == sha for rel, sha in manifest["files"].items())
    assert not (tmp_path / "out" / INCOMPLETE).exists() and not folder.staged.exists()


def test_output_publish_keeps_a_user_file_in_a_variant_folder_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "a").mkdir(parents=True)
    (out / "a" / "notes.txt").write_text("mine")
    (out / "README.txt").write_text("mine too")
    messages = _build(BuildFolder(out), ["a"])
    assert (out / "a" / "notes.txt").read_text() == "mine" and (out / "README.txt").read_text() == "mine too"
    assert (out / "a" / "model.onnx").read_text() == "onnx a"
    assert any("a/notes.txt" in m and "not written by edgeship" in m for m in messages)


def test_output_publish_replaces_and_removes_only_edgeships_own_files(tmp_path: Path) -> None:
    out, folder = tmp_path / "out", BuildFolder(tmp_path / "out")
    _build(folder, ["a"], {"a/lowering.log": "failed once"})
    (out / "a" / "notes.txt").write_text("mine")
    _build(folder, ["a"])
    assert not (out / "a" / "lowering.log").exists()  # edgeship's, and this build wrote none
    assert (out / "a" / "notes.txt").read_text() == "mine"


def test_output_stale_variant_folder_is_removed_only_when_all_its_files_are_edgeships(tmp_path: Path) -> None:
    out, folder = tmp_path / "out", BuildFolder(tmp_path / "out")
    _build(folder, ["a", "b", "c"])
    (out / "b" / "notes.txt").write_text("mine")
    messages = _build(folder, ["c"])
    assert not (out / "a").exists() and any("removed" in m and str(out / "a") in m for m in messages)
    assert (out / "b" / "notes.txt").read_text() == "mine" and (out / "b" / "model.onnx").read_text() == "onnx b"
    assert any("kept" in m and "b/notes.txt" in m for m in messages)
    # b's own file stays known, so once the user's file is gone the next build removes the folder
    (out / "b" / "notes.txt").unlink()
    _build(folder, ["c"])
    assert not (out / "b").exists()


def test_output_publish_refuses_to_overwrite_a_file_edgeship_did_not_write(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "a").mkdir(parents=True)
    (out / "a" / "model.onnx").write_text("the user's own model")
    folder = BuildFolder(out)
    with pytest.raises(OutputError, match=r"a/model.onnx.*edgeship did not write"):
        _build(folder, ["a"])
    assert (out / "a" / "model.onnx").read_text() == "the user's own model"
    assert not (out / RESULTS).exists() and not (out / INCOMPLETE).exists()


@pytest.mark.parametrize("name", [RESULTS, "report.md"])
def test_output_conflicts_name_a_user_file_where_a_build_file_goes(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_text("mine")
    assert BuildFolder(tmp_path).conflicts([RESULTS, "report.md", "a/model.onnx"]) == [name]


def test_output_conflicts_name_a_user_file_where_a_variant_folder_goes(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("a file, not a folder")
    assert BuildFolder(tmp_path).conflicts(["a/model.onnx"]) == ["a"]


def test_output_folder_from_before_manifests_is_taken_over_from_its_results(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "a").mkdir(parents=True)
    (out / RESULTS).write_text(_results("a", "gone"))
    (out / "report.md").write_text("old report")
    (out / "a" / "model.onnx").write_text("old onnx")
    (out / "a" / "sensitivity.json").write_text("{}")  # written by an old edgeship, but no record says so
    (out / "gone").mkdir()
    (out / "gone" / "model.onnx").write_text("old")
    messages = _build(BuildFolder(out), ["a"])
    assert (out / "a" / "model.onnx").read_text() == "onnx a" and (out / "report.md").read_text() == "report"
    assert (out / "a" / "sensitivity.json").exists() and any("sensitivity.json" in m for m in messages)
    assert not (out / "gone").exists()


def test_output_publish_retracts_old_results_before_changing_any_artifact(tmp_path: Path, monkeypatch) -> None:
    out, folder = tmp_path / "out", BuildFolder(tmp_path / "out")
    _build(folder, ["a"])
    seen = []
    real = BuildFolder._merge_variant

    def merge(self, name, known, files):
        seen.append(((out / RESULTS).exists(), (out / "report.md").exists(), (out / INCOMPLETE).exists()))
        return real(self, name, known, files)

    monkeypatch.setattr(BuildFolder, "_merge_variant", merge)
    _build(folder, ["a"])
    assert seen == [(False, False, True)]


def test_record_pending_says_when_the_kept_build_cannot_be_read(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from edgeship.pipeline.finish import record_pending
    from edgeship.pipeline.output import UNRECORDED, BuildFolder

    (tmp_path / UNRECORDED).write_text("{not json")
    said: list[str] = []
    plan = SimpleNamespace(store=SimpleNamespace(display_url="sqlite://"), out_dir=tmp_path)
    record_pending(plan, BuildFolder(tmp_path), SimpleNamespace(info=said.append))
    assert said and "cannot be read, or was not written by this machine's edgeship" in said[0]


def test_pending_build_is_taken_only_as_this_machines_edgeship_wrote_it(tmp_path: Path) -> None:
    """A kept build goes into the results store with the next build: one edited or planted in --out
    (numbers nothing measured) is not taken, even with every field in place."""
    from edgeship.pipeline.output import UNRECORDED

    folder = BuildFolder(tmp_path)
    folder.staged.mkdir(parents=True)
    results = Results.model_validate_json(_results("a"))
    folder.stage_pending("b1", "sqlite://", results)
    (folder.staged / UNRECORDED).rename(tmp_path / UNRECORDED)
    assert folder.pending() is not None and folder.pending().build_id == "b1"
    doc = json.loads((tmp_path / UNRECORDED).read_text())
    doc["results"]["target"] = "forged"
    (tmp_path / UNRECORDED).write_text(json.dumps(doc))
    assert folder.pending() is None
    del doc["hmac"]
    (tmp_path / UNRECORDED).write_text(json.dumps(doc))
    assert folder.pending() is None
