"""The stage cache: unchanged re-builds reuse everything, changes rebuild only what they touch."""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from edgeship.cache import Cache, cache_key, signed_listing
from edgeship.cli import main
from edgeship.devices.base import Job
from edgeship.devices.hashing import sha256_path
from edgeship.devices.local import LocalDevice
from edgeship.pipeline.output import MANIFEST
from edgeship.pipeline.stagecache import (
    Measurements,
    restore_artifact,
    store_artifact,
    vouch_results,
    vouched_previous,
    vouched_results,
)
from edgeship.profile.models import LatencySettings
from edgeship.results import Latency, ModelInfo, Results
from edgeship.store import ResultsStore, default_url
from tests.conftest import REPO, write_profile
from tests.models.tinynet import build
from tests.test_cache import forge

ORT = """
[[variants]]
name = "ort"
backend = "onnx"
"""
LITE = """
[[variants]]
name = "lite"
backend = "pytorch-mobile"
"""


def _build(capsys, profile: Path, spec: Path, out: Path, *extra: str) -> tuple[int, str, dict]:
    code = main(["build", "--target", str(profile), "--model", str(spec), "--out", str(out), *extra])
    _, err = capsys.readouterr()
    return code, err, json.loads((out / "results.json").read_text())


def test_stagecache_unchanged_rebuild_reuses_everything_without_torch(capsys, tiny_project, tmp_path) -> None:
    profile, spec, out = write_profile(tmp_path, ORT), tiny_project / "model.toml", tmp_path / "out"
    code, _, first = _build(capsys, profile, spec, out)
    assert code == 0 and first["build_key"]
    probe = ("import sys; from edgeship.cli import main; code = main(sys.argv[1:]); "
             "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', code)")
    proc = subprocess.run([sys.executable, "-c", probe, "build", "--target", str(profile), "--model", str(spec),
                           "--out", str(out)], capture_output=True, text=True, cwd=REPO)
    assert "unchanged since" in proc.stderr and proc.stdout.strip().endswith("NO-TORCH 0"), proc.stderr[-2000:]
    assert json.loads((out / "results.json").read_text()) == first


def test_stagecache_new_variant_lowers_only_itself_and_remeasures_only_itself(capsys, tiny_project, tmp_path) -> None:
    spec, out = tiny_project / "model.toml", tmp_path / "out"
    _build(capsys, write_profile(tmp_path, ORT), spec, out)
    code, err, second = _build(capsys, write_profile(tmp_path, ORT + LITE, name="more"), spec, out)
    rows = {v["name"]: v for v in second["variants"]}
    assert code == 0 and "from the stage cache" in err
    assert any("reused from the stage cache" in n for n in rows["ort"]["lowering"]["notes"])
    assert not any("stage cache" in n for n in rows["lite"]["lowering"]["notes"])
    assert rows["ort"]["lowering"]["reused"] and not rows["lite"]["lowering"]["reused"]
    report = (out / "report.md").read_text()  # the reused artifact's lowering time is the first build's, marked
    assert f"{rows['ort']['lowering']['seconds']:.1f} s (cached) |" in report
    assert f"{rows['lite']['lowering']['seconds']:.1f} s |" in report
    assert any("reused" in n for n in rows["ort"]["latency"][0]["notes"])
    assert not any("reused" in n for n in rows["lite"]["latency"][0]["notes"])


def test_stagecache_remeasure_measures_again(capsys, tiny_project, tmp_path) -> None:
    profile, spec, out = write_profile(tmp_path, ORT), tiny_project / "model.toml", tmp_path / "out"
    _, _, first = _build(capsys, profile, spec, out)
    _, err, again = _build(capsys, profile, spec, out, "--remeasure")
    assert "unchanged since" not in err
    assert again["variants"][1]["latency"][0]["measured_at"] >= first["variants"][1]["latency"][0]["measured_at"]
    assert not any("reused" in n for n in again["variants"][1]["latency"][0]["notes"])
    assert again["variants"][1]["sha256"] == first["variants"][1]["sha256"]


