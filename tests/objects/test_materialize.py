"""A module and its data in hand made into a model spec: its folder, its stage cache keys, its refusals."""
from __future__ import annotations

import stat
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from edgeship.cache import Cache, cache_key
from edgeship.errors import DataError, ModelSpecError
from edgeship.model import load_model
from edgeship.objects.materialize import materialize
from edgeship.pipeline.stagecache import model_key
from edgeship.profile import load_profile
from tests.conftest import write_profile

FP32 = """
[[variants]]
name = "onnx-fp32"
backend = "onnx"
precision = "fp32"
"""
INT8 = """
[[variants]]
name = "onnx-int8"
backend = "onnx"
precision = "int8"
quantization = { scheme = "static", samples = 12 }
"""


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).mean((2, 3))


class OtherForward(Net):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).amax((2, 3))


def net(cls: type[Net] = Net) -> Net:
    torch.manual_seed(0)
    return cls()


@pytest.fixture
def made(tmp_path: Path):
    """materialize() with a profile of ``variants`` (fp32 only by default) and a cache in tmp_path."""
    cache = Cache(tmp_path / "cache")

    def make(module: object, example_inputs: object = None, variants: str = FP32, **kwargs: object):
        profile = load_profile(str(write_profile(tmp_path, variants)))
        inputs = torch.rand(1, 3, 8, 8) if example_inputs is None else example_inputs
        return materialize(module, inputs, profile, cache, **kwargs)
    return make


def test_materialize_the_same_module_gives_the_same_spec_and_folder_reused(made) -> None:
    first, second = made(net()), made(net())
    assert first.spec.model_dump() == second.spec.model_dump() and model_key(first.spec) == model_key(second.spec)
    assert (first.reused, second.reused) == (False, True) and first.folder == second.folder
    assert stat.S_IMODE(first.folder.stat().st_mode) == 0o700
    assert first.spec.entry == "edgeship.objects.saved:load_saved" and first.spec.name == "Net"
    assert first.spec.inputs[0].model_dump(exclude={"dynamic", "range"}) == {
        "name": "input", "shape": [1, 3, 8, 8], "dtype": "float32"}
    assert first.bytes == (first.folder / "module.pt").stat().st_size > 0


def test_materialize_a_changed_weight_or_forward_gives_another_stage_key(made) -> None:
    base = cache_key(model_key(made(net()).spec))
    moved = net()
    with torch.no_grad():
        moved.conv.bias[0] += 1e-3
    other = net(OtherForward)
    assert torch.equal(other.conv.weight, net().conv.weight)   # the same state, another forward
    assert len({base, cache_key(model_key(made(moved).spec)), cache_key(model_key(made(other).spec))}) == 3


def test_materialize_a_changed_project_module_gives_another_stage_key(made, project_module) -> None:
    name, folder, mod = project_module
    base = model_key(made(mod.Net(), torch.rand(1, 3)).spec)
    (folder / f"{name}.py").write_text((folder / f"{name}.py").read_text() + "\n# edited\n")
    assert model_key(made(mod.Net(), torch.rand(1, 3)).spec) != base   # the class travels by name: its source


def test_materialize_spec_loads_the_module_as_the_runners_do(made) -> None:
    spec = made(net()).spec
    loaded = load_model(spec)
    x = torch.rand(2, 3, 8, 8)
    assert not loaded.module.training and torch.equal(loaded.module(x), net()(x))


def test_materialize_spec_refuses_a_module_file_swapped_in_its_folder(made) -> None:
    spec = made(net()).spec
    module_file = spec.base_dir / "module.pt"
    module_file.chmod(0o600)
    torch.save(net(OtherForward), module_file)
    with pytest.raises(ModelSpecError, match=r"entry edgeship.objects.saved:load_saved raised ModelSpecError: .*"
                                             r"refused: its sha256 is"):
        load_model(spec)


