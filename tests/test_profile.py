"""Profiles: the shipped ones load; every kind of mistake exits 2 with file, key, value and allowed set."""
from __future__ import annotations

from pathlib import Path

import pydantic
import pytest

from edgeship.errors import ProfileError
from edgeship.profile import Gates, LatencySettings, load_profile, resolve_profile_path
from tests import system
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
    with pytest.raises(ProfileError, match=r'precision = "fp31": not allowed; one of: bf16, fp16, fp32, int8, w8 '
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


def test_profile_duplicate_variant_names_name_the_duplicate_only(tmp_path: Path) -> None:
    path = write_profile(tmp_path, VARIANT + VARIANT)
    with pytest.raises(ProfileError) as e:
        load_profile(path)
    # The whole document is the input of this check: it is not printed back.
    assert str(e.value) == f'{path}: variants[0] and variants[1] are both named "ort"; variant names must be unique'


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


@pytest.mark.parametrize("literal", ["nan", "inf", "-inf", "+nan", "1e400"])
@pytest.mark.parametrize(("table", "key"), [("gates", "min_sqnr_db"), ("latency", "timeout_s"), ("latency", "max_cv")])
def test_profile_non_finite_number_is_refused_naming_the_key(tmp_path: Path, literal: str, table: str,
                                                             key: str) -> None:
    (tmp_path / "p.toml").write_text(f"[{table}]\n{key} = {literal}\n{VARIANT}")
    with pytest.raises(ProfileError, match=rf"p.toml: {table}\.{key} = [-+]?(nan|inf): not a finite number; "
                                           "finite numbers only"):
        load_profile(tmp_path / "p.toml")


def test_profile_non_finite_number_in_a_variant_override_is_refused(tmp_path: Path) -> None:
    path = write_profile(tmp_path, VARIANT + "gates = { min_cosine = nan }\n")
    with pytest.raises(ProfileError, match=r"variants\[0\].gates.min_cosine = nan: not a finite number"):
        load_profile(path)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_profile_models_refuse_non_finite_numbers_from_python_too(value: float) -> None:
    with pytest.raises(pydantic.ValidationError, match="finite number"):
        Gates(min_sqnr_db=value)  # float | None
    with pytest.raises(pydantic.ValidationError, match="finite number"):
        LatencySettings(max_cv=value)


@pytest.mark.parametrize(("value", "got"), [("true", "true"), ('"10"', "a string"), ("10.0", "a float")])
def test_profile_value_of_another_toml_type_is_refused_not_converted(tmp_path: Path, value: str, got: str) -> None:
    text = write_profile(tmp_path, VARIANT).read_text().replace("iterations = 10", f"iterations = {value}")
    (tmp_path / "p.toml").write_text(text)
    with pytest.raises(ProfileError, match=f"latency.iterations = .*: expected an integer, not {got}"):
        load_profile(tmp_path / "p.toml")


def test_profile_integer_for_a_float_is_accepted(tmp_path: Path) -> None:
    assert load_profile(write_profile(tmp_path, VARIANT + "gates = { min_sqnr_db = 20 }\n")).variants[0].gates


def test_profile_that_is_not_utf8_names_the_file_and_byte_offset(tmp_path: Path) -> None:
    path = write_profile(tmp_path, VARIANT)
    path.write_bytes(path.read_bytes() + b'description = "caf\xe9"\n')
    offset = path.read_bytes().index(b"\xe9")
    with pytest.raises(ProfileError, match=rf"{path.name}: not UTF-8 text: byte 0xe9 at offset {offset} \(line "):
        load_profile(path)


def test_profile_with_a_byte_order_mark_loads(tmp_path: Path) -> None:
    path = write_profile(tmp_path, VARIANT)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert load_profile(path).variants[0].name == "ort"


@pytest.mark.parametrize("nesting", ["a = " + "[" * 100_000 + "]" * 100_000, "a = " + "[" * 40 + "]" * 40,
                                     "[" + ".".join(["t"] * 5000) + "]"])
def test_profile_nested_too_deeply_is_refused_naming_the_file(tmp_path: Path, nesting: str) -> None:
    path = write_profile(tmp_path, VARIANT)
    path.write_text(path.read_text() + nesting + "\n")
    with pytest.raises(ProfileError, match=f"{path.name}: nested too deeply"):
        load_profile(path)


def test_profile_problems_are_capped_at_twenty_and_the_rest_counted(tmp_path: Path) -> None:
    path = write_profile(tmp_path, VARIANT.replace('"onnx"', '"nope"') * 2000)
    with pytest.raises(ProfileError) as e:
        load_profile(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: 2000 problems:") and msg.endswith("... and 1980 more")
    assert msg.count("variants[") == 20 and len(msg) < 20 * 300


@pytest.mark.parametrize(("line", "match"), [
    ('evaluation = "a\\u0000b.npz"', "a path cannot contain a NUL character"),
    ('evaluation = "' + "x" * 5000 + '.npz"', "cannot use this path: File name too long"),
])
def test_profile_unusable_data_path_is_refused(tmp_path: Path, line: str, match: str) -> None:
    path = write_profile(tmp_path, VARIANT, extra=f"[data]\n{line}\n")
    with pytest.raises(ProfileError, match=match):
        load_profile(path)


def test_profile_bundle_labels_must_be_a_utf8_text_file(tmp_path: Path) -> None:
    (tmp_path / "labels").mkdir()
    path = write_profile(tmp_path, VARIANT + '[bundle]\nplatforms = ["android"]\nlabels = "labels"\n')
    with pytest.raises(ProfileError, match=r'bundle.labels = "labels": not a file \(.* is a folder\)'):
        load_profile(path)
    (tmp_path / "labels.txt").write_bytes(b"\xe9t\xe9\n")  # latin-1
    path = write_profile(tmp_path, VARIANT + '[bundle]\nplatforms = ["android"]\nlabels = "labels.txt"\n')
    with pytest.raises(ProfileError, match=r'bundle.labels = "labels.txt": not UTF-8 text \(.*\): byte 0xe9 at '):
        load_profile(path)


def test_profile_key_the_loader_sets_is_unknown_in_the_file(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text(f'path = "elsewhere.toml"\n{VARIANT}')
    with pytest.raises(ProfileError, match="unknown key path; allowed here: name, description"):
        load_profile(tmp_path / "p.toml")


def test_profile_unreadable_path_is_a_profile_error(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    with pytest.raises(ProfileError, match="a path cannot contain a NUL character"):
        load_profile(str(tmp_path / "a\0b.toml"))
    with pytest.raises(ProfileError, match="cannot be read: Not a directory"):
        load_profile(tmp_path / "afile" / "p.toml")
    (tmp_path / "a.toml").symlink_to(tmp_path / "b.toml")
    (tmp_path / "b.toml").symlink_to(tmp_path / "a.toml")
    with pytest.raises(ProfileError, match="a.toml: cannot be read: Too many levels of symbolic links"):
        load_profile(tmp_path / "a.toml")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason=system.reason("os", "no /dev/zero here"))
def test_profile_endless_file_is_refused_unread() -> None:
    with pytest.raises(ProfileError, match="/dev/zero: larger than 64 MiB"):
        load_profile("/dev/zero")
