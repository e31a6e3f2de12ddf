"""The x86 bundle: the tiny model's OpenVINO IRs (fp32, int8, and bf16 where this CPU computes it)
and ONNX model, with Python programs for OpenVINO and ONNX Runtime and a C++ one for OpenVINO.

The commands RUNNING.md gives are run as written, from the extracted bundle, with this venv's
python3 first on PATH: the Python programs on the bundle's sample, then CMake and the system g++
against the openvino wheel's C++ package (once for the module), then the compiled program. Their
outputs match the float model, each other and the IR's recorded inference precision; the bundle
verifies and stops verifying when a file of an IR changes."""
from __future__ import annotations

import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from edgeship import api
from edgeship.bundle.archive import extract_bundle
from edgeship.bundle.x86 import x86_app
from edgeship.cli import main
from edgeship.errors import BundleError
from edgeship.metrics import sqnr_db
from tests import system
from tests.conftest import make_tiny_project, write_profile

OPENVINO_VARIANTS = """
[[variants]]
name = "openvino-fp32"
backend = "openvino"
precision = "fp32"

[[variants]]
name = "openvino-int8"
backend = "openvino"
precision = "int8"
gates = { min_sqnr_db = 10.0 }

[[variants]]
name = "onnx-fp32"
backend = "onnx"
precision = "fp32"
options = { dynamic_batch = false }
"""
BF16_VARIANT = """
[[variants]]
name = "openvino-bf16"
backend = "openvino"
precision = "bf16"
gates = { min_sqnr_db = 25.0 }
"""
BUNDLE = """
[bundle]
platforms = ["x86"]
"""
IR_FILES = ("model.bin", "model.xml")
PROGRAMS = ["cpp/CMakeLists.txt", "cpp/edgeship_common.hpp", "cpp/main.cpp", "python/run_onnxruntime.py",
            "python/run_openvino.py"]
SAMPLE = "samples/image.npy"
RUNS = 100  # the programs' default, which RUNNING.md's commands keep
# The tiny model computed in f32 agrees with eager to ~130 dB; in bf16, what the CPU plugin computes an
# f32 IR in when not told otherwise on CPUs with AVX512-BF16 or AMX, to ~68 dB on this sample.
F32_SQNR_DB = 100.0


def openvino_missing() -> str | None:
    from edgeship.backends.registry import BACKENDS

    return BACKENDS["openvino"].available()


def bf16_here() -> bool:
    """Whether this CPU computes bf16 (a bf16 variant is not measured here otherwise)."""
    from edgeship.backends.registry import BACKENDS

    backend = BACKENDS["openvino"]
    return backend.unavailable_here(backend.parse_options({}), "bf16") is None


