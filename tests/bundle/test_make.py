"""Bundles of a real build: android (.pte/.ptl, labels, model.json, Kotlin), jetson (ONNX, the
TensorRT engine builder, the runner); the manifest; which variants go in; the bundle command."""
from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

from edgeship import api
from edgeship.cli import main
from edgeship.errors import BundleError
from edgeship.results import Results
from tests.reports.builds import LABELS


def read(zip_path: Path, name: str) -> bytes:
    with zipfile.ZipFile(zip_path) as zf:
        return zf.read(name)


def names(zip_path: Path) -> list[str]:
    with zipfile.ZipFile(zip_path) as zf:
        return sorted(zf.namelist())


def test_android_bundle_holds_the_validated_artifacts_labels_metadata_and_kotlin(two_device_build: Path) -> None:
    bundle = two_device_build / "tiny-android.zip"
    assert names(bundle) == ["ModelLoader.kt", "README.md", "assets/executorch-fp32.pte", "assets/mobile-fp32.ptl",
                             "labels.txt", "manifest.json", "model.json"]
    assert (read(bundle, "assets/executorch-fp32.pte")
            == (two_device_build / "executorch-fp32" / "model.pte").read_bytes())
    assert read(bundle, "labels.txt").decode().split() == list(LABELS)
    kotlin = read(bundle, "ModelLoader.kt").decode()
    assert 'org.pytorch.executorch.Module.load(assetFilePath(context, "executorch-fp32.pte"))' in kotlin
    assert 'org.pytorch.LiteModuleLoader.load(assetFilePath(context, "mobile-fp32.ptl"))' in kotlin
    assert ("Tensor.fromBlob(image, longArrayOf(1, 3, 16, 16))" in kotlin
            and "outputs[0].toTensor().dataAsFloatArray" in kotlin)


def test_android_model_json_describes_input_output_and_runtimes(two_device_build: Path) -> None:
    meta = json.loads(read(two_device_build / "tiny-android.zip", "model.json"))
    assert meta["inputs"] == [{"name": "image", "shape": [1, 3, 16, 16], "dtype": "float32", "layout": "NCHW"}]
    assert meta["outputs"][0]["shape"] == [1, len(LABELS)] and meta["outputs"][0]["dtype"] == "float32"
    assert meta["outputs"][0]["meaning"].startswith("class scores (logits)")
    assert meta["preprocessing"]["declared"] is False and "note" in meta["preprocessing"]
    runtimes = {a["variant"]: a["runtime"] for a in meta["artifacts"]}
    results = Results.read(two_device_build / "results.json")
    assert runtimes["executorch-fp32"]["written_by"] == f"executorch {results.toolchain['executorch']}"
    assert runtimes["executorch-fp32"]["delegate"] == "XNNPACK"
    mobile = results.variant("mobile-fp32").lowering.details
    assert runtimes["mobile-fp32"]["bytecode_version"] == mobile["bytecode_version"]
    assert runtimes["mobile-fp32"]["operators"] == mobile["operators"]


def test_manifest_carries_toolchain_validation_and_what_was_left_out(two_device_build: Path) -> None:
    manifest = json.loads(read(two_device_build / "tiny-android.zip", "manifest.json"))
    results = Results.read(two_device_build / "results.json")
    assert manifest["toolchain"] == results.toolchain and manifest["platform"] == "android"
    inside = {v["name"]: v for v in manifest["variants"]}
    assert inside["executorch-fp32"]["gates"]["passed"] is True
    assert inside["executorch-fp32"]["latency"] == [lat.model_dump(mode="json")
                                                    for lat in results.variant("executorch-fp32").latency]
    left_out = {x["variant"]: x["why"] for x in manifest["left_out"]}
    assert left_out["too-old"].startswith("not built: lowering failed")
    assert "not onnx" in left_out["onnx-fp32"] and "not tensorrt" in left_out["tensorrt-fp16"]


def test_jetson_bundle_holds_onnx_the_engine_builder_and_the_runner(two_device_build: Path) -> None:
    bundle = two_device_build / "tiny-jetson.zip"
    inside = names(bundle)
    trt = [n for n in inside if n.startswith("models/tensorrt-fp16/")]
    assert (sorted(p.name for p in (two_device_build / "tensorrt-fp16").iterdir())
            == sorted(n.split("/")[-1] for n in trt))
    assert {"models/tensorrt-fp16/build_engine.sh", "models/tensorrt-fp16/tensorrt_engine.py"} <= set(trt)
    assert "models/onnx-fp32/model.onnx" in inside
    assert ({"runner/runner.py", "runner/hashing.py", "runner/tensorrt_engine.py"} <= set(inside)
            and not any(n.endswith(".kt") for n in inside))
    assert api.verify_bundle(bundle).files == len(inside) - 1


