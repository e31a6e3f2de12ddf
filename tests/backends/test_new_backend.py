"""A new backend is one new folder: a package with spec.py and lower.py, found through
EDGESHIP_BACKENDS_PATH, builds and is measured on the host with no other file touched."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import write_profile

SPEC = '''"""A second TorchScript backend under another name: the minimal backend."""
from edgeship.backends.spec import BackendSpec


class FrozenTorchscriptSpec(BackendSpec):
    """TorchScript, frozen, saved as ``.pt``; run by the device runner's torchscript runtime."""

    name = "frozen-torchscript"
    suffix = ".pt"
    runtime = "torchscript"
    capture_methods = ("trace", "script")
    precisions = ("fp32",)
    dynamic_shapes = None
'''
LOWER = '''"""How the frozen-torchscript backend lowers."""
from edgeship.backends.base import Artifact, Backend, LowerRequest
from edgeship.fsutil import atomic_output_named

from .spec import FrozenTorchscriptSpec


class FrozenTorchscriptBackend(FrozenTorchscriptSpec, Backend):
    def lower(self, request: LowerRequest) -> Artifact:
        import torch

        module = torch.jit.freeze(request.captured.program.eval())
        with atomic_output_named(request.dest) as tmp:
            torch.jit.save(module, str(tmp))
        return Artifact(request.dest, ["frozen by a backend from outside edgeship"], {"frozen": True})
'''


def new_backend(folder: Path) -> Path:
    package = folder / "frozen_torchscript"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""A backend kept outside edgeship."""\n')
    (package / "spec.py").write_text(SPEC)
    (package / "lower.py").write_text(LOWER)
    return folder


def test_a_backend_from_one_new_folder_builds_and_is_measured(tiny_project: Path, tmp_path: Path) -> None:
    plugins = new_backend(tmp_path / "plugins")
    profile = write_profile(tmp_path, '[[variants]]\nname = "frozen"\nbackend = "frozen-torchscript"\n')
    env = {**os.environ, "EDGESHIP_BACKENDS_PATH": str(plugins)}
    proc = subprocess.run([sys.executable, "-m", "edgeship", "build", "--target", str(profile), "--model",
                           str(tiny_project / "model.toml"), "--out", str(tmp_path / "out")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    eager, frozen = json.loads((tmp_path / "out" / "results.json").read_text())["variants"]
    assert eager["backend"] == "eager" and frozen["backend"] == "frozen-torchscript"
    assert (tmp_path / "out" / "frozen" / "model.pt").is_file() and frozen["size_bytes"] > 0
    assert frozen["lowering"]["notes"][-1] == "frozen by a backend from outside edgeship"
    assert frozen["latency"][0]["runtime"].startswith("torch ") and frozen["latency"][0]["p50_ms"] > 0
    assert frozen["accuracy"]["sqnr_db"] >= 60 and frozen["gates"]["passed"]

    unknown = subprocess.run([sys.executable, "-m", "edgeship", "build", "--target", str(profile), "--model",
                              str(tiny_project / "model.toml"), "--out", str(tmp_path / "out2")],
                             cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert unknown.returncode == 2 and "unknown backend" in unknown.stderr + unknown.stdout  # without the path


def test_a_bad_backends_path_is_refused_with_exit_2(tmp_path: Path) -> None:
    clash, twice = tmp_path / "clash", tmp_path / "twice"
    (clash / "onnx").mkdir(parents=True)
    (clash / "onnx" / "spec.py").write_text("")
    (twice / "again").mkdir(parents=True)
    (twice / "again" / "spec.py").write_text(
        'from edgeship.backends.spec import BackendSpec\n\n\nclass Again(BackendSpec):\n    name = "onnx"\n')
    cases = {str(tmp_path / "missing"): "is not a folder", str(clash): "has the name of the one in",
             str(twice): "could not be loaded: RuntimeError: backend 'onnx' declared twice"}
    for path, message in cases.items():
        proc = subprocess.run([sys.executable, "-m", "edgeship", "build", "--target", "host", "--out",
                               str(tmp_path / "out")], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "EDGESHIP_BACKENDS_PATH": path})
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()