def test_stagecache_tampered_artifact_is_restored_from_the_cache(capsys, tiny_project, tmp_path) -> None:
    profile, spec, out = write_profile(tmp_path, ORT), tiny_project / "model.toml", tmp_path / "out"
    _, _, first = _build(capsys, profile, spec, out)
    (out / first["variants"][1]["file"]).write_bytes(b"not a model")
    code, err, again = _build(capsys, profile, spec, out)
    assert code == 0 and "unchanged since" not in err and "from the stage cache" in err
    assert again["variants"][1]["sha256"] == first["variants"][1]["sha256"]


def test_stagecache_new_weights_rebuild_everything(capsys, tiny_project, tmp_path) -> None:
    profile, spec, out = write_profile(tmp_path, ORT), tiny_project / "model.toml", tmp_path / "out"
    _, _, first = _build(capsys, profile, spec, out)
    model = build()
    with torch.no_grad():
        model.head.bias.add_(1.0)
    torch.save(model.state_dict(), tiny_project / "tiny.pt")
    _, err, again = _build(capsys, profile, spec, out)
    assert "from the stage cache" not in err and again["variants"][1]["sha256"] != first["variants"][1]["sha256"]
    assert again["build_key"] != first["build_key"]


def test_stagecache_clear_empties_the_cache(capsys, tiny_project, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EDGESHIP_CACHE_DIR", str(tmp_path / "cache"))
    _build(capsys, write_profile(tmp_path, ORT), tiny_project / "model.toml", tmp_path / "out")
    assert main(["cache", "info"]) == 0 and "entries" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0 and "cleared" in capsys.readouterr().out
    assert not (tmp_path / "cache").exists()


def _stored(tmp_path: Path) -> tuple[Cache, dict, Path]:
    cache, key, folder = Cache(tmp_path / "cache"), {"variant": "ort"}, tmp_path / "lowered"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(b"onnx" * 1000)
    (folder / "sensitivity.json").write_text("{}")
    store_artifact(cache, key, folder, {"file": "model.onnx", "sha256": sha256_path(folder / "model.onnx")})
    return cache, key, cache.entry_path("artifact", cache_key(key))


def test_stagecache_restore_copies_a_checked_entry_into_the_staging_folder(tmp_path: Path) -> None:
    cache, key, _ = _stored(tmp_path)
    record = restore_artifact(cache, key, tmp_path / "staged" / "ort")
    assert record is not None and sorted(p.name for p in (tmp_path / "staged" / "ort").iterdir()) == [
        "model.onnx", "sensitivity.json"]
    assert sha256_path(tmp_path / "staged" / "ort" / "model.onnx") == record["sha256"] and not cache.notices


@pytest.mark.parametrize("name", ["model.onnx", "sensitivity.json"])
def test_stagecache_truncated_entry_is_discarded_with_a_notice_when_lowered_json_still_agrees(
        tmp_path: Path, name: str) -> None:
    cache, key, entry = _stored(tmp_path)
    damaged = entry / "files" / name
    damaged.write_bytes(damaged.read_bytes()[:1])
    assert restore_artifact(cache, key, tmp_path / "staged" / "ort") is None
    assert not entry.exists() and not (tmp_path / "staged" / "ort").exists()
    assert cache.notices == [f"stage cache entry artifact/{entry.name} is damaged (files/{name}: sha256 differs "
                             "from the one stored with it); discarded, lowering again"]


def test_stagecache_entry_whose_artifact_disagrees_with_lowered_json_is_discarded(tmp_path: Path) -> None:
    cache, key, entry = _stored(tmp_path)
    record = json.loads((entry / "lowered.json").read_text())
    (entry / "files" / "model.onnx").write_bytes(b"other")
    # the signed sha256 list agrees with the damage (as if written so): lowered.json's sha256 still catches it
    listing = json.loads((entry / "key.json").read_text())
    listing["files"]["files/model.onnx"] = sha256_path(entry / "files" / "model.onnx")
    signed = signed_listing("artifact", entry.name, listing["key"], listing["files"], cache.signer)
    (entry / "key.json").write_text(json.dumps(signed))
    assert record["sha256"] != listing["files"]["files/model.onnx"]
    assert restore_artifact(cache, key, tmp_path / "staged" / "ort") is None
    assert "sha256 differs from the one in lowered.json" in cache.notices[0]


def test_stagecache_forged_artifact_entry_is_lowered_again_not_loaded(tmp_path: Path) -> None:
    cache, key, entry = _stored(tmp_path)
    (entry / "files" / "model.onnx").write_bytes(b"a model of someone else's")
    record = json.loads((entry / "lowered.json").read_text())
    record["sha256"] = sha256_path(entry / "files" / "model.onnx")
    forge(entry, "lowered.json", json.dumps(record))  # lowered.json and the sha256 list agree with the forgery
    assert restore_artifact(cache, key, tmp_path / "staged" / "ort") is None
    assert not (tmp_path / "staged" / "ort").exists() and not entry.exists()
    assert cache.notices == [f"stage cache entry artifact/{entry.name} is damaged (key.json does not verify with "
                             "this machine's key: changed since edgeship wrote it); discarded, lowering again"]


@pytest.mark.parametrize("command", ["clear", "info"])
def test_stagecache_cache_command_refuses_a_folder_of_user_files(capsys, tmp_path, monkeypatch, command) -> None:
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "cat.jpg").write_bytes(b"jpeg")
    monkeypatch.setenv("EDGESHIP_CACHE_DIR", str(folder))
    assert main(["cache", command]) == 2
    err = capsys.readouterr().err
    assert f"cache folder {folder}: not an edgeship cache" in err and "cat.jpg" in err
    assert (folder / "cat.jpg").read_bytes() == b"jpeg"