def test_bundle_verify_passes_on_the_build_bundle_and_exits_2_on_a_tampered_copy(capsys, two_device_build: Path,
                                                                                 tmp_path: Path) -> None:
    bundle = two_device_build / "tiny-android.zip"
    assert main(["bundle", "verify", str(bundle)]) == 0
    assert "android bundle, 6 files" in capsys.readouterr().out
    tampered = tmp_path / "tiny-android.zip"
    with zipfile.ZipFile(bundle) as zin, zipfile.ZipFile(tampered, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            zout.writestr(info, data[:-1] + bytes([data[-1] ^ 1]) if info.filename.endswith(".ptl") else data)
    assert main(["bundle", "verify", str(tampered)]) == 2
    assert "assets/mobile-fp32.ptl: differs from manifest.json" in capsys.readouterr().err


@pytest.fixture
def build_copy(two_device_build: Path, tmp_path: Path) -> Path:
    """The build folder copied, so a test can change it; the profile and spec stay beside it."""
    copy = tmp_path / "out"
    shutil.copytree(two_device_build, copy)
    return copy


def test_bundle_command_fastest_picks_the_lowest_p50(capsys, two_device_build: Path, build_copy: Path) -> None:
    root = two_device_build.parent
    results = Results.read(build_copy / "results.json")
    p50 = {name: results.variant(name).latency[0].p50_ms for name in ("executorch-fp32", "mobile-fp32")}
    argv = ["bundle", "--target", str(root / "twodev.toml"), "--model", str(root / "tiny" / "model.toml"),
            "--out", str(build_copy), "--platform", "android", "--variants", "fastest"]
    assert main(argv) == 0
    fastest = min(p50, key=p50.get)
    assert f"tiny-android.zip: {fastest}" in capsys.readouterr().out
    manifest = json.loads(read(build_copy / "tiny-android.zip", "manifest.json"))
    assert [v["name"] for v in manifest["variants"]] == [fastest]
    assert manifest["selection"].startswith(f"the fastest passing variant by p50 on cpu-a: {fastest}")


def test_bundle_refuses_an_artifact_changed_since_the_build(two_device_build: Path, build_copy: Path) -> None:
    root = two_device_build.parent
    (build_copy / "mobile-fp32" / "model.ptl").write_bytes(b"not the validated artifact")
    with pytest.raises(BundleError, match="model.ptl: changed since the build validated it"):
        api.bundle(str(root / "twodev.toml"), str(root / "tiny" / "model.toml"), out=build_copy)


def test_bundle_command_names_what_is_missing(capsys, two_device_build: Path, tmp_path: Path) -> None:
    root = two_device_build.parent
    spec = str(root / "tiny" / "model.toml")
    assert main(["bundle", "--target", "host", "--model", spec, "--out", str(tmp_path)]) == 2
    assert "no results.json: build first" in capsys.readouterr().err
    assert main(["bundle", "--target", "host", "--model", spec, "--out", str(two_device_build)]) == 2
    assert "has no [bundle] section; pass --platform" in capsys.readouterr().err
    assert main(["bundle", "--target", str(root / "twodev.toml"), "--model", spec, "--out", str(two_device_build),
                 "--variants", "onnx-fp3"]) == 2
    assert 'did you mean "onnx-fp32"' in capsys.readouterr().err


def test_artifact_files_copy_a_package_folder_file_by_file(tmp_path: Path) -> None:
    from edgeship.bundle.make import artifact_files
    from edgeship.bundle.platforms import PLATFORMS
    from edgeship.results import VariantResult

    package = tmp_path / "coreml-fp16" / "model.mlpackage"
    (package / "Data" / "com.apple.CoreML").mkdir(parents=True)
    (package / "Manifest.json").write_text("{}")
    (package / "Data" / "com.apple.CoreML" / "model.mlmodel").write_bytes(b"spec")
    (tmp_path / "coreml-fp16" / "lowering.log").write_text("not shipped")
    from edgeship.devices.hashing import sha256_path

    row = VariantResult(name="coreml-fp16", backend="coreml", precision="fp16", file="coreml-fp16/model.mlpackage",
                        sha256=sha256_path(package))
    main_path, files = artifact_files(PLATFORMS["ios"], tmp_path, row)
    assert main_path == "Models/coreml-fp16.mlpackage"
    assert sorted(files) == ["Models/coreml-fp16.mlpackage/Data/com.apple.CoreML/model.mlmodel",
                             "Models/coreml-fp16.mlpackage/Manifest.json"]
    _, whole = artifact_files(PLATFORMS["jetson"], tmp_path, row.model_copy(update={"backend": "tensorrt"}))
    assert not any(name.endswith("lowering.log") for name in whole)
