"""A model without a weights file is built from the model spec's seed: the same random weights in
every process and build, other weights for another seed, and a build that finds a model different
from the one its cached float reference was made from says so."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from edgeship.errors import ModelSpecError
from edgeship.model import LazyModel, load_model, state_sha256
from edgeship.pipeline.stagecache import model_key
from edgeship.spec import ModelSpec, load_spec

SOURCE = """\
import itertools
import torch
from torch import nn

def unseeded():
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(144, 2))

_calls = itertools.count()

def different_every_time():
    model = nn.Linear(3, 2)
    with torch.no_grad():
        model.bias.fill_(float(next(_calls)))
    return model
"""


def spec(folder: Path, entry: str = "randinit:unseeded", seed: int = 0) -> ModelSpec:
    (folder / "randinit.py").write_text(SOURCE)
    return ModelSpec(name="r", entry=entry, seed=seed, base_dir=folder, inputs=[{"shape": [1, 3, 8, 8]}])


def test_load_model_builds_the_same_random_weights_from_the_same_seed(tmp_path: Path) -> None:
    torch.manual_seed(1234)
    expected_next = torch.rand(3)
    torch.manual_seed(1234)
    first, again = (state_sha256(load_model(spec(tmp_path)).module) for _ in range(2))
    assert first == again
    assert state_sha256(load_model(spec(tmp_path, seed=7)).module) != first
    assert torch.equal(torch.rand(3), expected_next)  # the caller's random state is left as it was


def test_model_key_changes_with_the_seed(tmp_path: Path) -> None:
    assert model_key(spec(tmp_path)) != model_key(spec(tmp_path, seed=7))


def test_lazy_model_refuses_a_model_other_than_the_cached_references(tmp_path: Path) -> None:
    made = LazyModel(spec(tmp_path, "randinit:different_every_time"))
    cached = made.state_sha256
    again = LazyModel(spec(tmp_path, "randinit:different_every_time"))
    again.expect_state(cached)
    with pytest.raises(ModelSpecError, match=r"differs from the one the stage cache's float reference was computed "
                                             r"from .* the entry builds different weights each time"):
        _ = again.module
    same = LazyModel(spec(tmp_path))
    same.expect_state(LazyModel(spec(tmp_path)).state_sha256)
    assert same.module is not None


@pytest.mark.parametrize("value", ["-1", "4294967296", '"zero"', "1.5", "true"])
def test_spec_seed_must_be_a_32_bit_unsigned_integer(tmp_path: Path, value: str) -> None:
    path = tmp_path / "model.toml"
    path.write_text(textwrap.dedent(f"""\
        name = "r"
        entry = "randinit:unseeded"
        seed = {value}
        inputs = [{{ shape = [1, 3, 8, 8] }}]
        """))
    with pytest.raises(ModelSpecError, match=rf"{path}.*seed"):
        load_spec(path)
