"""Fixtures of the object API's tests."""
from __future__ import annotations

import sys
import textwrap
import uuid
from pathlib import Path

import pytest


@pytest.fixture
def project_module(tmp_path: Path):
    """A module of the user's project (importable here, not installed): ``<name>.Net``."""
    name = f"proj_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / f"{name}.py").write_text(textwrap.dedent("""\
        import torch

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(3, 2)

            def forward(self, x):
                return self.lin(x)
        """))
    sys.path.insert(0, str(folder))
    try:
        yield name, folder, __import__(name)
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop(name, None)
