"""Whole builds whose accuracy could be stale, wrong or vacuous, and devices that measured nothing:
each is refused (exit 2), failed (exit 3) or measured again, never reported as a pass.

Each test is one or two real builds of the tiny model with one ONNX variant (a few seconds each).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from edgeship.cli import main
from tests.conftest import REPO, write_profile

ONNX = """
[[variants]]
name = "ort"
backend = "onnx"
"""
DEGENERATE = '''\
import torch
from torch import nn


class ZeroHead(nn.Module):
    """torchvision's VisionTransformer zero-initialises its head: random weights give all-zero logits."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Linear(8, 4)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, x):
        return self.head(torch.relu(self.body(x)).mean((2, 3)))


class NanNet(nn.Module):
    """log of an input in [0, 1) shifted below zero for about half the samples: NaN outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(3, 4)

    def forward(self, x):
        return self.head(torch.log(x.mean((2, 3)) - 0.5))
'''


def build(capsys, profile: Path, spec: Path, out: Path, *extra: str) -> tuple[int, str, dict | None]:
    code = main(["build", "--target", str(profile), "--model", str(spec), "--out", str(out), *extra])
    out_text, err = capsys.readouterr()
    err = out_text + err  # the table, then the progress and the message
    path = out / "results.json"
    return code, err, json.loads(path.read_text(), parse_constant=_refuse) if path.exists() else None


def _refuse(token: str) -> None:
    raise AssertionError(f"results.json holds {token}, which is not JSON")


def rows(results: dict) -> dict[str, dict]:
    return {v["name"]: v for v in results["variants"]}


def entry(project: Path, name: str, weights: bool = False) -> Path:
    """The project's spec with another entry in degenerate.py, and no weights file."""
    (project / "degenerate.py").write_text(DEGENERATE)
    spec = project / "model.toml"
    text = spec.read_text().replace("tinynet:build", name)
    spec.write_text(text if weights else text.replace('weights = "tiny.pt"\n', ""))
    return spec


def top1_of_tiny(project: Path, samples: int = 24) -> float:
    """The float tiny model's top-1 on the evaluation samples a build draws (seeded), computed here."""
    import torch

    from edgeship.calibration.dataset import sample_indices
    from tests.models.tinynet import build as tiny

    data = np.load(project / "eval.npz")
    idx = sample_indices(len(data["y"]), samples, 0)
    with torch.no_grad():
        logits = tiny().eval()(torch.from_numpy(data["x"][idx])).numpy()
    return float(np.mean(logits.argmax(1) == data["y"][idx]))


def test_build_with_new_labels_measures_again_instead_of_reusing_stale_accuracy(capsys, tiny_project, tmp_path) -> None:
    profile, spec, out = write_profile(tmp_path, ONNX), tiny_project / "model.toml", tmp_path / "out"
    code, _, first = build(capsys, profile, spec, out)
    before = top1_of_tiny(tiny_project)
    assert code == 0 and rows(first)["eager"]["accuracy"]["top1"] == pytest.approx(before)
    data = dict(np.load(tiny_project / "eval.npz"))
    data["y"] = (data["y"] + 1) % 4  # same inputs, other labels
    np.savez(tiny_project / "eval.npz", **data)
    after = top1_of_tiny(tiny_project)
    code, err, results = build(capsys, profile, spec, out)
    assert code == 0 and "measuring 2 float outputs or labels changed" in " ".join(err.split())
    eager, ort = rows(results)["eager"], rows(results)["ort"]
    assert after != before and eager["accuracy"]["top1"] == pytest.approx(after) == ort["accuracy"]["top1"]
    assert ort["accuracy"]["top1_drop"] == 0.0
    assert not any("reused" in n for v in (eager, ort) for n in v["latency"][0]["notes"])


def test_build_labels_outside_the_models_classes_exit_2_naming_the_file(capsys, tiny_project, tmp_path) -> None:
    data = dict(np.load(tiny_project / "eval.npz"))
    data["y"][:3] = [99, -1, 4]
    np.savez(tiny_project / "eval.npz", **data)
    code, err, results = build(capsys, write_profile(tmp_path, ONNX), tiny_project / "model.toml", tmp_path / "out")
    assert code == 2 and results is None and "Traceback" not in err
    assert f"{tiny_project / 'eval.npz'}" in err and "labels (y) must be class indices in [0, 4)" in err
    assert "-1, 4, 99" in err


@pytest.mark.parametrize("role, value", [("eval", np.nan), ("calib", np.inf)])
def test_build_non_finite_data_exits_2_naming_file_key_and_count(capsys, tiny_project, tmp_path, role, value) -> None:
    data = dict(np.load(tiny_project / f"{role}.npz"))
    data["x"][1, 0, :2, 0] = value
    np.savez(tiny_project / f"{role}.npz", **data)
    int8 = ONNX.replace('"ort"', '"ort8"') + 'precision = "int8"\nquantization = { scheme = "static" }\n'
    code, err, _ = build(capsys, write_profile(tmp_path, ONNX + int8), tiny_project / "model.toml", tmp_path / "out")
    assert code == 2 and "Traceback" not in err
    assert f"{tiny_project / f'{role}.npz'}: array 'x' holds 2 non-finite value(s)" in " ".join(err.split())


