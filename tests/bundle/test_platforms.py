"""The profile's [bundle] section: checked against the variants before a build starts."""
from __future__ import annotations

from pathlib import Path

import pytest

from edgeship.bundle.platforms import PLATFORMS
from edgeship.errors import ProfileError
from edgeship.profile import load_profile
from tests.conftest import write_profile

VARIANTS = """
[[variants]]
name = "pte"
backend = "executorch"

[[variants]]
name = "ort"
backend = "onnx"
"""


def test_platforms_take_only_their_artifacts() -> None:
    android, ios, jetson = PLATFORMS["android"], PLATFORMS["ios"], PLATFORMS["jetson"]
    assert android.refuses("executorch", {"partitioner": "xnnpack"}) is None
    assert "runs only on Apple platforms" in android.refuses("executorch", {"partitioner": "coreml"})
    assert ios.refuses("coreml", {}) is None and ios.refuses("executorch", {"partitioner": "coreml"}) is None
    assert jetson.refuses("tensorrt", {}) is None and "not pytorch-mobile" in jetson.refuses("pytorch-mobile", {})
    web = PLATFORMS["web"]
    assert web.refuses("onnx-web", {}) is None
    assert web.refuses("onnx", {}) == "web bundles take onnx-web artifacts, not onnx"
    assert "not onnx-web" in jetson.refuses("onnx-web", {}) and web.unpacked and not jetson.unpacked
    x86 = PLATFORMS["x86"]
    assert x86.refuses("openvino", {}) is None and x86.refuses("onnx", {}) is None and x86.by_variant
    assert x86.refuses("tensorrt", {}) == "x86 bundles take onnx and openvino artifacts, not tensorrt"
    assert "not openvino" in jetson.refuses("openvino", {}) and "not openvino" in PLATFORMS["linux"].refuses(
        "openvino", {})


def test_profile_bundle_section_loads(tmp_path: Path) -> None:
    profile = load_profile(write_profile(tmp_path, VARIANTS + '[bundle]\nplatforms = ["android", "jetson"]\n'))
    assert profile.bundle.platforms == ["android", "jetson"] and profile.bundle.variants == "passing"
    x86 = load_profile(write_profile(tmp_path, VARIANTS + '[bundle]\nplatforms = ["x86"]\n', name="x86"))
    assert x86.bundle.platforms == ["x86"]


@pytest.mark.parametrize("section, message", [
    ('platforms = ["ios"]\nvariants = ["ort"]',
     'bundle.variants[0] = "ort": no platform listed takes it '
     '(ios bundles take coreml and executorch artifacts, not onnx)'),
    ('platforms = ["android"]\nvariants = ["pt"]', 'bundle.variants[0] = "pt": no such variant'),
    ('platforms = ["android"]\nvariants = ["ort"]',
     'bundle.platforms[0] = "android": no variant of this profile goes into it'),
    ('platforms = ["windows"]',
     'bundle.platforms[0] = "windows": not allowed; one of: android, ios, jetson, linux, web, x86'),
    ('platforms = ["x86"]\nvariants = ["pte"]',
     'bundle.variants[0] = "pte": no platform listed takes it (x86 bundles take onnx and openvino artifacts, '
     'not executorch)'),
    ('platforms = ["web"]', 'bundle.platforms[0] = "web": no variant of this profile goes into it; web bundles '
                            'take onnx-web artifacts'),
    ('platforms = ["android"]\nvariant = "fastest"', 'unknown key bundle.variant (did you mean "variants"?)'),
])
def test_profile_bundle_mistakes_exit_2_before_any_work(tmp_path: Path, section: str, message: str) -> None:
    path = write_profile(tmp_path, VARIANTS + "[bundle]\n" + section + "\n")
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert str(path) in str(err.value) and message in str(err.value)


def test_bundle_programs_name_files_of_their_backends_package_for_platforms_it_bundles_for() -> None:
    from edgeship.backends.registry import SPECS, package_folder

    declared = {name: spec.bundle_programs for name, spec in SPECS.items() if spec.bundle_programs}
    assert declared, "no backend declares bundle programs"
    for name, programs in declared.items():
        for platform, files in programs.items():
            assert platform in SPECS[name].bundle_platforms and platform in PLATFORMS
            for source in files.values():
                assert (package_folder(name) / source).is_file(), f"{name}: {source}"


def test_bundle_ships_runner_only_for_a_linux_program_the_device_compiles() -> None:
    from edgeship.backends.registry import SPECS

    on_device = {"backend": "aoti", "runtime": {"details": {"compile_on": "device"}}}
    on_build = {"backend": "aoti", "runtime": {"details": {"compile_on": "build"}}}
    assert SPECS["aoti"].bundle_ships_runner("linux", on_device)
    assert not SPECS["aoti"].bundle_ships_runner("linux", on_build)
    assert not SPECS["aoti"].bundle_ships_runner("x86", on_device)
    assert not any(SPECS[name].bundle_ships_runner("linux", on_device) for name in SPECS if name != "aoti")
