"""edgeship as a user installs it: ``python -m build --wheel`` of this checkout, installed into fresh
venvs and run from empty folders, outside the repository.

- With only the onnx extra (its dependencies really installed, torch from this machine's disk): none of
  ExecuTorch, OpenVINO, NNCF or Core ML tools is there, an onnx-only profile builds without importing any
  of them (nor torchao), ``edgeship devices check`` lists the runtimes there are, and the host profile is
  refused with the pip line before any work.
- The wheel's package data is complete: every file of the package folder is in the wheel, and the wheel
  alone (its dependencies linked from this venv: installing every runtime again takes about four minutes)
  runs ``edgeship build --target host`` from an empty folder, the built-in profiles and the demo's weights
  and data coming from the wheel.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest

from tests import system

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
ABSENT = ("executorch", "openvino", "nncf", "coremltools")   # what the onnx extra must not bring
NOT_IMPORTED = (*ABSENT, "torchao")                          # what an onnx-only build must not import
ONNX_PROFILE = """\
description = "ONNX Runtime only: host.toml's onnx variants"
[gates]
min_sqnr_db = 60.0
max_top1_drop = 0.5

[[variants]]
name = "onnx-fp32"
backend = "onnx"
precision = "fp32"
options = { opset = 20, dynamic_batch = false }

[[variants]]
name = "onnx-int8"
backend = "onnx"
precision = "int8"
options = { opset = 20, dynamic_batch = false, activations = "uint8" }
quantization = { scheme = "static", method = "minmax", per_channel = true, keep_float = "auto" }
gates = { min_sqnr_db = 20.0, max_top1_drop = 1.0 }
"""
# Builds in-process, then prints the runtimes the build imported (its runners run in their own processes).
BUILD_AND_LIST_IMPORTS = textwrap.dedent("""\
    import json, sys
    from edgeship.cli import main
    code = main(sys.argv[1:])
    print(json.dumps({"code": code, "imported": sorted({m.split(".")[0] for m in sys.modules} & set(%r))}))
    """)


def checkout_files() -> list[str]:
    """The checkout's files as git lists them: tracked, and new ones not ignored."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout
    return sorted({name for name in listed.split("\0") if name})


def copy_checkout(dest: Path) -> None:
    """The checkout's files, links as links, without what earlier builds left (build/, *.egg-info)."""
    for name in checkout_files():
        source, target = REPO / name, dest / name
        if not os.path.lexists(source):
            continue  # deleted, not yet committed
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        elif source.is_file():
            shutil.copy2(source, target)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m build --wheel`` of a clean copy of the checkout (this venv's setuptools, no download)."""
    if importlib.util.find_spec("build") is None:
        pytest.skip(system.reason("python", "the build package is not installed (make setup installs the test extra)"))
    if not (REPO / ".git").exists():
        pytest.skip(system.reason("checkout", f"{REPO} is not a git checkout: its files cannot be listed"))
    source, dist = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("dist")
    copy_checkout(source)
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(source)],
                   capture_output=True, text=True, check=True, timeout=600)
    (found,) = dist.glob("edgeship-*.whl")
    return found


def user_env(cache: Path) -> dict[str, str]:
    """A user's environment: no PYTHONPATH into a checkout, a cache of its own."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return env | {"EDGESHIP_CACHE_DIR": str(cache)}


def make_venv(path: Path, *pip_args: str, linked: bool = False) -> tuple[Path, float]:
    """A new venv with ``pip install pip_args``; ``linked``: this venv's site-packages on its path (a .pth
    file) instead of installed dependencies. Returns its python and the seconds pip took."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=300)
    python = path / "bin" / "python"
    if linked:
        (site,) = path.glob("lib/python3*/site-packages")
        linked_paths = [p for p in sys.path if Path(p).name == "site-packages"]
        (site / "linked-test-venv.pth").write_text("".join(f"{p}\n" for p in linked_paths))
    start = time.monotonic()
    pip = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-compile", *pip_args],
                         capture_output=True, text=True, timeout=1800, env=user_env(path / "unused-cache"))
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    return python, time.monotonic() - start