def test_build_float_model_with_nan_outputs_fails_and_writes_strict_json(capsys, tiny_project, tmp_path) -> None:
    spec = entry(tiny_project, "degenerate:NanNet")
    code, err, results = build(capsys, write_profile(tmp_path, ONNX), spec, tmp_path / "out")
    assert code == 3 and "Traceback" not in err  # parse_constant refused NaN / Infinity in results.json
    eager, ort = rows(results)["eager"], rows(results)["ort"]
    assert not eager["gates"]["passed"] and "the float model's outputs contain" in eager["gates"]["failures"][0]
    assert not ort["gates"]["passed"] and ort["accuracy"]["sqnr_db"] is None
    assert ort["accuracy"]["informative"] is False and "non-finite" in ort["accuracy"]["uninformative_reason"]


def test_build_zero_output_reference_is_not_informative_and_fails(capsys, tiny_project, tmp_path) -> None:
    spec = entry(tiny_project, "degenerate:ZeroHead")
    out = tmp_path / "out"
    code, err, results = build(capsys, write_profile(tmp_path, ONNX), spec, out)
    ort = rows(results)["ort"]
    assert code == 3 and "1 variant(s) failed validation: ort" in err
    assert ort["accuracy"]["informative"] is False
    assert ort["accuracy"]["uninformative_reason"] == "the float model's outputs are all zero"
    assert ort["gates"]["failures"] == ["accuracy not informative: the float model's outputs are all zero "
                                        "(accuracy gates not checked)"]
    assert any(n.startswith("accuracy not informative") for n in ort["notes"])
    report = (out / "report.md").read_text()
    line = next(ln for ln in report.splitlines() if ln.startswith("| ort |"))
    assert "not informative" in line and "exact" not in line and "100.00%" not in line
    table = next(ln for ln in err.splitlines() if ln.startswith("│ ort "))
    assert "not informative" in table and "exact" not in table and "%" not in table


def build_in_process(profile: Path, spec: Path, out: Path, cache: Path) -> dict:
    """``edgeship build`` in a fresh interpreter with its own stage cache (nothing reused)."""
    env = {**os.environ, "EDGESHIP_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "edgeship", "build", "--target", str(profile), "--model", str(spec),
                           "--out", str(out), "--quiet"], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads((out / "results.json").read_text())


def test_build_random_init_model_is_the_same_in_every_process(capsys, tiny_project, tmp_path, monkeypatch) -> None:
    # TinyNet() has no weights file and no seed of its own: edgeship seeds its construction. A module
    # name no other test imports, so this process's build does not reuse another folder's module.
    (tiny_project / "seedless.py").write_text((tiny_project / "tinynet.py").read_text())
    spec = entry(tiny_project, "seedless:TinyNet")
    profile = write_profile(tmp_path, ONNX)
    monkeypatch.setenv("EDGESHIP_CACHE_DIR", str(tmp_path / "cache-a"))
    first = build(capsys, profile, spec, tmp_path / "a")[2]
    second = build_in_process(profile, spec, tmp_path / "b", tmp_path / "cache-b")
    for results in (first, second):  # the eager runner built the module again, in a process of its own
        eager = rows(results)["eager"]["accuracy"]
        assert results["model"]["seed"] == 0 and eager["sqnr_db"] is None and eager["max_abs_err"] == 0.0
        assert rows(results)["eager"]["gates"]["passed"]
    assert rows(second)["ort"]["sha256"] == rows(first)["ort"]["sha256"]  # lowered afresh: the same bytes
    assert rows(second)["ort"]["accuracy"] == rows(first)["ort"]["accuracy"]


def test_build_devices_that_measured_nothing_fail_the_build(capsys, tiny_project, tmp_path) -> None:
    devices = tmp_path / "devices.toml"
    devices.write_text(textwrap.dedent("""\
        [devices.dead-ssh]
        transport = "ssh"
        host = "127.0.0.1"
        port = 9
        user = "nobody"
        retries = 0
        connect_timeout_s = 2

        [devices.no-adb]
        transport = "adb"
        serial = "NOPE123"
        """))
    code, err, results = build(capsys, write_profile(tmp_path, ONNX), tiny_project / "model.toml", tmp_path / "out",
                               "--devices", str(devices), "--device", "host", "--device", "dead-ssh",
                               "--device", "no-adb")
    printed = " ".join(err.split())
    assert code == 3
    assert "requested device dead-ssh measured nothing: ssh to nobody@127.0.0.1:9" in printed
    assert "requested device no-adb measured nothing: it can run none of this build's variants" in printed
    assert [n.split(":")[0] for n in results["notes"]] == ["requested device dead-ssh measured nothing",
                                                           "requested device no-adb measured nothing"]
    rows = {v["name"]: v for v in results["variants"]}
    assert rows["eager"]["gates"]["passed"]  # the float model runs only on the host, by design
    for row in (v for name, v in rows.items() if name != "eager"):  # measured on the host, lost on dead-ssh
        assert [f.split(":")[0] for f in row["gates"]["failures"]] == ["not measured on dead-ssh"], row["gates"]
        assert f"variant(s) failed validation: {row['name']}" in printed


def test_model_key_changes_when_the_labels_file_reorders_the_classes(tiny_project) -> None:
    from edgeship.pipeline.stagecache import model_key
    from edgeship.spec import load_spec

    (tiny_project / "labels.txt").write_text("cat\ndog\nemu\nfox\n")
    spec = tiny_project / "model.toml"
    spec.write_text(spec.read_text().replace('weights = "tiny.pt"\n', 'weights = "tiny.pt"\nlabels = "labels.txt"\n'))
    before = model_key(load_spec(spec))
    (tiny_project / "labels.txt").write_text("fox\nemu\ndog\ncat\n")  # an image folder's class indices follow it
    assert model_key(load_spec(spec)) != before
