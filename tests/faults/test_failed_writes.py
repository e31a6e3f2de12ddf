"""A write the machine refuses ends the build cleanly: a real ``edgeship build`` process under a file
size limit (RLIMIT_FSIZE, what ``ulimit -f`` sets; Python ignores SIGXFSZ, so a write past it fails
with EFBIG as on a full disk) exits 1 with one line naming the path and the reason, no traceback;
the finished build in the folder stays as it was, the stage cache keeps no partial entry, and the
next build with room succeeds. Any other OSError that ends a command is one line too, exit 1."""
from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from edgeship.cache import entry_damage
from edgeship.pipeline.output import LOCK, WORK
from tests.conftest import REPO
from tests.faults.test_one_build_per_folder import files, finish, project, whole  # noqa: F401 - project: a fixture


def build_limited(model: Path, profile: Path, out: Path, limit: int | None) -> subprocess.Popen:
    """``edgeship build`` as a process whose files (and its runners') may not grow past ``limit`` bytes."""
    def cap() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    env = {**os.environ, "EDGESHIP_CACHE_DIR": str(profile.parent / "cache")}
    return subprocess.Popen([sys.executable, "-m", "edgeship", "build", "--target", str(profile), "--model",
                             str(model), "--out", str(out), "--db", f"sqlite:///{profile.parent / 'r.db'}"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=cap)



@pytest.mark.slow
def test_faults_a_file_size_limit_exits_1_with_one_line_and_loses_nothing(project, tmp_path) -> None:  # noqa: F811
    model, profile = project
    out = tmp_path / "out"
    code, err = finish(build_limited(model, profile, out, None))
    assert code == 0, err[-2000:]
    before = files(out)
    cache = profile.parent / "cache"
    for entry in [p for p in cache.glob("*/*") if p.is_dir()]:  # cold: the stage cache must be written again
        os.rename(entry, entry.with_name("." + entry.name + ".moved.tmp"))
    code, err = finish(build_limited(model.parent / "model_b.toml", profile, out, 40_000))
    assert code == 1 and "Traceback" not in err, err[-3000:]
    lines = [line for line in err.split("edgeship: error: ")[1:]]
    assert len(lines) == 1 and "the file size limit was reached while writing it" in lines[0], err[-3000:]
    assert files(out) == before and not (out / WORK).exists() and not (out / LOCK).exists()
    assert not [p for p in cache.rglob("*.tmp") if ".moved" not in p.name]  # no temporary entry left
    assert all(entry_damage(p) is None for p in cache.glob("*/*") if p.is_dir() and not p.name.startswith("."))
    code, err = finish(build_limited(model.parent / "model_b.toml", profile, out, None))
    assert code == 0, err[-2000:]
    whole(out)


def test_faults_any_os_error_that_ends_a_command_is_one_line_exit_1(monkeypatch, capsys, tmp_path) -> None:
    """An OSError no stage turned into its own message (EACCES, EROFS, EIO on some write): the CLI says
    which path and what the OS said, exit 1, no traceback (root cannot be refused a write here, so
    the error is raised where the build starts)."""
    import errno

    from edgeship import api
    from edgeship.cli import main

    def refused(*args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(tmp_path / "out" / "results.json"))
    monkeypatch.setattr(api, "build", refused)
    assert main(["build", "--target", "host"]) == 1
    err = capsys.readouterr().err
    assert err == (f"edgeship: error: {tmp_path / 'out' / 'results.json'}: Permission denied (errno 13: the "
                   "operating system refused it)\n")
