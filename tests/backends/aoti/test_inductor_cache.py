"""Inductor's on-disk cache for aoti compiles: a folder only this user controls, never Inductor's default
``/tmp/torchinductor_<user>``, a fixed name another local user can make first with compiled code of theirs
in it (Inductor loads what it finds there); its precompiled headers, kept under that default name whatever
the cache folder is, are turned off. On the build machine (lower.py) and on a device (build.py)."""
from __future__ import annotations

import getpass
import json
import os
import pwd
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from edgeship.backends.aoti import build as aoti_build
from edgeship.backends.aoti import lower as aoti_lower
from edgeship.errors import OutputError
from tests import system
from tests.conftest import REPO

CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


def _theirs(path: Path) -> Path:
    """``path`` as another local user (nobody) would make it first: their folder, open to everyone."""
    path.mkdir(parents=True)
    path.chmod(0o777)
    nobody = pwd.getpwnam("nobody")
    os.chown(path, nobody.pw_uid, nobody.pw_gid)
    return path


@pytest.mark.parametrize("torch_default", [False, True])
def test_aoti_inductor_cache_is_the_users_own_folder_when_none_is_set(monkeypatch, tmp_path, torch_default) -> None:
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    if torch_default:  # what importing torch._dynamo does: the variable set to the shared default, made
        monkeypatch.setenv(CACHE_ENV, default_cache_dir())
        _theirs(Path(default_cache_dir()))
    else:
        monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder = aoti_lower.private_inductor_cache()
    assert folder == tmp_path / "cache" / "edgeship" / "inductor" and os.environ[CACHE_ENV] == str(folder)
    assert stat.S_IMODE(os.lstat(folder).st_mode) == 0o700


def test_aoti_inductor_cache_set_by_the_user_is_used_only_when_it_is_theirs_alone(monkeypatch, tmp_path) -> None:
    mine = tmp_path / "bench-model" / "inductor-cache"   # as benchmarks/bench.py sets it: made here, 0700
    monkeypatch.setenv(CACHE_ENV, str(mine))
    assert aoti_lower.private_inductor_cache() == mine and stat.S_IMODE(os.lstat(mine).st_mode) == 0o700
    theirs = _theirs(tmp_path / "torchinductor_root")
    monkeypatch.setenv(CACHE_ENV, str(theirs))
    with pytest.raises(OutputError, match=f"Inductor's cache folder \\(\\${CACHE_ENV}\\) {theirs}: is owned by nobody"):
        aoti_lower.private_inductor_cache()


def test_aoti_compiles_without_precompiled_headers(monkeypatch) -> None:
    monkeypatch.setattr("torch._inductor.cpu_vec_isa.pick_vec_isa", lambda: None)  # it compiles test programs
    configs, _, _ = aoti_build.inductor_configs({})
    assert configs["aot_inductor.precompile_headers"] is False and configs["cpp_cache_precompile_headers"] is False


def test_aoti_device_compile_uses_a_new_private_cache_or_refuses_an_open_one(monkeypatch, tmp_path) -> None:
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    theirs = _theirs(Path(default_cache_dir()))
    monkeypatch.setenv(CACHE_ENV, str(theirs))   # as torch sets it: not the user's choice
    with aoti_build.private_cache() as folder:
        assert Path(folder).parent == tmp_path and folder != str(theirs) and os.environ[CACHE_ENV] == folder
        assert stat.S_IMODE(os.lstat(folder).st_mode) == 0o700
    assert not os.path.exists(folder) and os.environ[CACHE_ENV] == str(theirs)
    chosen = _theirs(tmp_path / "chosen")
    monkeypatch.setenv(CACHE_ENV, str(chosen))   # a user's choice, open to everyone
    with pytest.raises(RuntimeError, match="is owned by uid .*, not by you"):
        with aoti_build.private_cache():
            pass


# Lowers the tiny project's model with the aoti backend, as the pipeline does (tests/lowering/conftest.py).
COMPILE = """
import sys
from pathlib import Path
from edgeship.backends.base import LowerRequest
from edgeship.backends.registry import BACKENDS
from edgeship.lowering.capture import Capturer
from edgeship.model import load_model
from edgeship.profile import Variant
from edgeship.spec import load_spec

backend = BACKENDS["aoti"]
options = backend.parse_options({})
captured = Capturer(load_model(load_spec(sys.argv[1]))).get("export", backend.wants_dynamic_batch(options))
variant = Variant(name="aoti-fp32", backend="aoti", precision="fp32", options={})
print(backend.lower(LowerRequest(captured, variant, options, Path(sys.argv[2]))).path)
"""


@pytest.mark.slow
def test_aoti_build_leaves_a_tmp_torchinductor_folder_another_user_made_alone(tiny_project, tmp_path) -> None:
    """A real compile in a process whose temporary folder holds another user's ``torchinductor_<user>``:
    nothing is read from it or written to it, and the package's compile lines name the user's cache."""
    if system.toolchain():
        pytest.skip(system.toolchain())
    temp = tmp_path / "tmp"
    theirs = _theirs(temp / f"torchinductor_{getpass.getuser()}")
    env = {k: v for k, v in os.environ.items() if k != CACHE_ENV}
    env.update(TMPDIR=str(temp), XDG_CACHE_HOME=str(tmp_path / "cache"), PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", COMPILE, str(tiny_project / "model.toml"),
                           str(tmp_path / "out" / "model.pt2")], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    package = Path(proc.stdout.strip().splitlines()[-1])
    assert list(theirs.iterdir()) == []
    with zipfile.ZipFile(package) as archive:
        wrapper = next(archive.read(n).decode() for n in archive.namelist() if n.endswith(".wrapper.cpp"))
    lines = [line for line in wrapper.splitlines() if line.startswith("// g++")]
    assert lines and all(str(tmp_path / "cache" / "edgeship" / "inductor") in line for line in lines)
    assert not any(str(theirs) in line or "-include" in line.split() for line in lines), json.dumps(lines)[:2000]
