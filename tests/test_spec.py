"""Model specs: model.toml and module:callable, with clear errors for bad input."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from edgeship.errors import ModelSpecError
from edgeship.spec import demo_spec_path, load_spec, parse_input_shape


def test_spec_demo_loads_with_absolute_paths() -> None:
    spec = load_spec(demo_spec_path())
    assert spec.name == "digitnet" and spec.weights.is_absolute()
    assert Path(spec.data.evaluation).is_file() and spec.label_names() == [str(i) for i in range(10)]


def test_spec_module_callable_needs_input_shape() -> None:
    with pytest.raises(ModelSpecError, match="needs --input-shape"):
        load_spec("tests.models.tinynet:build")
    spec = load_spec("tests.models.tinynet:build", "1,3,16,16")
    assert spec.name == "build" and spec.inputs[0].shape == [1, 3, 16, 16]


@pytest.mark.parametrize("text", ["", "1,a", "0,3", "-1"])
def test_spec_input_shape_rejects_non_positive_or_text(text: str) -> None:
    with pytest.raises(ModelSpecError, match="--input-shape"):
        parse_input_shape(text)


def test_spec_missing_weights_file_names_the_path(tmp_path: Path) -> None:
    (tmp_path / "m.toml").write_text('name = "m"\nentry = "a:b"\nweights = "w.pt"\n'
                                     'inputs = [{ shape = [1, 3] }]\n')
    with pytest.raises(ModelSpecError, match=r"weights = \"w.pt\": path does not exist"):
        load_spec(tmp_path / "m.toml")


def test_spec_unknown_key_and_missing_inputs_reported_together(tmp_path: Path) -> None:
    (tmp_path / "m.toml").write_text('name = "m"\nentry = "a:b"\nweigths = "w.pt"\n')
    with pytest.raises(ModelSpecError) as e:
        load_spec(tmp_path / "m.toml")
    assert "missing required key inputs" in str(e.value) and 'did you mean "weights"' in str(e.value)


def test_spec_entry_must_be_module_colon_callable(tmp_path: Path) -> None:
    (tmp_path / "m.toml").write_text('name = "m"\nentry = "just_a_module"\ninputs = [{ shape = [1] }]\n')
    with pytest.raises(ModelSpecError, match="entry"):
        load_spec(tmp_path / "m.toml")


@pytest.mark.parametrize(("text", "named"), [("1,x,3", "element 2 ('x') is not a positive integer"),
                                             ("1,3,", "element 3 is empty"),
                                             ("1,,3", "element 2 is empty"),
                                             ("1,3x4", "element 2 ('3x4')"),
                                             ("1,3_0", "element 2 ('3_0')"),
                                             ("1," + "9" * 5000, "element 2 (99999")])
def test_spec_input_shape_names_the_bad_element(text: str, named: str) -> None:
    with pytest.raises(ModelSpecError, match=re.escape(named)) as e:
        parse_input_shape(text)
    assert len(str(e.value)) < 300


def test_spec_input_shape_takes_commas_or_x() -> None:
    assert parse_input_shape("1, 3,16,16") == parse_input_shape("1x3x16x16") == [1, 3, 16, 16]


def spec_file(tmp_path: Path, extra: str, inputs: str = "[{ shape = [1, 4] }]") -> Path:
    (tmp_path / "m.toml").write_text(f'name = "m"\nentry = "a:b"\ninputs = {inputs}\n{extra}\n')
    return tmp_path / "m.toml"


@pytest.mark.parametrize(("inputs", "match"), [
    ("[{ shape = [1, true] }]", r"inputs\[0\].shape\[1\] = true: expected an integer, not true"),
    ("[{ shape = [1, 4.0] }]", r"inputs\[0\].shape\[1\] = 4.0: expected an integer, not a float"),
    ("[{ shape = [1, 99999999999999999999999] }]", r"1e\+23 elements; an input has at most 2,147,483,647"),
    ("[{ shape = [65536, 65536] }]", r"4.29e\+09 elements"),
    ("[{ shape = [1, 0] }]", "every dimension must be a positive integer"),
    ('[{ shape = [1, 4], dtype = "float64" }]', r'dtype = "float64": not allowed; one of: bool, float16'),
])
def test_spec_input_shape_and_dtype_must_be_usable(tmp_path: Path, inputs: str, match: str) -> None:
    with pytest.raises(ModelSpecError, match=match):
        load_spec(spec_file(tmp_path, "", inputs))


@pytest.mark.parametrize(("extra", "match"), [
    ("entry_kwargs = { width = nan }", r"entry_kwargs: width = nan: not a finite number"),
    ("entry_kwargs = { sizes = [1.0, { scale = -inf }] }", r"entry_kwargs: sizes\[1\].scale = -inf: not a finite"),
    ("[preprocess]\nmean = [0.5, inf]", r"preprocess.mean\[1\] = inf: not a finite number"),
    ("[preprocess]\nstd = [0.0]", r"preprocess.std\[0\] = 0.0: Input should be greater than 0"),
    ("[preprocess]\nresize = [-1, 8]", r"preprocess.resize\[0\] = -1: Input should be greater than 0"),
    ('base_dir = "/etc"', "unknown key base_dir; allowed here: name, entry"),
])
def test_spec_bad_values_are_refused_naming_the_key(tmp_path: Path, extra: str, match: str) -> None:
    with pytest.raises(ModelSpecError, match=match):
        load_spec(spec_file(tmp_path, extra))


@pytest.mark.parametrize("key", ["weights", "labels"])
def test_spec_weights_and_labels_must_be_files(tmp_path: Path, key: str) -> None:
    (tmp_path / "folder").mkdir()
    with pytest.raises(ModelSpecError, match=rf'{key} = "folder": not a file \(.*folder is a folder\)'):
        load_spec(spec_file(tmp_path, f'{key} = "folder"'))


def test_spec_labels_that_are_not_utf8_are_a_spec_error(tmp_path: Path) -> None:
    (tmp_path / "labels.txt").write_bytes(b"cat\ndog\n")
    spec = load_spec(spec_file(tmp_path, 'labels = "labels.txt"'))
    (tmp_path / "labels.txt").write_bytes(b"cat\n\xff\xfedog\n")
    with pytest.raises(ModelSpecError, match=r'labels = "labels.txt": not UTF-8 text \(.*\): byte 0xff at offset 4'):
        load_spec(spec_file(tmp_path, 'labels = "labels.txt"'))
    with pytest.raises(ModelSpecError, match=r"labels .*labels.txt: not UTF-8 text \(byte offset 4\)"):
        spec.label_names()  # changed after the spec was loaded


def test_spec_that_is_not_utf8_or_too_deep_names_the_file(tmp_path: Path) -> None:
    path = spec_file(tmp_path, "")
    path.write_bytes(path.read_bytes().replace(b'"m"', b'"m\xc3"'))
    with pytest.raises(ModelSpecError, match=r"m.toml: not UTF-8 text: byte 0xc3 at offset 9 \(line 1\)"):
        load_spec(path)
    path.write_text("a = " + "[" * 100_000 + "]" * 100_000)
    with pytest.raises(ModelSpecError, match="m.toml: nested too deeply"):
        load_spec(path)
