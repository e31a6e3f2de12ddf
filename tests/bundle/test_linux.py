"""The linux bundle: the tiny model's AOTInductor packages (fp32 and int8) and TorchScript file with a C++
application (cpp/). The application is really compiled (CMake, the system g++, the LibTorch inside
the installed torch wheel) once for the module and run on each artifact: its outputs match the
float model and torch's own Python loaders, its timings are real numbers, and it refuses, with its
exit codes, .npy files it does not read, bad arguments and packages compiled for another CPU."""
from __future__ import annotations

import io
import json
import math
import subprocess
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from edgeship import api
from edgeship.bundle.archive import extract_bundle
from edgeship.bundle.linux import linux_app
from edgeship.bundle.sample import Sample
from edgeship.cli import main
from edgeship.metrics import sqnr_db
from tests import system
from tests.conftest import make_tiny_project, write_profile

VARIANTS = """
[[variants]]
name = "aoti-fp32"
backend = "aoti"
precision = "fp32"

[[variants]]
name = "aoti-int8"
backend = "aoti"
precision = "int8"
quantization = { scheme = "static", samples = 16 }
gates = { min_sqnr_db = 20.0 }

[[variants]]
name = "torchscript-fp32"
backend = "torchscript"
precision = "fp32"

[bundle]
platforms = ["linux"]
"""
ARTIFACTS = {"aoti-fp32": "models/aoti-fp32.pt2", "aoti-int8": "models/aoti-int8.pt2",
             "torchscript-fp32": "models/torchscript-fp32.pt"}
MIN_SQNR_DB = {"aoti-int8": 20.0}  # against the float model; 60 dB for the others (fp32)
APP = ["cpp/CMakeLists.txt", "cpp/README.md", "cpp/edgeship_common.hpp", "cpp/main.cpp"]
RUNS, WARMUP = 10, 2  # the fast profile's latency settings (tests/conftest.py), one thread as it has


