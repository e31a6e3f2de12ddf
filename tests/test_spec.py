"""Model specs: model.toml and module:callable, with clear errors for bad input."""
from __future__ import annotations

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