def test_stagecache_build_refuses_a_cache_folder_of_user_files(capsys, tiny_project, tmp_path, monkeypatch) -> None:
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "cat.jpg").write_bytes(b"jpeg")
    monkeypatch.setenv("EDGESHIP_CACHE_DIR", str(folder))
    code = main(["build", "--target", str(write_profile(tmp_path, ORT)), "--model", str(tiny_project / "model.toml"),
                 "--out", str(tmp_path / "out")])
    assert code == 2 and "not an edgeship cache" in capsys.readouterr().err
    assert [p.name for p in folder.iterdir()] == ["cat.jpg"] and not (tmp_path / "out" / "results.json").exists()


def test_stagecache_another_profile_takes_the_measurements_of_its_same_files_and_of_the_float_model(
        capsys, tiny_project, tmp_path) -> None:
    spec = tiny_project / "model.toml"
    _, _, first = _build(capsys, write_profile(tmp_path, ORT), spec, tmp_path / "one")
    code = main(["build", "--target", str(write_profile(tmp_path, ORT + LITE, name="more")), "--model", str(spec),
                 "--out", str(tmp_path / "two")])
    said = " ".join("".join(capsys.readouterr()).split())   # the progress lines, unwrapped
    second = json.loads((tmp_path / "two" / "results.json").read_text())
    before = {v["name"]: v["latency"][0] for v in first["variants"]}
    after = {v["name"]: v["latency"][0] for v in second["variants"]}
    assert code == 0 and "reused from the stage cache: 2 of 3 (eager on host, ort on host)" in said
    for name in ("eager", "ort"):   # the earlier build's measurement, as it was, and said so
        assert after[name]["measured_at"] == before[name]["measured_at"]
        assert after[name]["p50_ms"] == before[name]["p50_ms"] and after[name]["accuracy"] == before[name]["accuracy"]
        assert any(n.startswith("reused from the stage cache") for n in after[name]["notes"])
    assert not any("reused" in n for n in after["lite"]["notes"])
    report = (tmp_path / "two" / "report.md").read_text()   # its p50, load and memory cells carry the footnote
    footnote = re.search(r"(\d+)\. measured by an earlier build on this machine", report).group(1)
    assert report.count(f" [{footnote}] |") >= 2 * 3
    stored = ResultsStore(default_url()).rows(model="tiny", target="more")   # each target's rows whole
    assert {(r["variant"], r["measured_at"]) for r in stored} >= {(n, after[n]["measured_at"]) for n in after}
    assert "measured by an earlier build on this machine" not in (tmp_path / "one" / "report.md").read_text()
    _, _, third = _build(capsys, write_profile(tmp_path, ORT, name="again"), spec, tmp_path / "three", "--remeasure")
    assert all(not any("reused" in n for n in v["latency"][0]["notes"]) for v in third["variants"])
    assert third["variants"][1]["latency"][0]["measured_at"] > before["ort"]["measured_at"]


def _latency(**changes: object) -> Latency:
    lat = Latency(device="host", runtime="onnxruntime", warmup=1, iterations=5, threads=None, p50_ms=1.0,
                  measured_at="2026-12-07T10:00:00Z", inputs_sha256="in", reference_sha256="ref")
    return lat.model_copy(update=changes)


