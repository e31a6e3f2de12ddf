"""A module saved for edgeship's own processes: the same bytes in every process, loaded only as saved."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch

from edgeship.errors import ModelSpecError
from edgeship.objects.saved import load_saved, save_module
from tests.test_model import CodePayload

REPO = Path(__file__).resolve().parents[2]

SAVE_FROM_MAIN = """\
import sys, torch
from edgeship.objects.saved import save_module

def double(x):
    return x * 2

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return double(self.conv(x))

torch.manual_seed(0)
print(save_module(Net(), __import__("pathlib").Path(sys.argv[1])).sha256)
"""


def run(script: str, *args: str, cwd: Path, seed: str = "0") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": seed}
    return subprocess.run([sys.executable, "-c", script, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_saved_module_of_a_main_class_is_the_same_file_in_two_processes(tmp_path: Path) -> None:
    """cloudpickle names a class it carries by value with a random id; edgeship's is made from content."""
    shas = []
    for i, seed in enumerate(("1", "2")):
        proc = run(SAVE_FROM_MAIN, str(tmp_path / f"m{i}.pt"), cwd=tmp_path, seed=seed)
        assert proc.returncode == 0, proc.stderr
        shas.append(proc.stdout.strip())
    assert shas[0] == shas[1] == hashlib.sha256((tmp_path / "m0.pt").read_bytes()).hexdigest()
    assert (tmp_path / "m0.pt").read_bytes() == (tmp_path / "m1.pt").read_bytes()


def test_saved_module_of_a_main_class_loads_in_another_process_with_its_code(tmp_path: Path) -> None:
    proc = run(SAVE_FROM_MAIN, str(tmp_path / "m.pt"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    load = textwrap.dedent(f"""\
        import torch
        from edgeship.objects.saved import load_saved
        m = load_saved({str(tmp_path / "m.pt")!r}, {proc.stdout.strip()!r})
        torch.manual_seed(0)
        ref = torch.nn.Conv2d(3, 4, 3)
        x = torch.rand(1, 3, 8, 8)
        print(type(m).__name__, torch.equal(m(x), ref(x) * 2))
        """)
    loaded = run(load, cwd=REPO)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.split() == ["Net", "True"]


def test_load_saved_refuses_a_file_that_is_not_the_one_saved_and_never_unpickles_it(tmp_path: Path) -> None:
    saved = save_module(torch.nn.Linear(2, 2), tmp_path / "m.pt")
    marker = tmp_path / "pwned"
    (tmp_path / "m.pt").unlink()
    torch.save({"x": CodePayload(marker)}, tmp_path / "m.pt")   # swapped after it was saved
    with pytest.raises(ModelSpecError, match=r"refused: its sha256 is .* not .* as edgeship saved it"):
        load_saved(str(tmp_path / "m.pt"), saved.sha256)
    assert not marker.exists()


def test_load_saved_returns_the_module_with_its_weights(tmp_path: Path) -> None:
    module = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.ReLU())
    saved = save_module(module, tmp_path / "m.pt")
    loaded = load_saved(**saved.entry_kwargs(tmp_path / "m.pt"))
    x = torch.rand(4, 3)
    assert saved.sha256 == hashlib.sha256((tmp_path / "m.pt").read_bytes()).hexdigest()
    assert saved.size == (tmp_path / "m.pt").stat().st_size
    assert torch.equal(loaded(x), module(x)) and loaded is not module


def test_save_module_refuses_a_module_that_cannot_be_pickled_naming_it(tmp_path: Path) -> None:
    module = torch.nn.Linear(2, 2)
    module.lock = threading.Lock()
    with pytest.raises(ModelSpecError, match=r"module: Linear cannot be saved .*TypeError.*lock"):
        save_module(module, tmp_path / "m.pt")


def test_saved_module_of_a_project_class_records_its_source_and_folder(tmp_path: Path, project_module) -> None:
    name, folder, mod = project_module
    saved = save_module(mod.Net(), tmp_path / "m.pt")
    assert str(folder.resolve()) in saved.paths
    assert saved.sources[name] == hashlib.sha256((folder / f"{name}.py").read_bytes()).hexdigest()
    assert "torch.nn.modules.linear" in saved.sources   # installed code is recorded too
    loaded = run(f"from edgeship.objects.saved import load_saved\n"
                 f"print(type(load_saved(**{saved.entry_kwargs(tmp_path / 'm.pt')!r})).__module__)", cwd=tmp_path)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == name   # imported from its folder, though the process starts elsewhere


def test_load_saved_refuses_when_a_project_module_changed_since_it_was_saved(tmp_path: Path, project_module) -> None:
    name, folder, mod = project_module
    saved = save_module(mod.Net(), tmp_path / "m.pt")
    (folder / f"{name}.py").write_text((folder / f"{name}.py").read_text().replace("self.lin(x)", "-self.lin(x)"))
    with pytest.raises(ModelSpecError, match=rf"the source of {name} changed since the module was saved"):
        load_saved(**saved.entry_kwargs(tmp_path / "m.pt"))
