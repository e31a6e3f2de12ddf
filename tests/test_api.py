"""edgeship.build's two forms: a model spec file (the command line's) and a torch.nn.Module in hand."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import edgeship
from edgeship import api
from edgeship.errors import ModelSpecError
from tests.conftest import write_profile

VARIANTS = """
[[variants]]
name = "onnx-fp32"
backend = "onnx"
precision = "fp32"

[[variants]]
name = "onnx-int8"
backend = "onnx"
precision = "int8"
quantization = { scheme = "static", samples = 16 }
gates = { min_sqnr_db = 10.0 }
"""


@pytest.mark.parametrize(("args", "kwargs", "form"), [
    (("host",), {}, "build"),
    (("host", "model.toml"), {}, "build"),
    ((), {"target": "host", "model": "model.toml"}, "build"),
    ((Path("targets/host.toml"),), {"model": "model.toml"}, "build"),
    ((torch.nn.Linear(2, 2), torch.rand(1, 2)), {"target": "host"}, "build_module"),
    ((), {"module": torch.nn.Linear(2, 2), "example_inputs": torch.rand(1, 2), "target": "host"}, "build_module"),
])
def test_build_takes_a_target_or_a_module(monkeypatch, args, kwargs, form) -> None:
    called = []
    for name in ("build", "build_module"):
        monkeypatch.setattr(api, name, lambda *a, _name=name, **k: called.append((_name, a, k)))
    edgeship.build(*args, **kwargs)
    assert called == [(form, args, kwargs)]


def test_build_of_something_that_is_not_a_module_says_what_it_takes() -> None:
    with pytest.raises(ModelSpecError, match=r"module: a list, not a torch.nn.Module.*\(target, model="):
        edgeship.build([1, 2], torch.rand(1, 2), target="host")


@pytest.mark.slow
def test_build_module_makes_the_artifacts_a_spec_file_makes(tmp_path: Path, tiny_project: Path, capsys) -> None:
    """The tiny project's model, in hand with DataLoaders over its data, and from its model.toml: the
    same artifacts byte for byte and the same accuracy figures."""
    import numpy as np

    profile = write_profile(tmp_path, VARIANTS)
    from_spec = api.build(str(profile), str(tiny_project / "model.toml"), out=tmp_path / "spec", quiet=True)
    sys.path.insert(0, str(tiny_project))   # the class as the spec's entry imports it: tinynet.TinyNet
    try:
        from tinynet import build as tinynet
        module = tinynet()
        module.load_state_dict(torch.load(tiny_project / "tiny.pt"))
        calib, evaluation = np.load(tiny_project / "calib.npz"), np.load(tiny_project / "eval.npz")
        x, y = torch.from_numpy(evaluation["x"]), torch.from_numpy(evaluation["y"])
        results = edgeship.build(module, {"image": torch.rand(1, 3, 16, 16)}, target=str(profile), name="tiny",
                                 calibration=DataLoader(TensorDataset(torch.from_numpy(calib["x"])), batch_size=4),
                                 evaluation=DataLoader(TensorDataset(x, y), batch_size=5), out=tmp_path / "object")
    finally:
        sys.path.remove(str(tiny_project))
        sys.modules.pop("tinynet", None)
    assert "module and data for the build" in capsys.readouterr().err
    rows = {v.name: v for v in results.variants}
    for row in from_spec.variants:
        assert rows[row.name].sha256 == row.sha256, row.name
        assert rows[row.name].accuracy == row.accuracy, row.name
    assert rows["onnx-int8"].accuracy.top1 is not None and rows["onnx-int8"].sha256 is not None
    written = json.loads((tmp_path / "object" / "results.json").read_text())
    assert written["model"]["entry"] == "edgeship.objects.saved:load_saved"
