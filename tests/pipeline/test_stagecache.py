"""The stage cache: unchanged re-builds reuse everything, changes rebuild only what they touch."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from edgeship.cli import main
from tests.conftest import REPO, write_profile
from tests.models.tinynet import build

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
