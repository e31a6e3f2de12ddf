"""Fixtures for the device tests: a real throwaway sshd, devices files, a small artifact."""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tests import system
from tests.devices import sshd as sshd_helper


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    """A real OpenSSH server on 127.0.0.1 with throwaway host and client keys (skips without OpenSSH)."""
    if system.openssh():
        pytest.skip(system.openssh())
    server = sshd_helper.start(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


@pytest.fixture
def lock_home(tmp_path, monkeypatch) -> Path:
    """Device locks under the test's own folder, not the user's cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def dropping_python(folder: Path, times: int) -> Path:
    """A Python for an ssh device that, for its first ``times`` calls, kills the sshd session it runs
    under (the connection drops mid-job, as when a board loses its network) and then behaves."""
    script = folder / "dropping_python"
    script.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import os, signal, sys
        count = {str(folder / 'drops')!r}
        n = int(open(count).read()) if os.path.exists(count) else 0
        if n < {times}:
            open(count, "w").write(str(n + 1))
            pid = os.getppid()
            while pid > 1:
                with open(f"/proc/{{pid}}/stat") as f:
                    stat = f.read()
                if stat.split("(")[1].split(")")[0] == "sshd":
                    os.kill(pid, signal.SIGKILL)
                    break
                pid = int(stat.rsplit(")", 1)[1].split()[1])
            sys.exit(70)
        os.execv({sys.executable!r}, [{sys.executable!r}] + sys.argv[1:])
        """))
    script.chmod(0o755)
    return script


@pytest.fixture
def ptl(tiny_model, tmp_path: Path) -> Path:
    """The tiny test model as a lite-interpreter artifact (.ptl)."""
    import torch

    traced = torch.jit.freeze(torch.jit.trace(tiny_model.module, tiny_model.example_inputs))
    path = tmp_path / "model.ptl"
    traced._save_for_lite_interpreter(str(path))
    return path


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    """Five random samples for the tiny model, as a runner's inputs .npz."""
    path = tmp_path / "inputs.npz"
    np.savez(path, image=np.random.default_rng(0).random((5, 3, 16, 16), dtype=np.float32))
    return path
