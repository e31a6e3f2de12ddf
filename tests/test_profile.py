"""Profiles: the shipped ones load; every kind of mistake exits 2 with file, key, value and allowed set."""
from __future__ import annotations

from pathlib import Path

import pytest

from edgeship.errors import ProfileError
from edgeship.profile import Gates, load_profile, resolve_profile_path
from tests.conftest import REPO, write_profile

VARIANT = """
[[variants]]
name = "ort"
backend = "onnx"
"""


@pytest.mark.parametrize("name", sorted(p.stem for p in (REPO / "targets").glob("*.toml")))
def test_profile_shipped_targets_load(name: str) -> None:
    profile = load_profile(REPO / "targets" / f"{name}.toml")
    assert profile.name == name and profile.variants


def test_profile_unknown_key_names_file_key_and_near_miss(tmp_path: Path) -> None:
    path = write_profile(tmp_path, VARIANT, extra="[latency]\n")  # duplicate table is a TOML error
    with pytest.raises(ProfileError, match="not valid TOML"):
        load_profile(path)
    path = write_profile(tmp_path, VARIANT.replace('backend = "onnx"', 'backend = "onnx"\nprecison = "fp32"'))
    with pytest.raises(ProfileError) as e:
        load_profile(path)
    msg = str(e.value)
    assert str(path) in msg and "variants[0].precison" in msg and 'did you mean "precision"' in msg
    assert "allowed here:" in msg and "backend" in msg


def test_profile_unknown_backend_lists_backends_with_near_miss(tmp_path: Path) -> None:
    path = write_profile(tmp_path, VARIANT.replace('"onnx"', '"onxx"'))
    with pytest.raises(ProfileError) as e:
        load_profile(path)
    msg = str(e.value)
    assert 'variants[0].backend = "onxx"' in msg and "executorch" in msg and 'did you mean "onnx"' in msg


def test_profile_wrong_type_names_key_and_value(tmp_path: Path) -> None:
    path = write_profile(tmp_path, VARIANT).read_text().replace("iterations = 10", 'iterations = "many"')
    (tmp_path / "p.toml").write_text(path)
    with pytest.raises(ProfileError, match=r'latency.iterations = "many": .*integer'):
        load_profile(tmp_path / "p.toml")


def test_profile_precision_literal_lists_allowed_values(tmp_path: Path) -> None:
    path = write_profile(tmp_path, VARIANT + 'precision = "fp31"\n')
    with pytest.raises(ProfileError, match=r'precision = "fp31": not allowed; one of: fp16, fp32, int8, w8 '
                                           r'\(did you mean "fp32"\?\)'):
        load_profile(path)


def test_profile_backend_options_are_checked_against_the_backend(tmp_path: Path) -> None:
    path = write_profile(tmp_path, VARIANT + "options = { opsett = 17 }\n")
    with pytest.raises(ProfileError) as e:
        load_profile(path)
    assert "variants[0] (ort).options: unknown key opsett" in str(e.value)
    assert 'did you mean "opset"' in str(e.value)


def test_profile_missing_data_path_is_an_error(tmp_path: Path) -> None:
    path = write_profile(tmp_path, VARIANT, extra='[data]\nevaluation = "nowhere/eval.npz"\n')
    with pytest.raises(ProfileError, match=r"data.evaluation = \"nowhere/eval.npz\": path does not exist"):
        load_profile(path)


def test_profile_collects_every_problem_in_one_message(tmp_path: Path) -> None:
    path = write_profile(tmp_path, VARIANT.replace('"onnx"', '"nope"') + "colour = 1\n")
    with pytest.raises(ProfileError, match="2 problems"):
        load_profile(path)


def test_profile_duplicate_variant_names_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="used twice"):
        load_profile(write_profile(tmp_path, VARIANT + VARIANT))


def test_profile_precision_the_backend_lacks_is_refused(tmp_path: Path) -> None:
    path = write_profile(tmp_path, VARIANT.replace('"onnx"', '"pytorch-mobile"') + 'precision = "fp16"\n')
    with pytest.raises(ProfileError, match="backend pytorch-mobile supports one of"):
        load_profile(path)


def test_profile_capture_order_must_include_a_method_the_backend_takes(tmp_path: Path) -> None:
    variant = VARIANT.replace('"onnx"', '"executorch"') + 'capture = ["trace"]\n'
    with pytest.raises(ProfileError, match="backend executorch captures with one of: export"):
        load_profile(write_profile(tmp_path, variant))


def test_profile_unknown_target_name_suggests_near_miss(tmp_path: Path) -> None:
    (tmp_path / "android.toml").write_text("")
    with pytest.raises(ProfileError, match='did you mean "android"'):
        resolve_profile_path("andriod", [tmp_path])


def test_gates_merge_overrides_only_the_fields_set() -> None:
    base = Gates(min_sqnr_db=60, max_top1_drop=1.0)
    merged = base.merged(Gates(min_sqnr_db=25))
    assert merged.min_sqnr_db == 25 and merged.max_top1_drop == 1.0