def test_materialize_writes_data_and_labels_the_spec_names(made) -> None:
    x, y = torch.rand(30, 3, 8, 8), torch.arange(30) % 4
    batches = [(x[i:i + 8], y[i:i + 8]) for i in range(0, 30, 8)]
    spec = made(net(), variants=FP32 + INT8, calibration=list(x), evaluation=batches, labels=list("abcd")).spec
    calib, evaluation = np.load(spec.data.calibration), np.load(spec.data.evaluation)
    assert np.array_equal(calib["input"], x[:12].numpy()) and "y" not in calib   # the variant's 12 samples
    # the profile's [evaluation] samples = 24
    assert np.array_equal(evaluation["input"], x[:24].numpy()) and np.array_equal(evaluation["y"], y[:24].numpy())
    assert spec.label_names() == ["a", "b", "c", "d"]


def test_materialize_reads_no_calibration_data_when_no_variant_calibrates(made) -> None:
    def never():
        raise AssertionError("read")
        yield
    assert made(net(), calibration=never()).spec.data.calibration is None


def test_materialize_takes_a_data_path_as_it_is(made, tmp_path: Path) -> None:
    np.savez(tmp_path / "eval.npz", x=np.random.default_rng(0).random((4, 3, 8, 8), dtype=np.float32))
    assert made(net(), evaluation=tmp_path / "eval.npz").spec.data.evaluation == str(tmp_path / "eval.npz")
    with pytest.raises(DataError, match=r"evaluation='gen:make': a module:callable source is for model spec files"):
        made(net(), evaluation="gen:make")


def test_materialize_integer_inputs_take_their_random_values_from_the_examples(made) -> None:
    class Embed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(20, 4)

        def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return self.emb(ids).sum(1) * mask.sum()
    spec = made(Embed(), {"ids": torch.tensor([[3, 9, 5]]), "mask": torch.ones(1, 3, dtype=torch.bool)}).spec
    assert [(i.name, i.dtype, i.range) for i in spec.inputs] == [("ids", "int64", [3, 10]), ("mask", "bool", None)]


@pytest.mark.parametrize(("module", "inputs", "message"), [
    ([nn.Linear(2, 2)], None, r"module: a list, not a torch.nn.Module; edgeship.build takes \(module, example_inputs"),
    (nn.Linear(2, 2), "x", r"example_inputs: a str; example_inputs is a torch.Tensor \(one input\), a tuple"),
    (nn.Linear(2, 2), (), r"example_inputs: empty; example_inputs is"),
    (nn.Linear(2, 2), [torch.rand(1, 2), 3], r"example_inputs\[1\]: a int, not a torch.Tensor"),
    (nn.Linear(2, 2), torch.rand(1, 2, dtype=torch.float64), r"example_inputs\[0\]: dtype float64; inputs are one of "
                                                              r"float32, float16, int64, int32, uint8, bool"),
    (nn.Linear(2, 2), torch.tensor(1.0), r"example_inputs\[0\]: a 0-d tensor; an input has its batch dimension first"),
    (nn.Linear(2, 2), {1: torch.rand(1, 2)}, r"example_inputs\[1\]: input names are strings"),
    (nn.Linear(2, 2), (torch.rand(1, 2), torch.rand(1, 2)), r"the spec has 2 input\(s\) \(input_0, input_1\), but "
                                                            r"Linear.forward\(input\) takes 1 input\(s\)"),
])
def test_materialize_refuses_what_it_cannot_take_naming_the_argument(made, module, inputs, message) -> None:
    with pytest.raises(ModelSpecError, match=message):
        made(module, inputs)


@pytest.mark.parametrize("labels", [[], ["a", 3], ["two\nlines"], {"a": 0}])
def test_materialize_refuses_labels_that_are_not_class_names(made, labels) -> None:
    with pytest.raises(ModelSpecError, match=r"labels: .*labels is the class names, in class index order"):
        made(net(), labels=labels)
