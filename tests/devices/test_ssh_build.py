"""A whole build measured on this machine and on an ssh device (a real sshd on 127.0.0.1)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from edgeship.store import ResultsStore
from tests.conftest import write_profile

# ONNX: its export is byte-for-byte repeatable, so --resume can recognise the artifact. (A .ptl is
# not: torch writes a random serialization_id into every file, so a resumed build measures it again.)
VARIANTS = """
[[variants]]
name = "ort"
backend = "onnx"
"""


def edgeship(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgeship", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900, env=env)


def test_build_measures_on_host_and_ssh_device_and_resume_measures_only_whats_missing(
        sshd, tiny_project, tmp_path, lock_home) -> None:
    devices = tmp_path / "devices.toml"
    devices.write_text(sshd.device_toml("board"))
    profile = write_profile(tmp_path, VARIANTS)
    base = ["build", "--target", str(profile), "--model", str(tiny_project / "model.toml"),
            "--out", str(tmp_path / "out"), "--devices", str(devices)]
    env = {"PATH": "/usr/bin:/bin", "XDG_CACHE_HOME": str(lock_home), "HOME": str(Path.home())}
    first = edgeship(*base, "--device", "host", cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    host_first = {r["name"]: r["latency"][0]["measured_at"] for r in _results(tmp_path)["variants"]}

    second = edgeship(*base, "--device", "host", "--device", "board", "--resume", cwd=tmp_path, env=env)
    assert second.returncode == 0, second.stderr[-3000:]
    said = " ".join(second.stderr.split())  # progress lines wrap at the console's width
    assert "reused 2 of 3 measurement(s)" in said and "measuring 1 not measured there before" in said
    rows = _results(tmp_path)["variants"]
    for row in rows:
        host = row["latency"][0]
        assert host["device"] == "host" and host["measured_at"] == host_first[row["name"]], row
    for row in rows[1:]:
        host, board = row["latency"]
        assert board["device"] == "board" and board["p50_ms"] > 0 and board["attempts"] == 1
        assert board["accuracy"] == host["accuracy"] and board["accuracy"]["sqnr_db"] > 60
        assert row["gates"]["passed"] and board["inputs_sha256"] == host["inputs_sha256"]
    assert "board: not measured here: the eager float model runs only on the host" in " ".join(rows[0]["notes"])

    stored = ResultsStore(f"sqlite:///{tmp_path / 'artifacts' / 'results.db'}").rows(model="tiny")
    pairs = sorted((r["variant"], r["device"]) for r in stored)
    assert pairs == [("eager", "host"), ("ort", "board"), ("ort", "host")]
    assert len({r["build_id"] for r in stored}) == 2  # host rows from the first build, board rows from the second


def _results(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "out" / "results.json").read_text())