def _job(sha: str | None = "abc") -> Job:
    return Job(runtime="onnxruntime", artifact=Path("model.onnx"), sha256=sha, inputs=Path("in.npz"),
               input_names=["x"], batch=1, warmup=1, iterations=5, threads=None, timeout_s=60.0)


@pytest.mark.parametrize("change", [{"contended": True}, {"run_error": "it crashed"}, {"p50_ms": None},
                                    {"notes": ["not measured: the device dropped out"]}])
def test_stagecache_keeps_only_clean_measurements(tmp_path: Path, change: dict) -> None:
    kept = Measurements(Cache(tmp_path / "cache"), SimpleNamespace(common={}, model={}), LatencySettings())
    device = LocalDevice()
    kept.keep(device, _job(), _latency(**change))
    assert kept.get(device, _job(), "in", "ref") is None
    kept.keep(device, _job(), _latency())
    assert kept.get(device, _job(), "in", "ref").p50_ms == 1.0


def test_stagecache_forged_measurement_is_measured_again_and_an_honest_one_reused(tmp_path: Path) -> None:
    kept = Measurements(Cache(tmp_path / "cache"), SimpleNamespace(common={}, model={}), LatencySettings())
    device = LocalDevice()
    kept.keep(device, _job(), _latency())
    entry = next((tmp_path / "cache" / "measurement").iterdir())
    doc = json.loads((entry / "latency.json").read_text())
    doc.update(p50_ms=0.001, measured_at="2020-01-01T00:00:00Z")
    forge(entry, "latency.json", json.dumps(doc))
    assert kept.get(device, _job(), "in", "ref") is None
    assert len(kept.cache.notices) == 1 and kept.cache.notices[0].endswith("discarded, measuring again")
    kept.keep(device, _job(), _latency())
    assert kept.get(device, _job(), "in", "ref").p50_ms == 1.0


def test_stagecache_measurement_is_not_taken_for_another_cpu_file_or_inputs(tmp_path: Path, monkeypatch) -> None:
    kept = Measurements(Cache(tmp_path / "cache"), SimpleNamespace(common={}, model={}), LatencySettings())
    device = LocalDevice()
    kept.keep(device, _job(), _latency())
    assert kept.get(device, _job("other"), "in", "ref") is None
    assert kept.get(device, _job(), "other inputs", "ref") is None
    assert kept.get(device, _job(), "in", "other labels") is None
    assert kept.get(device, _job(None), "in", "ref") is None   # no sha256: nothing to know it by
    monkeypatch.setattr(device, "own_cpu", lambda: {"model": "another CPU", "arch": "x86_64", "flags": ["avx2"]})
    later = Measurements(kept.cache, kept.keys, LatencySettings())   # a build on that CPU, the same cache
    assert later.get(device, _job(), "in", "ref") is None


def test_stagecache_vouched_results_holds_only_for_the_bytes_this_machine_wrote(tmp_path: Path) -> None:
    cache, path = Cache(tmp_path / "cache"), tmp_path / "results.json"
    path.write_text('{"schema": 1}')
    assert not vouched_results(cache, path.read_bytes())
    vouch_results(cache, path.read_bytes())
    assert vouched_results(cache, b'{"schema": 1}') and not vouched_results(cache, b"")
    vouch_results(cache, b'{"schema": 2}')
    assert vouched_results(cache, b'{"schema": 2}') and not vouched_results(cache, b'{"schema": 1} ')


FORGED_AT = "2020-01-01T00:00:00Z"


def _forge_results(out: Path, manifest: bool) -> None:
    """Every latency row of the folder's results.json 0.001 ms, every SQNR 250 dB; with ``manifest``,
    the manifest's sha256 of results.json recomputed too."""
    doc = json.loads((out / "results.json").read_text())
    for row in doc["variants"]:
        for lat in row["latency"]:
            lat.update(p50_ms=0.001, measured_at=FORGED_AT)
        if row["accuracy"] and row["accuracy"].get("sqnr_db") is not None:
            row["accuracy"]["sqnr_db"] = 250.0
    (out / "results.json").write_text(json.dumps(doc, indent=1))
    if manifest:
        files = json.loads((out / MANIFEST).read_text())
        files["files"]["results.json"] = hashlib.sha256((out / "results.json").read_bytes()).hexdigest()
        (out / MANIFEST).write_text(json.dumps(files, indent=1))