def python_json(python: Path, code: str, *args: str, cwd: Path, env: dict[str, str]) -> dict:
    proc = subprocess.run([str(python), "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=1800)
    assert proc.returncode in (0, 2, 3), proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_wheel_ships_every_file_of_the_package(wheel: Path) -> None:
    listed = {n for n in zipfile.ZipFile(wheel).namelist() if not n.startswith("edgeship-")}
    package = {str(p.relative_to(REPO)) for name in checkout_files() if name.startswith("edgeship/")
               for p in ([REPO / name] if (REPO / name).is_file() else sorted((REPO / name).iterdir()))}
    assert package - listed == set(), "package files the wheel lacks (pyproject.toml's package-data)"
    assert {"edgeship/targets/host.toml", "edgeship/demo/eval.npz", "edgeship/demo/digitnet.pt"} <= listed


def test_wheel_with_only_the_onnx_extra_builds_onnx_and_refuses_host(wheel: Path, tmp_path: Path) -> None:
    python, seconds = make_venv(tmp_path / "venv", f"{wheel}[onnx]")
    print(f"pip install edgeship[onnx] (torch from this machine's disk): {seconds:.0f} s")
    env = user_env(tmp_path / "cache")
    names = python_json(python, "import json, importlib.metadata as m; "
                        "print(json.dumps({'d': sorted(d.metadata['Name'].lower() for d in m.distributions())}))",
                        cwd=tmp_path, env=env)["d"]
    assert not set(ABSENT) & set(names) and {"onnx", "onnxruntime", "torch", "edgeship"} <= set(names)

    work, profile = tmp_path / "work", tmp_path / "onnx-only.toml"
    work.mkdir()
    profile.write_text(ONNX_PROFILE)
    built = python_json(python, BUILD_AND_LIST_IMPORTS % (NOT_IMPORTED,), "build", "--target", str(profile),
                        cwd=work, env=env)
    assert built == {"code": 0, "imported": []}
    results = json.loads((work / "artifacts" / "onnx-only" / "digitnet" / "results.json").read_text())
    assert [v["name"] for v in results["variants"]] == ["eager", "onnx-fp32", "onnx-int8"]

    check = subprocess.run([str(python.parent / "edgeship"), "devices", "check", "host"], cwd=work, env=env,
                           capture_output=True, text=True, timeout=300)
    assert check.returncode == 0 and "onnxruntime     1." in check.stdout, check.stdout + check.stderr
    assert "executorch      not importable" in check.stdout  # the runner works with the runtimes there are

    empty = tmp_path / "empty"
    empty.mkdir()
    refused = subprocess.run([str(python.parent / "edgeship"), "build", "--target", "host"], cwd=empty,
                             env=user_env(tmp_path / "cache-host"), capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.rstrip().splitlines()[-1] == 'pip install "edgeship[executorch,openvino]"', refused.stderr
    assert "executorch-xnnpack-fp32: backend executorch" in refused.stderr and "openvino-int8" in refused.stderr
    assert list(empty.iterdir()) == [] and not (tmp_path / "cache-host").exists()


def test_wheel_builds_the_host_target_from_an_empty_folder(wheel: Path, tmp_path: Path) -> None:
    python, _ = make_venv(tmp_path / "venv", "--no-deps", "--ignore-installed", str(wheel), linked=True)
    (site,) = (tmp_path / "venv").glob("lib/python3*/site-packages")
    empty, env = tmp_path / "empty", user_env(tmp_path / "cache")
    empty.mkdir()
    where = python_json(python, "import json, edgeship; print(json.dumps({'f': edgeship.__file__}))",
                        cwd=empty, env=env)["f"]
    assert Path(where).parent == site / "edgeship"  # the wheel's, not the checkout's editable install
    proc = subprocess.run([str(python.parent / "edgeship"), "build", "--target", "host"], cwd=empty, env=env,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads((empty / "artifacts" / "host" / "digitnet" / "results.json").read_text())
    assert results["model"]["name"] == "digitnet" and results["model"]["weights_sha256"]
    assert [v["name"] for v in results["variants"]] == ["eager", "mobile-fp32", "executorch-xnnpack-fp32",
                                                        "onnx-fp32", "onnx-int8", "openvino-int8"]
