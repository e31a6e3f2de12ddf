"""Dynamic dimensions in the model spec: validation messages, the min/opt/max sizes, which dimensions
are one (the group rule), torch.export's dynamic_shapes, and seeded random inputs at each size with
the inputs' value ranges."""
from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from edgeship import shapes
from edgeship.calibration.datasets import random_batch, random_dataset
from edgeship.errors import ModelSpecError
from edgeship.model import example_inputs
from edgeship.spec import ModelSpec, load_spec


def spec_of(*inputs: dict) -> ModelSpec:
    return ModelSpec.model_validate({"name": "m", "entry": "m:f", "inputs": list(inputs)})


def ids(**extra) -> dict:
    return {"name": "input_ids", "shape": [1, 128], "dtype": "int64", "dynamic": {"1": {"min": 8, "max": 512}},
            **extra}


def load_toml(tmp_path: Path, inputs: str) -> ModelSpec:
    path = tmp_path / "model.toml"
    path.write_text(textwrap.dedent(f'name = "m"\nentry = "m:f"\ninputs = [{inputs}]\n'))
    return load_spec(path)


# --- validation -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("dynamic", "message"), [
    ('{ x = { min = 1, max = 4 } }', r'dynamic key "x" is not a dimension index; keys are decimal indices 0 to 1'),
    ('{ 01 = { min = 1, max = 4 } }', r'dynamic key "01" is not a dimension index'),
    ('{ 2 = { min = 1, max = 4 } }', r'dynamic "2": dimension 2 does not exist; shape \[1, 128\] has dimensions 0 '),
    ('{ 1 = { min = 600, max = 512 } }', r'dynamic "1" \(dimension 1\): min 600 is not below max 512'),
    ('{ 1 = { min = 8, max = 8 } }', r"min 8 is not below max 8; a dynamic dimension needs min < max"),
    ('{ 1 = { min = 8, max = 64 } }', r"dynamic \"1\" \(dimension 1\): shape\[1\] = 128 is outside \[min 8, max 64\]"),
    ('{ 1 = { min = 8, max = 512, opt = 600 } }', r"opt 600 is outside \[min 8, max 512\]"),
    ('{ 1 = { min = 0, max = 512 } }', r".dynamic.1.min = 0: Input should be greater than or equal to 1"),
])
def test_spec_dynamic_mistakes_name_the_file_input_and_dimension(tmp_path: Path, dynamic: str, message: str) -> None:
    with pytest.raises(ModelSpecError, match=r"model\.toml: inputs\[0\].*" + message):
        load_toml(tmp_path, f'{{ name = "input_ids", shape = [1, 128], dtype = "int64", dynamic = {dynamic} }}')


def test_spec_dynamic_mistakes_name_the_input(tmp_path: Path) -> None:
    with pytest.raises(ModelSpecError, match="input 'input_ids': dynamic \"1\""):
        load_toml(tmp_path, '{ name = "input_ids", shape = [1, 128], dynamic = { 1 = { min = 600, max = 512 } } }')


@pytest.mark.parametrize(("dtype", "value_range", "message"), [
    ("int64", "[5, 5]", r"low must be below high"),
    ("float32", "[1.0, 0.5]", r"low must be below high"),
    ("int64", "[0, 2.5]", r"an int64 input takes integer bounds"),
    ("uint8", "[0, 300]", r"uint8 holds 0 to 255, so low >= 0 and high <= 256"),
    ("float16", "[0, 70000]", r"beyond what float16 holds"),
])
def test_spec_range_mistakes_are_refused(tmp_path: Path, dtype: str, value_range: str, message: str) -> None:
    with pytest.raises(ModelSpecError, match=r"model\.toml: inputs\[0\]: input 'x': range \[.*\]: .*" + message):
        load_toml(tmp_path, f'{{ name = "x", shape = [1, 4], dtype = "{dtype}", range = {value_range} }}')


def test_spec_dynamic_and_range_read_from_toml(tmp_path: Path) -> None:
    spec = load_toml(tmp_path, '{ name = "input_ids", shape = [1, 128], dtype = "int64", '
                               'dynamic = { 1 = { min = 8, max = 512 } }, range = [0, 1000] }')
    assert spec.inputs[0].dynamic["1"].max == 512 and spec.inputs[0].range == [0, 1000]


def test_spec_dynamic_takes_int_keys_from_python() -> None:
    spec = spec_of({"shape": [1, 3, 32, 32], "dynamic": {2: {"min": 16, "max": 64}}})
    assert list(spec.inputs[0].dynamic) == ["2"]


def test_spec_refuses_an_input_too_large_at_its_max_size() -> None:
    with pytest.raises(ValueError, match="elements at the max sizes"):
        spec_of({"shape": [1, 3, 32, 32], "dynamic": {"2": {"min": 1, "max": 2**20}, "3": {"min": 1, "max": 2**20}}})