@pytest.mark.parametrize("manifest", [False, True], ids=["measurements-reused", "unchanged-build"])
def test_stagecache_edited_results_json_is_not_reused_by_the_next_build(capsys, tiny_project, tmp_path,
                                                                        manifest: bool) -> None:
    profile, spec, out = write_profile(tmp_path, ORT), tiny_project / "model.toml", tmp_path / "out"
    _build(capsys, profile, spec, out)
    _forge_results(out, manifest)
    code, err, again = _build(capsys, profile, spec, out)
    said = " ".join(err.split())
    assert code == 0 and "unchanged since" not in said
    unwrapped = "".join(err.split())   # the terminal may wrap the long path anywhere
    assert "".join(f"{out / 'results.json'} is not a results.json this machine's edgeship wrote".split()) in unwrapped
    assert all(lat["measured_at"] != FORGED_AT and lat["p50_ms"] != 0.001
               for row in again["variants"] for lat in row["latency"])
    assert again["variants"][1]["accuracy"]["sqnr_db"] != 250.0


def test_stagecache_forged_measurement_entry_is_measured_again_by_the_next_build(capsys, tiny_project, tmp_path,
                                                                                 monkeypatch) -> None:
    """The issue's case: a measurement entry edited (SQNR 250 dB, p50 0.001 ms) and its sha256 list
    recomputed; the next build into a new folder measures again, says so, and a third reuses the honest one."""
    monkeypatch.setenv("EDGESHIP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("edgeship.pipeline.validate.CONTENDED_CPU_LOAD", float("inf"))  # every measurement kept
    profile, spec = write_profile(tmp_path, ORT), tiny_project / "model.toml"
    _build(capsys, profile, spec, tmp_path / "one")
    entries = sorted((tmp_path / "cache" / "measurement").iterdir())
    assert len(entries) == 2   # the eager row's and ort's
    for entry in entries:
        doc = json.loads((entry / "latency.json").read_text())
        doc.update(p50_ms=0.001, measured_at=FORGED_AT)
        if doc["accuracy"] and doc["accuracy"].get("sqnr_db") is not None:
            doc["accuracy"]["sqnr_db"] = 250.0
        forge(entry, "latency.json", json.dumps(doc))
    code, err, second = _build(capsys, profile, spec, tmp_path / "two")
    said = " ".join(err.split())
    assert code == 0 and said.count("is damaged (key.json does not verify") == 2, said
    assert said.count("discarded, measuring again") == 2 and "reused from the stage cache" not in said
    lats = [lat for row in second["variants"] for lat in row["latency"]]
    assert all(lat["measured_at"] != FORGED_AT and lat["p50_ms"] != 0.001 for lat in lats)
    assert not any("reused" in n for lat in lats for n in lat["notes"])
    assert second["variants"][1]["accuracy"]["sqnr_db"] != 250.0
    code, err, third = _build(capsys, profile, spec, tmp_path / "three")   # the honest entries: reused
    assert code == 0 and "reused from the stage cache: 2 of 2" in " ".join(err.split())
    assert [r["latency"][0]["p50_ms"] for r in third["variants"]] == [r["latency"][0]["p50_ms"]
                                                                      for r in second["variants"]]


def test_stagecache_vouched_previous_is_parsed_from_the_bytes_whose_record_was_found(tmp_path: Path) -> None:
    """results.json swapped between the parse (``previous``) and the check: what is reused is what was
    checked, never what was parsed before."""
    cache, path = Cache(tmp_path / "cache"), tmp_path / "results.json"
    honest = Results(target="honest", created="2026-01-01T00:00:00Z", toolchain={}, variants=[],
                     model=ModelInfo(name="m", entry="m:b", inputs=[], params=1))
    honest.write(path)
    vouch_results(cache, path.read_bytes())
    parsed_before = honest.model_copy(update={"target": "forged"})   # read while the file was the forged one
    said: list[str] = []
    assert vouched_previous(parsed_before, path, cache, said.append).target == "honest" and not said
    path.write_text(path.read_text() + " ")
    assert vouched_previous(parsed_before, path, cache, said.append) is None and len(said) == 1
