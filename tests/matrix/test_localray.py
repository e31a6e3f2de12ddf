"""The local Ray cluster of ``edgeship matrix --ray auto`` (edgeship/matrix/localray.py): on
127.0.0.1 only, with Ray's token authentication and a token made for the run, even where the
environment turns Ray's authentication off; its session folder private and gone with the run."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import system

ray = pytest.importorskip("ray", reason=system.reason("python", "ray is not installed (make setup)"))

LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


@pytest.fixture
def fake_ray(monkeypatch):
    """ray.init and ray.shutdown recorded instead of run; what the environment held at ray.init."""
    from edgeship.matrix.localray import reload_ray_settings

    calls: list[dict] = []
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(
        {"env": dict(os.environ), "cwd": os.getcwd(), "cwd_files": os.listdir("."), **kwargs}))
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append({"shutdown": True}))
    monkeypatch.setattr(ray.util, "get_node_ip_address", lambda: "127.0.0.1")
    yield calls
    monkeypatch.undo()
    reload_ray_settings()  # Ray's cached settings as this process's environment has them again


def test_local_cluster_takes_a_new_token_and_loopback_when_the_environment_turns_authentication_off(
        fake_ray, monkeypatch, tmp_path) -> None:
    from edgeship.matrix.localray import local_cluster

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "another-clusters-token"))
    folders = []
    for _ in range(2):
        with local_cluster({"device:board": 1}):
            folder = Path(fake_ray[-1]["_temp_dir"]).parent
            folders.append((folder, folder.stat().st_mode & 0o777))
    first, second = (c for c in fake_ray if "env" in c)
    assert first["env"]["RAY_AUTH_MODE"] == "token" and "RAY_AUTH_TOKEN_PATH" not in first["env"]
    assert re.fullmatch("[0-9a-f]{64}", first["env"]["RAY_AUTH_TOKEN"])
    assert first["env"]["RAY_AUTH_TOKEN"] != second["env"]["RAY_AUTH_TOKEN"]
    assert first["env"]["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0" and first["include_dashboard"] is False
    assert first["resources"] == {"device:board": 1}
    assert [mode for _, mode in folders] == [0o700, 0o700] and not any(f.exists() for f, _ in folders)
    assert len([c for c in fake_ray if "shutdown" in c]) == 2
    assert os.environ["RAY_AUTH_MODE"] == "disabled" and "RAY_AUTH_TOKEN" not in os.environ  # as it was
    assert os.environ["RAY_AUTH_TOKEN_PATH"] == str(tmp_path / "another-clusters-token")


def test_ray_session_starts_ray_outside_the_working_folder_so_workers_import_nothing_from_it(
        fake_ray, monkeypatch, tmp_path) -> None:
    """ray.init puts its working folder on every worker's sys.path (ahead of the standard library)."""
    from edgeship.matrix.run import ray_session

    (tmp_path / "platform.py").write_text("raise SystemExit('imported from the working folder')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    matrix = SimpleNamespace(devices=["host"])  # what ray_session reads of a Matrix
    for address in ("auto", "ray://lab:10001"):
        with ray_session(address, matrix):
            assert os.getcwd() == str(tmp_path)
    inits = [c for c in fake_ray if "env" in c]
    assert len(inits) == 2
    assert all(c["cwd"] != str(tmp_path) and c["cwd_files"] == [] for c in inits)
    assert os.getcwd() == str(tmp_path)


def test_local_cluster_is_stopped_and_refused_when_ray_puts_it_on_another_address(fake_ray, monkeypatch) -> None:
    from edgeship.matrix.localray import LocalClusterError, local_cluster

    monkeypatch.setattr(ray.util, "get_node_ip_address", lambda: "192.0.2.2")
    with pytest.raises(LocalClusterError, match=r"came up on 192\.0\.2\.2, not on 127\.0\.0\.1 only"):
        with local_cluster({}):
            pytest.fail("the matrix ran on a cluster reachable from the network")
    assert fake_ray[-1] == {"shutdown": True}
    assert LocalClusterError.exit_code == 1


# ---- a real run --------------------------------------------------------------------------------

def listeners(tree: list) -> list[tuple[str, str, int]]:
    """(process name, address, port) of every listening TCP socket and bound UDP socket in ``tree``."""
    import psutil

    found = []
    for proc in tree:
        try:
            name, connections = proc.name(), proc.net_connections(kind="inet")
        except psutil.Error:  # a worker that ended meanwhile
            continue
        found += [(name, c.laddr.ip, c.laddr.port) for c in connections
                  if c.status == psutil.CONN_LISTEN or (c.type == socket.SOCK_DGRAM and not c.raddr)]
    return found


def driver_without_token(address: str, home: Path) -> subprocess.CompletedProcess:
    """A Ray driver of another user of the machine: no token in its environment or its home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(HOME=str(home), RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")  # 127.0.0.1 taken as given
    code = (f"import ray; ray.init(address={address!r}, logging_level='ERROR'); "
            "print('RAN AS', ray.get(ray.remote(lambda: __import__('os').getuid()).remote()))")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180)


def routable_addresses() -> list[str]:
    import psutil

    return [a.address for addrs in psutil.net_if_addrs().values() for a in addrs
            if a.family == socket.AF_INET and not a.address.startswith("127.")]


@pytest.mark.slow
def test_local_cluster_of_a_matrix_run_listens_on_loopback_only_and_refuses_a_driver_without_its_token(
        tiny_project, tmp_path) -> None:
    """``edgeship matrix --ray auto`` with RAY_AUTH_MODE=disabled in its environment; while its build's
    runner times: every socket of the run's processes (the driver, GCS, raylet, agents, workers) on
    loopback, none reachable at the machine's own address, and a driver without the token refused."""
    import psutil

    from tests.conftest import REPO
    from tests.matrix.test_matrix import ONNX

    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "slow.toml").write_text("[latency]\niterations = 1000000\n" + ONNX)  # a long timing
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(f'models = ["{tiny_project / "model.toml"}"]\ntargets = ["slow.toml"]\ndevices = ["host"]\n')
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RAY_")}, "RAY_AUTH_MODE": "disabled",
           "HOME": str(home), "EDGESHIP_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, "-m", "edgeship", "matrix", str(matrix), "--out", str(tmp_path / "out"),
                             "--ray", "auto", "--db", f"sqlite:///{tmp_path / 'r.db'}"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        driver = psutil.Process(proc.pid)
        deadline = time.monotonic() + 300
        while not any(p.name() == "raylet" for p in driver.children()) or not any(
                "job.json" in " ".join(p.cmdline()) for p in driver.children(recursive=True)):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the build's runner did not start"
            time.sleep(0.5)
        tree = [driver] + driver.children(recursive=True)
        found = listeners(tree)
        print("\n" + "\n".join(f"{name} {ip}:{port}" for name, ip, port in found))
        assert {"gcs_server", "raylet"} <= {name for name, _, _ in found} and len(found) >= 5, found
        assert all(ip in LOOPBACK for _, ip, _ in found), [f for f in found if f[1] not in LOOPBACK]
        for ip in routable_addresses()[:1]:  # nothing answers at the machine's own address
            for _, _, port in found:
                with pytest.raises(ConnectionRefusedError), socket.create_connection((ip, port), timeout=5):
                    pass
        gcs = next(port for name, _, port in found if name == "gcs_server")
        stranger = driver_without_token(f"127.0.0.1:{gcs}", home)
        assert stranger.returncode != 0 and "RAN AS" not in stranger.stdout, stranger.stdout
        assert "Authentication token is missing or incorrect" in stranger.stderr, stranger.stderr[-2000:]
        session = next(a.split("=", 1)[1] for p in driver.children() if p.name() == "raylet"
                       for a in p.cmdline() if a.startswith("--raylet_socket_name="))
        private = Path(session).parents[3]  # <private 0700>/ray/session_*/sockets/raylet
        assert private.stat().st_mode & 0o777 == 0o700 and private.name.startswith("edgeship-ray-"), session
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
    _, alive = psutil.wait_procs(tree[1:], timeout=30)
    assert not alive, [p.pid for p in alive]
    assert not private.exists() and not (home / ".ray").exists()  # nothing left, no token on disk
