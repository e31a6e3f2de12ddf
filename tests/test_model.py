"""Model loading: safe weights, the usual checkpoint wrappers, and clear refusals."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from edgeship.errors import ModelSpecError, WeightsError
from edgeship.model import count_flops, load_model, read_checkpoint
from edgeship.spec import ModelSpec, load_spec
from tests.models.tinynet import build


class CodePayload:
    """Unpickling this runs a shell command: what a malicious checkpoint does."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_model_loads_weights_in_eval_mode(tiny_model) -> None:
    assert not tiny_model.module.training
    assert tiny_model.params == sum(p.numel() for p in build().parameters())
    assert len(tiny_model.weights_sha256) == 64


@pytest.mark.parametrize("wrap", [lambda sd: sd, lambda sd: {"state_dict": sd, "epoch": 3},
                                  lambda sd: {"model": sd}, lambda sd: {f"module.{k}": v for k, v in sd.items()}])
def test_model_checkpoint_wrappers_unwrap_to_the_state_dict(tmp_path: Path, wrap) -> None:
    sd = build().state_dict()
    torch.save(wrap(sd), tmp_path / "w.pt")
    loaded = read_checkpoint(tmp_path / "w.pt")
    assert set(loaded) == set(sd) and all(torch.equal(loaded[k], sd[k]) for k in sd)


def test_model_checkpoint_with_code_payload_is_refused_and_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    torch.save({"state_dict": build().state_dict(), "extra": CodePayload(marker)}, tmp_path / "evil.pt")
    with pytest.raises(WeightsError) as e:
        read_checkpoint(tmp_path / "evil.pt")
    assert "--trust-weights" in str(e.value) and "weights_only=True" in str(e.value)
    assert not marker.exists()


def test_model_trusted_checkpoint_may_hold_a_pickled_module(tmp_path: Path) -> None:
    torch.save(build(), tmp_path / "whole.pt")
    with pytest.raises(WeightsError, match="refused"):
        read_checkpoint(tmp_path / "whole.pt")
    assert set(read_checkpoint(tmp_path / "whole.pt", trust=True)) == set(build().state_dict())


def test_model_missing_and_unexpected_keys_are_listed(tiny_project: Path) -> None:
    sd = build().state_dict()
    sd.pop("head.weight")
    sd["extra.bias"] = torch.zeros(2)
    torch.save(sd, tiny_project / "tiny.pt")
    with pytest.raises(WeightsError) as e:
        load_model(load_spec(tiny_project / "model.toml"))
    assert "missing keys: head.weight" in str(e.value) and "unexpected keys: extra.bias" in str(e.value)


def test_model_shape_mismatch_names_both_shapes(tiny_project: Path) -> None:
    torch.save(build(classes=7).state_dict(), tiny_project / "tiny.pt")
    with pytest.raises(WeightsError, match=r"head.weight \(7, 8\) vs model \(4, 8\)"):
        load_model(load_spec(tiny_project / "model.toml"))


def test_model_entry_that_is_not_a_module_is_refused() -> None:
    with pytest.raises(ModelSpecError, match="returned str, expected a torch.nn.Module"):
        load_model(load_spec("tests.models.tinynet:not_a_module", "1,3"))


def test_model_entry_import_failure_names_module() -> None:
    with pytest.raises(ModelSpecError, match="cannot import 'no_such_module'"):
        load_model(load_spec("no_such_module:build", "1,3"))


def test_model_factory_imports_its_folder_while_loading_and_leaves_sys_path_as_it_was(tmp_path: Path) -> None:
    (tmp_path / "lazy_factory.py").write_text("def build():\n    from lazy_parts import head\n    return head()\n")
    (tmp_path / "lazy_parts.py").write_text("import torch\n\ndef head():\n    return torch.nn.Linear(3, 2)\n")
    spec = ModelSpec(name="lazy", entry="lazy_factory:build", inputs=[{"name": "x", "shape": [1, 3]}],
                     base_dir=tmp_path)
    assert load_model(spec).params == 8
    assert str(tmp_path) not in sys.path


def test_model_flops_are_counted(tiny_model) -> None:
    assert count_flops(tiny_model.module, tiny_model.example_inputs) > 0