def npy(array: np.ndarray, **kwargs) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, **kwargs)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def linux_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model built for aoti and torchscript with ``[bundle] platforms = ["linux"]``: the build folder."""
    if system.toolchain():  # AOTInductor compiles C++ as well
        pytest.skip(system.toolchain())
    root = tmp_path_factory.mktemp("linux")
    project = make_tiny_project(root / "tiny")
    profile = write_profile(root, VARIANTS, name="linuxtest")
    out = root / "out"
    assert main(["build", "--target", str(profile), "--model", str(project / "model.toml"), "--out", str(out),
                 "--device", "host", "--quiet"]) == 0
    return out


@pytest.fixture(scope="module")
def app(linux_build: Path) -> tuple[Path, Path]:
    """The bundle extracted and its application configured and built against the torch wheel's LibTorch:
    (the bundle's folder, the program)."""
    import torch

    folder = linux_build.parent / "bundle"
    extract_bundle(linux_build / "tiny-linux.zip", folder)
    began = time.perf_counter()
    for command in (["cmake", "-S", "cpp", "-B", "build", f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}"],
                    ["cmake", "--build", "build", "-j"]):
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    print(f"\ncpp/ configured and built in {time.perf_counter() - began:.1f} s")
    return folder, folder / "build" / "edgeship_run"


def run_app(app: tuple[Path, Path], *args: str) -> subprocess.CompletedProcess:
    folder, program = app
    return subprocess.run([str(program), *args], cwd=folder, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def first_sample(linux_build: Path) -> np.ndarray:
    """The first of the evaluation samples the build measured (the profile evaluates 24 of 32, seed 0)."""
    from edgeship.calibration.dataset import sample_indices

    with np.load(linux_build.parent / "tiny" / "eval.npz") as data:
        return np.ascontiguousarray(data["x"][sample_indices(32, 24, 0)][:1])


@pytest.fixture(scope="module")
def app_runs(app: tuple[Path, Path], first_sample: np.ndarray) -> dict[str, Path]:
    """edgeship_run on each artifact with the first evaluation sample, one thread: each run's --out folder."""
    folder, _ = app
    (folder / "input.npy").write_bytes(npy(first_sample))
    outs = {}
    for variant, path in ARTIFACTS.items():
        done = run_app(app, path, "input.npy", "--runs", str(RUNS), "--warmup", str(WARMUP), "--threads", "1",
                       "--out", f"out/{variant}")
        assert done.returncode == 0, f"{variant}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        print(done.stdout, end="")
        outs[variant] = folder / "out" / variant
    return outs


def python_loader(variant: str, path: Path):
    import torch

    if variant.startswith("aoti"):
        return torch._inductor.aoti_load_package(str(path))
    return torch.jit.load(str(path)).eval()


def test_linux_app_holds_the_program_its_cmake_project_and_a_readme_with_the_commands() -> None:
    meta = {"model": "tiny", "inputs": [{"name": "image", "shape": [1, 3, 16, 16], "dtype": "float32"}],
            "outputs": [{"shape": [1, 4], "meaning": None}],
            "artifacts": [{"variant": v, "backend": v.split("-")[0], "path": p,
                           "runtime": {"details": {"cpu_flags_required": ["avx2", "fma"]} if "aoti" in v else {}}}
                          for v, p in ARTIFACTS.items()]}
    image = np.arange(3 * 16 * 16, dtype=">f4").reshape(1, 3, 16, 16)  # big-endian: written little-endian
    files = linux_app(meta, meta["artifacts"], Sample({"image": image}, "the first 1 of 32, from eval.npz"))
    assert sorted(files) == [*APP, "cpp/samples/image.npy"]
    cmake = Path(files["cpp/CMakeLists.txt"]).read_text()
    assert "find_package(Torch REQUIRED)" in cmake and "${TORCH_LIBRARIES}" in cmake
    source = Path(files["cpp/main.cpp"]).read_text()
    assert "AOTIModelPackageLoader" in source and "torch::jit::load" in source and "edgeship.cpu_flags" in source
    readme = files["cpp/README.md"].decode()
    assert ("cmake -S cpp -B build -DCMAKE_PREFIX_PATH=$(python -c 'import torch;print(torch.utils.cmake_prefix_path)')"
            in readme)
    assert "cmake --build build -j" in readme and "edgeship.cpu_flags" in readme
    assert "./build/edgeship_run models/aoti-fp32.pt2 cpp/samples/image.npy --out out/aoti-fp32" in readme
    assert "`models/aoti-fp32.pt2` needs avx2, fma." in readme
    sample = np.load(io.BytesIO(files["cpp/samples/image.npy"]))
    assert sample.dtype.str == "<f4" and sample.flags.c_contiguous and np.array_equal(sample, image)


def test_linux_app_numbers_its_sample_files_when_input_names_collide_as_file_names() -> None:
    meta = {"model": "m", "inputs": [{"name": "a/b", "shape": [1], "dtype": "int64"},
                                     {"name": "a:b", "shape": [1], "dtype": "int64"}], "outputs": [], "artifacts": []}
    arrays = {"a/b": np.zeros(1, np.int64), "a:b": np.ones(1, np.int64)}
    files = linux_app(meta, [], Sample(arrays, "test"))
    assert [n for n in sorted(files) if n.startswith("cpp/samples/")] == ["cpp/samples/input0.npy",
                                                                            "cpp/samples/input1.npy"]
    assert np.load(io.BytesIO(files["cpp/samples/input1.npy"])).tolist() == [1]


@pytest.mark.slow
def test_linux_bundle_holds_the_models_the_app_and_a_readme_and_verifies(capsys, linux_build: Path) -> None:
    bundle = linux_build / "tiny-linux.zip"
    with zipfile.ZipFile(bundle) as zf:
        names = sorted(zf.namelist())
        readme = zf.read("README.md").decode()
    assert names == sorted([*APP, *ARTIFACTS.values(), "README.md", "manifest.json", "model.json",
                            "cpp/samples/image.npy"])  # one evaluation sample per input, to run the app on
    with zipfile.ZipFile(bundle) as zf:
        assert "samples/image.npy" in zf.read("cpp/README.md").decode()
    assert "cmake --build build -j" in readme and "edgeship.cpu_flags" in readme and "Jetson" not in readme
    assert api.verify_bundle(bundle).platform == "linux"
    assert main(["bundle", "verify", str(bundle)]) == 0
    assert f"ok: {bundle}: linux bundle, {len(names) - 1} files" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(ARTIFACTS))
def test_edgeship_run_outputs_match_the_float_model_and_the_python_loader(variant: str, app: tuple[Path, Path],
                                                                          app_runs: dict[str, Path],
                                                                          first_sample: np.ndarray) -> None:
    import torch

    from edgeship.model import load_model
    from edgeship.spec import load_spec

    folder, _ = app
    out = np.load(app_runs[variant] / "outputs" / "out0.npy")
    assert sorted(p.name for p in (app_runs[variant] / "outputs").iterdir()) == ["out0.npy"]
    with torch.inference_mode():
        x = torch.from_numpy(first_sample)
        eager = load_model(load_spec(folder.parent / "tiny" / "model.toml")).module(x).numpy()
        loaded = python_loader(variant, folder / ARTIFACTS[variant])(x)
    loaded = (loaded[0] if isinstance(loaded, (list, tuple)) else loaded).numpy()
    assert out.dtype == np.float32 and out.shape == eager.shape == (1, 4)
    vs_eager, vs_python = sqnr_db(eager, out), sqnr_db(loaded, out)
    print(f"\n{variant}: SQNR vs eager {vs_eager if vs_eager is not None else 'inf'} dB, vs the Python loader "
          f"{vs_python if vs_python is not None else 'inf'} dB (max |diff| {np.abs(loaded - out).max():.3g})")
    assert vs_eager is None or vs_eager >= MIN_SQNR_DB.get(variant, 60.0)
    np.testing.assert_allclose(out, loaded, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(ARTIFACTS))
def test_edgeship_run_writes_finite_positive_timings_beside_the_python_runners(variant: str,
                                                                              app_runs: dict[str, Path],
                                                                              linux_build: Path) -> None:
    import torch

    doc = json.loads((app_runs[variant] / "timings.json").read_text())
    kind = "aoti" if variant.startswith("aoti") else "torchscript"
    assert doc["runtime"] == f"libtorch {torch.__version__.split('+')[0]} {kind}"
    assert (doc["threads"], doc["warmup"], doc["runs"], doc["outputs"]) == (1, WARMUP, RUNS, 1)
    timings = doc["timings_ms"]
    assert len(timings) == RUNS and all(math.isfinite(t) and t > 0 for t in timings)
    assert doc["p50_ms"] == pytest.approx(float(np.median(timings)), abs=1e-5)
    results = json.loads((linux_build / "results.json").read_text())
    row = next(r for r in results["variants"] if r["name"] == variant)
    python = next(lat["p50_ms"] for lat in row["latency"] if lat["device"] == "host")
    print(f"\n{variant}: p50 {doc['p50_ms']:.3f} ms in C++, {python:.3f} ms in the Python runner (one thread)")


@pytest.mark.slow
def test_edgeship_run_exits_1_with_libtorchs_message_when_the_model_fails(app: tuple[Path, Path]) -> None:
    folder, _ = app
    (folder / "wrong.npy").write_bytes(npy(np.zeros((1, 5, 16, 16), np.float32)))  # 5 channels, not 3
    for path in ARTIFACTS.values():
        done = run_app(app, path, "wrong.npy", "--runs", "1", "--warmup", "0", "--out", "out/wrong")
        assert done.returncode == 1, (path, done.returncode, done.stderr)
        assert any(line.startswith("edgeship_run: ") for line in done.stderr.splitlines()), done.stderr


@pytest.mark.slow
def test_edgeship_run_reads_npy_format_2_as_it_reads_1(app: tuple[Path, Path], app_runs: dict[str, Path],
                                                      first_sample: np.ndarray) -> None:
    folder, _ = app
    (folder / "v2.npy").write_bytes(npy(first_sample, version=(2, 0)))
    done = run_app(app, ARTIFACTS["torchscript-fp32"], "v2.npy", "--runs", "1", "--warmup", "0", "--out", "out/v2")
    assert done.returncode == 0, done.stderr
    assert np.array_equal(np.load(folder / "out/v2/outputs/out0.npy"),
                          np.load(app_runs["torchscript-fp32"] / "outputs" / "out0.npy"))


REFUSED = {
    "fortran order": (npy(np.asfortranarray(np.zeros((2, 3), np.float32))), "Fortran-order (column-major) data"),
    "big-endian": (npy(np.zeros((1, 3, 16, 16), ">f4")), "big-endian data ('>f4')"),
    "complex": (npy(np.zeros(2, np.complex64)), "dtype '<c8'"),
    "structured": (npy(np.zeros(2, [("a", "<f4")])), "a structured dtype"),
    "version 3.0": (npy(np.zeros(2, np.float32), version=(3, 0)), "format version 3.0"),
    "truncated": (npy(np.zeros(8, np.float32))[:-4], "holds 28 bytes of data, its header says 32"),
    "trailing bytes": (npy(np.zeros(8, np.float32)) + b"\0", "bytes after the array's data"),
    "not npy": (b"PK\3\4 a zip", "not a .npy file (no \\x93NUMPY magic)"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(REFUSED))
def test_edgeship_run_refuses_an_npy_it_does_not_read_with_exit_2(case: str, app: tuple[Path, Path]) -> None:
    folder, _ = app
    data, message = REFUSED[case]
    (folder / "refused.npy").write_bytes(data)
    done = run_app(app, ARTIFACTS["torchscript-fp32"], "refused.npy", "--out", "out/refused")
    assert done.returncode == 2 and message in done.stderr, (done.returncode, done.stderr)
    assert done.stderr.startswith("edgeship_run: refused.npy: ")


@pytest.mark.slow
@pytest.mark.parametrize(("args", "message"), [((), "a model and at least one input are needed"),
                                               (("--runs", "0"), "--runs takes a whole number >= 1, not '0'"),
                                               (("--fast",), "unknown option --fast"),
                                               (("model.onnx", "x.npy"), "model.onnx: no such file")])
def test_edgeship_run_exits_2_on_bad_arguments(args: tuple[str, ...], message: str, app: tuple[Path, Path]) -> None:
    done = run_app(app, *args)
    assert done.returncode == 2 and message in done.stderr, (done.returncode, done.stderr)


@pytest.mark.slow
@pytest.mark.parametrize(("change", "message"), [
    ({"edgeship.cpu_flags": "sse4_2,not_a_cpu_flag"}, "this CPU lacks not_a_cpu_flag and would stop with an "
                                                      "illegal instruction"),
    ({"AOTI_MACHINE": "aarch64"}, "this package was compiled for aarch64; this machine is")])
def test_edgeship_run_refuses_a_package_for_another_cpu_with_exit_3(change: dict[str, str], message: str,
                                                                    app: tuple[Path, Path]) -> None:
    folder, _ = app
    with zipfile.ZipFile(folder / ARTIFACTS["aoti-fp32"]) as src, zipfile.ZipFile(folder / "other.pt2", "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("wrapper_metadata.json"):
                data = json.dumps({**json.loads(data), **change}).encode()
            dst.writestr(info, data)
    (folder / "zeros.npy").write_bytes(npy(np.zeros((1, 3, 16, 16), np.float32)))
    done = run_app(app, "other.pt2", "zeros.npy", "--out", "out/other")
    assert done.returncode == 3 and message in done.stderr, (done.returncode, done.stderr)
    assert not (folder / "out" / "other").exists()