def npy(array: np.ndarray, **kwargs) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, **kwargs)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def x86_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model built for openvino (fp32, int8, bf16 when this CPU has it) and onnx with
    ``[bundle] platforms = ["x86"]``: the build folder."""
    if openvino_missing():
        pytest.skip(system.reason("python", str(openvino_missing())))
    root = tmp_path_factory.mktemp("x86")
    project = make_tiny_project(root / "tiny")
    variants = OPENVINO_VARIANTS + (BF16_VARIANT if bf16_here() else "") + BUNDLE
    profile = write_profile(root, variants, name="x86test")
    out = root / "out"
    assert main(["build", "--target", str(profile), "--model", str(project / "model.toml"), "--out", str(out),
                 "--device", "host", "--quiet"]) == 0
    return out


@pytest.fixture(scope="module")
def irs(x86_build: Path) -> list[str]:
    """The OpenVINO variants in the bundle."""
    return ["openvino-fp32", "openvino-int8"] + (["openvino-bf16"] if bf16_here() else [])


@pytest.fixture(scope="module")
def bundle_dir(x86_build: Path) -> Path:
    """The bundle, checked and extracted."""
    folder = x86_build.parent / "bundle"
    extract_bundle(x86_build / "tiny-x86.zip", folder)
    return folder


def guide_commands(folder: Path) -> list[str]:
    """The shell commands of RUNNING.md's ```sh blocks, in order."""
    blocks = re.findall(r"```sh\n(.*?)```", (folder / "RUNNING.md").read_text(), re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def shell(command: str, folder: Path) -> subprocess.CompletedProcess:
    """One command as a user types it in the bundle's folder, this venv's python3 first on PATH."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(["bash", "-c", command], cwd=folder, env=env, capture_output=True, text=True, timeout=600)


def run_all(commands: list[str], folder: Path) -> None:
    for command in commands:
        done = shell(command, folder)
        assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else command)


@pytest.fixture(scope="module")
def python_runs(bundle_dir: Path) -> dict[str, Path]:
    """RUNNING.md's Python commands run as written: each variant's --out folder."""
    commands = [c for c in guide_commands(bundle_dir) if c.startswith("python3 python/")]
    run_all(commands, bundle_dir)
    return {name: bundle_dir / "out" / "python" / name
            for name in (re.search(r"--out out/python/(\S+)", c).group(1) for c in commands)}


@pytest.fixture(scope="module")
def program(bundle_dir: Path) -> Path:
    """RUNNING.md's cmake commands run as written (CMake, g++, the openvino wheel's C++ package): the program."""
    if system.toolchain():
        pytest.skip(system.toolchain())
    began = time.perf_counter()
    run_all([c for c in guide_commands(bundle_dir) if c.startswith("cmake ")], bundle_dir)
    print(f"\ncpp/ configured and built in {time.perf_counter() - began:.1f} s")
    return bundle_dir / "build" / "edgeship_openvino"


@pytest.fixture(scope="module")
def cpp_runs(program: Path, bundle_dir: Path) -> dict[str, Path]:
    """RUNNING.md's C++ commands run as written: each variant's --out folder."""
    commands = [c for c in guide_commands(bundle_dir) if c.startswith("./build/edgeship_openvino ")]
    run_all(commands, bundle_dir)
    return {name: bundle_dir / "out" / "cpp" / name
            for name in (re.search(r"--out out/cpp/(\S+)", c).group(1) for c in commands)}


@pytest.fixture(scope="module")
def eager(bundle_dir: Path) -> np.ndarray:
    """The float model's output on the bundle's sample."""
    import torch

    from edgeship.model import load_model
    from edgeship.spec import load_spec

    with torch.inference_mode():
        model = load_model(load_spec(bundle_dir.parent / "tiny" / "model.toml")).module
        return model(torch.from_numpy(np.load(bundle_dir / SAMPLE))).numpy()


def recorded_precision(xml: Path) -> str:
    import openvino as ov

    return ov.Core().read_model(str(xml)).get_rt_info(["edgeship", "inference_precision"]).astype(str)


def test_x86_app_ships_the_programs_for_the_backends_it_holds() -> None:
    meta = {"model": "tiny", "inputs": [{"name": "image", "shape": [1, 3, 16, 16], "dtype": "float32"}],
            "outputs": [{"name": "logits", "shape": [1, 4], "meaning": None}], "labels": None}
    onnx = [{"variant": "onnx-fp32", "backend": "onnx", "precision": "fp32", "path": "models/onnx-fp32/model.onnx",
             "runtime": {"graph_optimization": "basic"}}]
    ir = [{"variant": "ov", "backend": "openvino", "precision": "fp32", "path": "models/ov/model.openvino",
           "runtime": {"inference_precision": "f32", "written_by": "openvino 2026.4.1"}}]
    only_onnx = x86_app(meta, onnx, {"onnxruntime": "1.32.0"})
    assert sorted(only_onnx) == ["RUNNING.md", "python/run_onnxruntime.py"]
    guide = only_onnx["RUNNING.md"].decode()
    assert ("python3 python/run_onnxruntime.py models/onnx-fp32/model.onnx image.npy --graph-optimization basic "
            "--out out/python/onnx-fp32") in guide
    assert "cmake" not in guide and "INFERENCE_PRECISION_HINT" not in guide
    both = x86_app(meta, ir + onnx, {"onnxruntime": "1.32.0"})
    assert sorted(both) == ["RUNNING.md", *PROGRAMS]
    guide = both["RUNNING.md"].decode()
    assert ('cmake -S cpp -B build -DOpenVINO_DIR=$(python3 -c "import openvino, os; '
            "print(os.path.join(os.path.dirname(openvino.__file__), 'cmake'))\")") in guide
    assert "./build/edgeship_openvino models/ov/model.openvino/model.xml image.npy --out out/cpp/ov" in guide
    assert "INFERENCE_PRECISION_HINT" in guide and "the build used openvino 2026.4.1" in guide
    cmake = Path(both["cpp/CMakeLists.txt"]).read_text()
    assert "find_package(OpenVINO REQUIRED COMPONENTS Runtime)" in cmake and "openvino::runtime" in cmake


def test_x86_bundle_holds_each_ir_folder_whole_the_onnx_the_programs_and_verifies(
        capsys, x86_build: Path, irs: list[str]) -> None:
    bundle = x86_build / "tiny-x86.zip"
    with zipfile.ZipFile(bundle) as zf:
        names = sorted(zf.namelist())
        for variant in irs:  # exactly the files the build validated, nothing else from the variant's folder
            folder = x86_build / variant / "model.openvino"
            assert sorted(p.name for p in folder.iterdir()) == list(IR_FILES)
            for name in IR_FILES:
                assert zf.read(f"models/{variant}/model.openvino/{name}") == (folder / name).read_bytes()
        readme = zf.read("README.md").decode()
    models = [f"models/{v}/model.openvino/{n}" for v in irs for n in IR_FILES] + ["models/onnx-fp32/model.onnx"]
    assert names == sorted([*models, *PROGRAMS, "README.md", "RUNNING.md", "manifest.json", "model.json", SAMPLE])
    assert "RUNNING.md" in readme and "INFERENCE_PRECISION_HINT" in readme and "Jetson" not in readme
    assert api.verify_bundle(bundle).platform == "x86"
    assert main(["bundle", "verify", str(bundle)]) == 0
    assert f"ok: {bundle}: x86 bundle, {len(names) - 1} files" in capsys.readouterr().out


@pytest.mark.parametrize("name", IR_FILES)
def test_x86_bundle_verify_exits_2_when_a_file_of_an_ir_changes(capsys, name: str, x86_build: Path,
                                                                tmp_path: Path) -> None:
    changed = f"models/openvino-fp32/model.openvino/{name}"
    tampered = tmp_path / "tiny-x86.zip"
    with zipfile.ZipFile(x86_build / "tiny-x86.zip") as zin, zipfile.ZipFile(tampered, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            zout.writestr(info, data[:-2] + bytes([data[-2] ^ 1]) + data[-1:] if info.filename == changed else data)
    assert main(["bundle", "verify", str(tampered)]) == 2
    assert f"{changed}: differs from manifest.json" in capsys.readouterr().err


def test_bundle_refuses_an_ir_changed_since_the_build(x86_build: Path, tmp_path: Path) -> None:
    copy = tmp_path / "out"
    shutil.copytree(x86_build, copy)
    weights = copy / "openvino-int8" / "model.openvino" / "model.bin"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    root = x86_build.parent
    with pytest.raises(BundleError, match="model.openvino: changed since the build validated it"):
        api.bundle(str(root / "x86test.toml"), str(root / "tiny" / "model.toml"), out=copy)


def test_x86_model_json_says_what_runs_each_ir_and_in_which_precision(x86_build: Path, bundle_dir: Path,
                                                                      irs: list[str]) -> None:
    meta = json.loads((bundle_dir / "model.json").read_text())
    results = json.loads((x86_build / "results.json").read_text())
    rows = {r["name"]: r for r in results["variants"]}
    artifacts = {a["variant"]: a for a in meta["artifacts"]}
    assert sorted(artifacts) == sorted([*irs, "onnx-fp32"])
    for variant in irs:
        runtime = artifacts[variant]["runtime"]
        recorded = recorded_precision(bundle_dir / artifacts[variant]["path"] / "model.xml")
        assert artifacts[variant]["path"] == f"models/{variant}/model.openvino"
        assert runtime["inference_precision"] == recorded == rows[variant]["lowering"]["details"]["inference_precision"]
        assert recorded == ("bf16" if variant.endswith("bf16") else "f32")
        assert f"INFERENCE_PRECISION_HINT {recorded}" in runtime["needs"]
        assert runtime["written_by"] == f"openvino {rows[variant]['lowering']['details']['openvino'].split('-')[0]}"
    assert artifacts["onnx-fp32"]["path"] == "models/onnx-fp32/model.onnx"
    assert artifacts["onnx-fp32"]["runtime"]["graph_optimization"] == "all"


def test_x86_bundle_sample_is_the_first_evaluation_sample(x86_build: Path, bundle_dir: Path) -> None:
    from edgeship.calibration.dataset import sample_indices

    with np.load(x86_build.parent / "tiny" / "eval.npz") as data:
        first = data["x"][sample_indices(32, 24, 0)][:1]
    sample = np.load(bundle_dir / SAMPLE)
    assert sample.dtype.str == "<f4" and np.array_equal(sample, first)


def test_python_programs_outputs_match_the_float_model(python_runs: dict[str, Path], irs: list[str],
                                                       eager: np.ndarray) -> None:
    assert sorted(python_runs) == sorted([*irs, "onnx-fp32"])
    for variant, out in python_runs.items():
        output = np.load(out / "outputs" / "out0.npy")
        assert output.dtype == np.float32 and output.shape == eager.shape == (1, 4)
        assert output.argmax() == eager.argmax(), variant
        vs_eager = sqnr_db(eager, output)
        print(f"\n{variant}: SQNR vs eager {vs_eager if vs_eager is not None else 'inf'} dB")
        if variant.endswith("fp32"):
            assert vs_eager is None or vs_eager >= F32_SQNR_DB, variant


def test_run_openvino_compiles_each_ir_in_its_recorded_precision(python_runs: dict[str, Path], bundle_dir: Path,
                                                                 irs: list[str]) -> None:
    import openvino as ov

    for variant in irs:
        doc = json.loads((python_runs[variant] / "timings.json").read_text())
        recorded = recorded_precision(bundle_dir / "models" / variant / "model.openvino" / "model.xml")
        assert doc["recorded_precision"] == doc["inference_precision"] == recorded, variant
        assert doc["runtime"] == f"openvino {ov.__version__.split('-')[0]} CPU" and doc["outputs"] == ["output"]
        timings = doc["timings_ms"]
        assert len(timings) == doc["runs"] == RUNS and all(math.isfinite(t) and t > 0 for t in timings)
        assert doc["p50_ms"] == pytest.approx(float(np.median(timings)))


def test_edgeship_openvino_outputs_match_the_python_api(cpp_runs: dict[str, Path], python_runs: dict[str, Path],
                                                        irs: list[str], eager: np.ndarray) -> None:
    assert sorted(cpp_runs) == sorted(irs)
    for variant in irs:
        cpp = np.load(cpp_runs[variant] / "outputs" / "out0.npy")
        python = np.load(python_runs[variant] / "outputs" / "out0.npy")
        assert cpp.dtype == python.dtype == np.float32 and cpp.shape == python.shape == eager.shape
        vs_python, vs_eager = sqnr_db(python, cpp), sqnr_db(eager, cpp)
        print(f"\n{variant}: C++ vs Python {vs_python if vs_python is not None else 'inf'} dB, vs eager "
              f"{vs_eager if vs_eager is not None else 'inf'} dB")
        assert cpp.argmax() == python.argmax() == eager.argmax(), variant
        assert vs_python is None or vs_python >= F32_SQNR_DB, variant  # one runtime, one precision
        if variant.endswith("fp32"):
            assert vs_eager is None or vs_eager >= F32_SQNR_DB


def test_edgeship_openvino_writes_its_precision_and_finite_timings(cpp_runs: dict[str, Path], python_runs,
                                                                   irs: list[str]) -> None:
    for variant in irs:
        doc = json.loads((cpp_runs[variant] / "timings.json").read_text())
        python = json.loads((python_runs[variant] / "timings.json").read_text())
        assert (doc["runtime"], doc["inference_precision"], doc["recorded_precision"], doc["outputs"]) == (
            python["runtime"], python["inference_precision"], python["recorded_precision"], python["outputs"])
        assert doc["performance_hint"] == "LATENCY" and doc["threads"] >= 1
        timings = doc["timings_ms"]
        assert len(timings) == doc["runs"] == RUNS and all(math.isfinite(t) and t > 0 for t in timings)
        assert doc["p50_ms"] == pytest.approx(float(np.median(timings)), abs=1e-5)
        print(f"\n{variant}: p50 {doc['p50_ms']:.3f} ms in C++, {python['p50_ms']:.3f} ms in Python")


@pytest.mark.skipif(not bf16_here(),
                    reason=system.reason("cpu", "this CPU has no bf16 instructions (avx512_bf16, amx_bf16)"))
@pytest.mark.parametrize("runner", ["python", "cpp"])
def test_programs_take_the_precision_from_the_irs_runtime_info(runner: str, bundle_dir: Path,
                                                               python_runs: dict[str, Path], eager: np.ndarray,
                                                               request: pytest.FixtureRequest) -> None:
    """The fp32 IR relabelled bf16 in its rt_info runs in bf16, as the bf16 variant (the same graph and
    weights) does: the programs take the precision from the record, not a default of their own."""
    source = bundle_dir / "models" / "openvino-fp32" / "model.openvino"
    relabelled = bundle_dir / "relabelled" / runner / "model.openvino"
    shutil.copytree(source, relabelled, dirs_exist_ok=True)
    xml = (source / "model.xml").read_text()
    assert xml.count('<inference_precision value="f32" />') == 1
    (relabelled / "model.xml").write_text(xml.replace('<inference_precision value="f32" />',
                                                      '<inference_precision value="bf16" />'))
    command = ("python3 python/run_openvino.py" if runner == "python"
               else str(request.getfixturevalue("program"))) + f" {relabelled}/model.xml {SAMPLE} --runs 1 " \
                                                                f"--warmup 0 --out out/relabelled/{runner}"
    done = shell(command, bundle_dir)
    assert done.returncode == 0, done.stderr
    out = bundle_dir / "out" / "relabelled" / runner
    assert json.loads((out / "timings.json").read_text())["inference_precision"] == "bf16"
    relabelled_out = np.load(out / "outputs" / "out0.npy")
    assert np.array_equal(relabelled_out, np.load(python_runs["openvino-bf16"] / "outputs" / "out0.npy"))
    assert not np.array_equal(relabelled_out, np.load(python_runs["openvino-fp32"] / "outputs" / "out0.npy"))
    assert sqnr_db(eager, relabelled_out) < F32_SQNR_DB


REFUSED = {
    "shape": (npy(np.zeros((1, 3, 16, 17), np.float32)), "shape [1, 3, 16, 17]", "shape [1,3,16,17]"),
    "dtype": (npy(np.zeros((1, 3, 16, 16), np.float64)), "dtype float64", "element type f64"),
}


@pytest.mark.parametrize("case", list(REFUSED))
@pytest.mark.parametrize("runner", ["python", "cpp"])
def test_programs_refuse_an_input_the_ir_does_not_take_with_exit_2(runner: str, case: str, bundle_dir: Path,
                                                                   request: pytest.FixtureRequest) -> None:
    data, python_says, cpp_says = REFUSED[case]
    (bundle_dir / f"refused-{case}.npy").write_bytes(data)
    command = "python3 python/run_openvino.py" if runner == "python" else str(request.getfixturevalue("program"))
    done = shell(f"{command} models/openvino-fp32/model.openvino/model.xml refused-{case}.npy --out out/refused",
                 bundle_dir)
    says = python_says if runner == "python" else cpp_says
    assert done.returncode == 2 and f"refused-{case}.npy: {says}; input image takes" in done.stderr, done.stderr
    assert not (bundle_dir / "out" / "refused").exists()


@pytest.mark.parametrize(("args", "message"), [((), "a model and at least one input are needed"),
                                               (("--runs", "0"), "--runs takes a whole number >= 1, not '0'"),
                                               (("model.xml", "x.npy"), "model.xml: no such file"),
                                               (("models/openvino-fp32/model.openvino", SAMPLE, SAMPLE),
                                                "the model has 1 input(s) (image); 2 .npy file(s) given")])
def test_edgeship_openvino_exits_2_on_bad_arguments(args: tuple[str, ...], message: str, program: Path,
                                                    bundle_dir: Path) -> None:
    done = subprocess.run([str(program), *args], cwd=bundle_dir, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and message in done.stderr, (done.returncode, done.stderr)
