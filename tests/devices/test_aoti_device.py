"""An aoti variant compiled on the device: `edgeship build` ships the exported program to an ssh device
(a real sshd on 127.0.0.1), whose runner compiles it there with aoti_build.py before timing it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import write_profile
from tests.devices.test_ssh_build import edgeship

VARIANTS = """
[[variants]]
name = "aoti-dev"
backend = "aoti"
options = { compile_on = "device", threads = 1 }
"""


@pytest.mark.slow
def test_build_compiles_an_aoti_variant_on_the_ssh_device_and_notes_it_in_the_latency_row(
        sshd, tiny_project, tmp_path, lock_home) -> None:
    devices = tmp_path / "devices.toml"
    devices.write_text(sshd.device_toml("board"))
    profile = write_profile(tmp_path, VARIANTS)
    env = {"PATH": "/usr/bin:/bin", "XDG_CACHE_HOME": str(lock_home), "HOME": str(Path.home())}
    done = edgeship("build", "--target", str(profile), "--model", str(tiny_project / "model.toml"),
                    "--out", str(tmp_path / "out"), "--devices", str(devices), "--device", "board",
                    cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    row = next(r for r in json.loads((tmp_path / "out" / "results.json").read_text())["variants"]
               if r["name"] == "aoti-dev")
    assert row["lowering"]["details"]["compile_on"] == "device"
    (board,) = row["latency"]
    assert board["device"] == "board" and board["p50_ms"] > 0
    assert any(n.startswith("package compiled on this device in ") for n in board["notes"]), board["notes"]
    assert board["accuracy"]["sqnr_db"] > 60 and row["gates"]["passed"]