# --- sizes and groups -------------------------------------------------------------------------------------------------

def test_sizes_only_opt_without_dynamic_dimensions() -> None:
    spec = spec_of({"name": "image", "shape": [1, 3, 8, 8]})
    assert not shapes.is_dynamic(spec)
    assert shapes.sizes(spec) == {"opt": {"image": [1, 3, 8, 8]}}
    assert shapes.export_dynamic_shapes(spec) is None


def test_sizes_give_min_opt_max_with_opt_defaulting_to_shape() -> None:
    spec = spec_of(ids(), {"name": "image", "shape": [1, 3, 32, 32],
                           "dynamic": {"2": {"min": 16, "max": 64, "opt": 48}, "3": {"min": 16, "max": 64}}})
    assert shapes.sizes(spec) == {
        "min": {"input_ids": [1, 8], "image": [1, 3, 16, 16]},
        "opt": {"input_ids": [1, 128], "image": [1, 3, 48, 32]},
        "max": {"input_ids": [1, 512], "image": [1, 3, 64, 64]}}


def test_groups_same_index_and_range_are_one_dimension() -> None:
    mask = {**ids(), "name": "attention_mask"}
    spec = spec_of(ids(), mask, {**ids(), "name": "positions", "dynamic": {"1": {"min": 8, "max": 256}}})
    assert shapes.dim_names(spec) == {"input_ids": {1: "input_ids_dim1"}, "attention_mask": {1: "input_ids_dim1"},
                                      "positions": {1: "positions_dim1"}}
    ids_dims, mask_dims, positions_dims = shapes.export_dynamic_shapes(spec)
    assert ids_dims[1] is mask_dims[1] and positions_dims[1] is not ids_dims[1]


def test_groups_by_name_join_other_indices_and_separate_same_ranges() -> None:
    encoder = ids(dynamic={"1": {"min": 8, "max": 512, "name": "source"}})
    decoder = {**ids(), "name": "decoder_ids", "dynamic": {"1": {"min": 8, "max": 512, "name": "target"}}}
    features = {"name": "features", "shape": [1, 4, 128], "dynamic": {"2": {"min": 8, "max": 512, "name": "source"}}}
    names = shapes.dim_names(spec_of(encoder, decoder, features))
    assert names == {"input_ids": {1: "source"}, "decoder_ids": {1: "target"}, "features": {2: "source"}}


def test_groups_that_disagree_are_refused_naming_both() -> None:
    from edgeship.spec import InputSpec

    inputs = [InputSpec.model_validate(ids()), InputSpec.model_validate({**ids(), "name": "attention_mask",
                                                                         "shape": [1, 64]})]
    problems = shapes.group_problems(inputs)
    assert len(problems) == 1 and "input_ids dimension 1 (min 8, opt 128, max 512)" in problems[0]
    assert "attention_mask dimension 1 (min 8, opt 64, max 512)" in problems[0]
    with pytest.raises(ValueError, match="are one dimension \\(input_ids_dim1\\) but their sizes differ"):
        spec_of(ids(), {**ids(), "name": "attention_mask", "shape": [1, 64]})


def test_a_given_name_may_not_take_an_unnamed_group_name() -> None:
    from edgeship.spec import InputSpec

    other = {"name": "other", "shape": [1, 128], "dynamic": {"1": {"min": 8, "max": 512, "name": "input_ids_dim1"}}}
    assert shapes.group_problems([InputSpec.model_validate(ids()), InputSpec.model_validate(other)]) == [
        "dynamic dimension name 'input_ids_dim1' is also the name of an unnamed dimension; choose another name"]


def test_dynamic_batch_adds_batch_where_the_spec_keeps_dim0_fixed() -> None:
    spec = spec_of(ids(), {"name": "image", "shape": [2, 3], "dynamic": {"0": {"min": 1, "max": 8}}})
    assert shapes.dim_names(spec, dynamic_batch=True) == {"input_ids": {0: "batch", 1: "input_ids_dim1"},
                                                          "image": {0: "image_dim0"}}
    named_batch = spec_of(ids(dynamic={"1": {"min": 8, "max": 512, "name": "batch"}}))
    assert shapes.dim_names(named_batch, dynamic_batch=True) == {"input_ids": {0: "batch_", 1: "batch"}}


def test_describe_lists_groups_with_ranges() -> None:
    spec = spec_of(ids(), {**ids(), "name": "attention_mask"})
    assert shapes.describe(spec) == "input_ids[1], attention_mask[1] (input_ids_dim1): 8..512, opt 128"


# --- random inputs ----------------------------------------------------------------------------------------------------

def test_random_dataset_without_range_is_unchanged() -> None:
    spec = spec_of({"name": "image", "shape": [1, 3, 4, 4]}, {"name": "ids", "shape": [1, 5], "dtype": "int64"})
    data = random_dataset(spec, 3, seed=4)
    expected = np.random.default_rng(4).random((3, 3, 4, 4), dtype=np.float32)
    assert np.array_equal(data.inputs["image"], expected)
    assert not data.inputs["ids"].any()


