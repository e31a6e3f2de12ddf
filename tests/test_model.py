"""Model loading: safe weights, the usual checkpoint wrappers, and clear refusals."""
from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest
import torch

from edgeship.errors import ModelSpecError, WeightsError
from edgeship.model import call_model, count_flops, load_model, read_checkpoint
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


class Plain:
    """A class torch's weights_only loader does not allow."""


@pytest.mark.parametrize("trust", [False, True])
def test_model_random_bytes_are_not_a_checkpoint_whatever_the_trust(tmp_path: Path, trust: bool) -> None:
    (tmp_path / "w.pt").write_bytes(bytes(range(256)) * 8)
    with pytest.raises(WeightsError, match="not a torch checkpoint torch.load can read") as e:
        read_checkpoint(tmp_path / "w.pt", trust=trust)
    assert "refused" not in str(e.value) and "--trust-weights" not in str(e.value)


@pytest.mark.parametrize("content", [b"", b"hello world\n", b"PK\x03\x04 not a zip"])
def test_model_odd_weights_files_are_weights_errors(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "w.pt").write_bytes(content)
    for trust in (False, True):
        with pytest.raises(WeightsError, match=r"w.pt: not a torch checkpoint torch.load can read: \w+"):
            read_checkpoint(tmp_path / "w.pt", trust=trust)


def test_model_refused_checkpoint_names_the_blocked_global(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    torch.save({"x": CodePayload(marker)}, tmp_path / "evil.pt")
    torch.save({"x": Plain()}, tmp_path / "plain.pt")
    with pytest.raises(WeightsError, match=rf"refused: it needs global {os.system.__module__}\.system, "):
        read_checkpoint(tmp_path / "evil.pt")
    with pytest.raises(WeightsError, match=r"refused: it needs global tests\.test_model\.Plain, .*--trust-weights"):
        read_checkpoint(tmp_path / "plain.pt")
    assert not marker.exists()


def forward_project(tmp_path: Path, signature: str, inputs: int, width: int = 4) -> Path:
    """A module whose forward has ``signature`` (and uses its first input), and a spec with ``inputs`` inputs."""
    module = f"fwd_{uuid.uuid4().hex[:8]}"  # a fresh module name: sys.modules keeps the ones imported before
    (tmp_path / f"{module}.py").write_text(f"""import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, {signature}):
        return self.fc(locals()[{signature.split(",")[0].strip(" *")!r}])

def build():
    return Net()
""")
    names = "abcd"[:inputs]
    (tmp_path / "m.toml").write_text(f'name = "n"\nentry = "{module}:build"\ninputs = [' + ", ".join(
        f'{{ name = "{n}", shape = [1, {width}] }}' for n in names) + "]\n")
    return tmp_path / "m.toml"


@pytest.mark.parametrize(("signature", "inputs", "message"), [
    ("x", 2, r"the spec has 2 input\(s\) \(a, b\), but Net.forward\(x\) takes 1 input\(s\)"),
    ("x, y", 1, r"the spec has 1 input\(s\) \(a\), but Net.forward\(x, y\) takes 2 input\(s\)"),
    ("x, scale=1.0", 3, r"Net.forward\(x, scale=1.0\) takes 1 to 2 inputs"),
    ("x, *, mode", 1, r"Net.forward\(x, \*, mode\) takes 1 input\(s\) and needs keyword argument\(s\) mode"),
])
def test_model_spec_inputs_that_forward_cannot_take_are_a_spec_error(tmp_path: Path, signature: str, inputs: int,
                                                                     message: str) -> None:
    with pytest.raises(ModelSpecError, match=rf"m.toml: .*{message}"):
        load_model(load_spec(forward_project(tmp_path, signature, inputs)))


def test_model_forward_with_varargs_takes_any_number_of_inputs(tmp_path: Path) -> None:
    assert load_model(load_spec(forward_project(tmp_path, "*xs", 2))).params == 10


def test_model_error_on_the_spec_inputs_is_a_spec_error_naming_them(tmp_path: Path) -> None:
    path = forward_project(tmp_path, "x", 1, width=5)
    model = load_model(load_spec(path))
    with pytest.raises(ModelSpecError, match=r"m.toml: the model raised RuntimeError on the spec's inputs "
                                             r"\(a \[1, 5\] float32\): mat1 and mat2 .* Net.forward\(x\)"):
        call_model(model.module, {"a": model.example_inputs[0]}, str(path))
