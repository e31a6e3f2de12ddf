"""A notebook user's build: a torchvision model and DataLoaders handed to edgeship.build in a fresh
process, for host, against the same model built from a model spec file by the command line (slow:
two whole host builds, each with its own stage cache)."""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]

NOTEBOOK = textwrap.dedent("""\
    import torch
    import torchvision
    from torch.utils.data import DataLoader, TensorDataset

    import edgeship
    from edgeship.errors import GateFailure

    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    images = torch.rand(96, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    labels = torch.randint(0, 10, (96,), generator=torch.Generator().manual_seed(1))
    try:
        results = edgeship.build(model, torch.rand(1, 3, 64, 64), target="host", out="object",
                                 calibration=DataLoader(TensorDataset(images[:32]), batch_size=8),
                                 evaluation=DataLoader(TensorDataset(images[32:], labels[32:]), batch_size=16))
    except GateFailure as failed:
        results = failed.results
    print(len(results.variants), "rows")
    """)
ENTRY = textwrap.dedent("""\
    import torchvision


    def build():
        return torchvision.models.resnet18(num_classes=10)
    """)
SPEC = textwrap.dedent("""\
    name = "ResNet"
    entry = "resnet:build"
    inputs = [{ name = "input", shape = [1, 3, 64, 64], dtype = "float32" }]
    [data]
    calibration = "calib.npz"
    evaluation = "eval.npz"
    """)
# OpenVINO names the IR's nodes from a per-process counter: its int8 IR takes one of two sha256s from
# run to run with the same input (seen in builds from the same spec file), so only its figures are compared.
NOT_REPRODUCIBLE = {"openvino-int8"}
# The lite interpreter's file keeps, beside each TorchScript code file, its debug_pkl: source ranges with the
# Python call stack the tracer saw, from the program that called edgeship (notebook.py here, edgeship's cli.py
# there) down to torchvision's lines; the serialization id is a hash of the records. Every other member (the
# bytecode, the code, the constants and the weights) must be the same.
CALLER_STACK = {"mobile-fp32"}


def program_members(path: Path) -> dict[str, str]:
    """sha256 of each member of a TorchScript zip but the records that carry the caller's stack."""
    with zipfile.ZipFile(path) as zf:
        return {n: hashlib.sha256(zf.read(n)).hexdigest() for n in zf.namelist()
                if not n.endswith((".debug_pkl", "/.data/serialization_id"))}


def run(command: list[str], cwd: Path, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "EDGESHIP_CACHE_DIR": str(cache)}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=3600)


def spec_project(folder: Path) -> Path:
    """The notebook's model and data as a model spec file sees them: an entry module and .npz files."""
    import torch

    folder.mkdir()
    (folder / "resnet.py").write_text(ENTRY)
    (folder / "model.toml").write_text(SPEC)
    images = torch.rand(96, 3, 64, 64, generator=torch.Generator().manual_seed(0)).numpy()
    labels = torch.randint(0, 10, (96,), generator=torch.Generator().manual_seed(1)).numpy()
    np.savez(folder / "calib.npz", x=images[:32])
    np.savez(folder / "eval.npz", x=images[32:], y=labels[32:])
    return folder / "model.toml"


@pytest.mark.slow
def test_notebook_build_of_a_torchvision_model_makes_the_artifacts_a_spec_file_makes(tmp_path: Path) -> None:
    (tmp_path / "notebook.py").write_text(NOTEBOOK)
    notebook = run([sys.executable, "notebook.py"], tmp_path, tmp_path / "cache-object")
    assert notebook.returncode == 0, notebook.stderr[-3000:]
    spec = spec_project(tmp_path / "spec")
    command = [sys.executable, "-m", "edgeship", "build", "--target", "host", "--model", str(spec), "--out", "spec-out"]
    cli = run(command, tmp_path, tmp_path / "cache-spec")
    assert cli.returncode in (0, 3), cli.stderr[-3000:]
    made = re.search(r"module and data for the build: ([\d.]+) MiB in .*?\(([\d.]+) s\)",
                     notebook.stderr.replace("\n", ""))
    assert made, notebook.stderr[-3000:]
    print(f"materialized: {made[1]} MiB in {made[2]} s")

    rows = [{r["name"]: r for r in json.loads((tmp_path / out / "results.json").read_text())["variants"]}
            for out in ("object", "spec-out")]
    assert list(rows[0]) == list(rows[1]) and len(rows[0]) == 6   # the eager row and host's five variants
    same = {name for name, row in rows[0].items() if row.get("sha256") and row["sha256"] == rows[1][name]["sha256"]}
    print("identical artifacts:", sorted(same), "differing:", sorted(set(rows[0]) - same - {"eager"}))
    assert set(rows[0]) - {"eager"} - NOT_REPRODUCIBLE - CALLER_STACK <= same
    for name in CALLER_STACK:
        members = [program_members(tmp_path / out / rows[0][name]["file"]) for out in ("object", "spec-out")]
        assert members[0] == members[1] and any(n.endswith("bytecode.pkl") for n in members[0]), name
    for name, row in rows[0].items():
        assert row["accuracy"] == rows[1][name]["accuracy"], name
        assert row["accuracy"]["top1"] is not None and row["accuracy"]["informative"], name

    again = run([sys.executable, "notebook.py"], tmp_path, tmp_path / "cache-object")   # another fresh process
    assert again.returncode == 0, again.stderr[-3000:]
    assert "the same as an earlier build's" in again.stderr.replace("\n", "")
    assert "unchanged since" in again.stderr and "lower " not in again.stderr