def test_random_dataset_draws_integers_and_floats_from_the_range() -> None:
    spec = spec_of(ids(range=[0, 1000]), {"name": "x", "shape": [1, 64], "range": [-2.0, -1.5]},
                   {"name": "flag", "shape": [1, 64], "dtype": "bool", "range": [0, 2]})
    data = random_dataset(spec, 20, seed=1)
    tokens = data.inputs["input_ids"]
    assert tokens.dtype == np.int64 and tokens.shape == (20, 128)
    assert tokens.min() >= 0 and tokens.max() < 1000 and len(np.unique(tokens)) > 500
    assert data.inputs["x"].dtype == np.float32 and (data.inputs["x"] >= -2).all() and (data.inputs["x"] < -1.5).all()
    assert data.inputs["flag"].dtype == np.bool_ and 0 < data.inputs["flag"].mean() < 1
    assert np.array_equal(tokens, random_dataset(spec, 20, seed=1).inputs["input_ids"])


def test_random_dataset_and_batch_at_each_size() -> None:
    spec = spec_of(ids(range=[0, 10]), {"name": "image", "shape": [2, 3, 16, 16],
                                        "dynamic": {"2": {"min": 8, "max": 32}}})
    assert random_dataset(spec, 4, size="max").inputs["input_ids"].shape == (4, 512)
    assert random_dataset(spec, 4, size="min").inputs["image"].shape == (4, 3, 8, 16)
    assert "at the min size" in random_dataset(spec, 4, size="min").source
    assert [a.shape for a in random_batch(spec, "max")] == [(1, 512), (2, 3, 32, 16)]
    with pytest.raises(ValueError, match="size 'biggest'"):
        random_batch(spec, "biggest")


def test_example_inputs_are_at_opt_and_in_range() -> None:
    spec = spec_of(ids(range=[5, 9], dynamic={"1": {"min": 8, "max": 512, "opt": 64}}),
                   {"name": "x", "shape": [1, 4], "range": [10.0, 11.0]},
                   {"name": "z", "shape": [1, 2], "dtype": "int32"})
    tokens, x, z = example_inputs(spec)
    assert tuple(tokens.shape) == (1, 64) and int(tokens.min()) >= 5 and int(tokens.max()) < 9
    assert len(tokens.unique()) > 1
    assert float(x.min()) >= 10.0 and float(x.max()) < 11.0
    assert not z.any()


# --- [data] sizes: real samples at the min and max sizes --------------------------------------------------------------

SIZED = '''
import numpy as np

def at_size(size):
    length = {"min": 8, "max": 512}[size]
    for k in range(3):
        yield {"input_ids": np.full((1, length), k + 1, np.int64)}

def wrong(size):
    yield {"input_ids": np.zeros((1, 100), np.int64)}
'''


def sized_spec(tmp_path: Path, entry: str, dynamic: bool = True) -> ModelSpec:
    (tmp_path / "sized.py").write_text(SIZED)
    dims = ', dynamic = { 1 = { min = 8, max = 512 } }' if dynamic else ''
    (tmp_path / "model.toml").write_text(textwrap.dedent(f'''
        name = "m"
        entry = "m:f"
        inputs = [{{ name = "input_ids", shape = [1, 128], dtype = "int64"{dims} }}]
        [data]
        sizes = "{entry}"
        '''))
    return load_spec(tmp_path / "model.toml")


def test_spec_sizes_source_gives_real_samples_at_each_size(tmp_path: Path) -> None:
    from edgeship.calibration.datasets import load_sized

    spec = sized_spec(tmp_path, "sized:at_size")
    low, high = load_sized(spec.data.sizes, spec, "min", 8), load_sized(spec.data.sizes, spec, "max", 2)
    assert low.inputs["input_ids"].shape == (3, 8) and high.inputs["input_ids"].shape == (2, 512)
    assert low.source == "sized:at_size('min')" and (high.inputs["input_ids"] > 0).all()


def test_spec_sizes_source_of_the_wrong_shape_is_refused_naming_the_size(tmp_path: Path) -> None:
    from edgeship.calibration.datasets import load_sized
    from edgeship.errors import DataError

    spec = sized_spec(tmp_path, "sized:wrong")
    with pytest.raises(DataError, match=r"sized:wrong\('min'\): input 'input_ids' samples have shape \[100\].*takes "
                                        r"\[8\] per sample at the min size \(input shape \[1, 8\]\)"):
        load_sized(spec.data.sizes, spec, "min", 8)


def test_spec_sizes_without_a_dynamic_input_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelSpecError, match=r"\[data\] sizes = 'sized:at_size' gives samples at the min and max "
                                             "sizes, but no input has dynamic dimensions"):
        sized_spec(tmp_path, "sized:at_size", dynamic=False)
