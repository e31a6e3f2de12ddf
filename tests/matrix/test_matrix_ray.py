"""edgeship matrix on a real two-node Ray cluster on this machine (ray.cluster_utils: a head and a
second node, each its own raylet and workers), each node owning one of two real sshd-on-loopback
devices, with every row going into a real PostgreSQL: each measurement runs on the node that owns
its device, never two at once on one device, results identical to a run without Ray, and a node
killed mid-run leaves the other results intact and its failures recorded."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from tests import system
from tests.devices import sshd as sshd_helper
from tests.matrix.test_matrix import ONNX, OPENVINO

ray = pytest.importorskip("ray", reason=system.reason("python", "ray is not installed (make setup)"))
pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture(scope="module")
def boards(tmp_path_factory):
    """Two sshd servers on loopback (two devices), and a devices.toml naming them board-a and board-b."""
    if system.openssh():
        pytest.skip(system.openssh())
    servers = [sshd_helper.start(tmp_path_factory.mktemp(f"sshd-{n}")) for n in "ab"]
    folder = tmp_path_factory.mktemp("lab")
    devices = folder / "devices.toml"
    devices.write_text("".join(s.device_toml(f"board-{n}") for s, n in zip(servers, "ab")))
    yield devices
    for server in servers:
        server.stop()


@pytest.fixture
def cluster():
    """A head node owning device:board-a and a second node owning device:board-b, one CPU each."""
    from ray.cluster_utils import Cluster

    # A dead node is noticed after 3 missed health checks 0.5 s apart (Ray's defaults: 5, 3 s apart).
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"device:board-a": 1}, "include_dashboard": False,
        "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 3}})
    second = cluster.add_node(num_cpus=1, resources={"device:board-b": 1})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    yield cluster, second
    ray.shutdown()
    cluster.shutdown()


def matrix_file(folder: Path, tiny_project: Path, devices: Path, second_model: Path) -> Path:
    (folder / "onnxonly.toml").write_text(ONNX)
    (folder / "openvino.toml").write_text(OPENVINO)
    path = folder / "matrix.toml"
    path.write_text(f'models = ["{tiny_project / "model.toml"}", "{second_model}"]\n'
                    'targets = ["onnxonly.toml", "openvino.toml"]\ndevices = ["board-a", "board-b"]\n'
                    f'devices_file = "{devices}"\nretries = 1\n')
    return path


def second_model(tiny_project: Path) -> Path:
    """The tiny model under another name: the matrix's second model."""
    text = (tiny_project / "model.toml").read_text().replace('name = "tiny"', 'name = "tiny2"')
    path = tiny_project / "model2.toml"
    path.write_text(text)
    return path


def by_device(out: Path) -> list[dict]:
    rows = []
    for results in sorted(out.glob("*/*/results.json")):
        doc = json.loads(results.read_text())
        for variant in doc["variants"]:
            for lat in variant["latency"]:
                rows.append({"build": str(results.parent.relative_to(out)), "variant": variant["name"],
                             "sha256": variant.get("sha256"), "device": lat["device"], "node": lat.get("node"),
                             "interval": lat.get("node_interval"), "p50": lat.get("p50_ms"),
                             "sqnr": (lat.get("accuracy") or {}).get("sqnr_db"), "notes": lat.get("notes")})
    return rows


def test_the_matrix_on_two_ray_nodes_measures_each_device_on_its_node_and_matches_a_local_run(
        cluster, boards, tiny_project, tmp_path, postgres, monkeypatch) -> None:
    from edgeship import api
    from edgeship.store import ResultsStore

    _, second = cluster
    path = matrix_file(tmp_path, tiny_project, boards, second_model(tiny_project))
    db = postgres.url()
    began = time.perf_counter()
    run = api.matrix(path, tmp_path / "ray", ray="auto", db=db, quiet=True)
    ray_seconds = time.perf_counter() - began
    assert [r.state for r in run.results] == ["done"] * 4, [(r.model, r.target, r.error) for r in run.results]
    rows = by_device(tmp_path / "ray")
    measured = [r for r in rows if r["p50"] is not None]
    assert len(measured) == 8  # 4 builds x 1 variant x 2 boards (eager runs only on a local device)
    nodes = {d: {r["node"].split("Ray node ")[1].rstrip(")") for r in measured if r["device"] == d}
             for d in ("board-a", "board-b")}
    assert nodes["board-b"] == {second.node_id[:12]} and len(nodes["board-a"]) == 1
    assert nodes["board-a"] != nodes["board-b"]
    for device in ("board-a", "board-b"):  # never two jobs on one device at once, across the cluster
        spans = sorted(tuple(r["interval"]) for r in measured if r["device"] == device)
        assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:])), spans
    stored = ResultsStore(db).rows()
    assert len([r for r in stored if r["p50_ms"] is not None]) == 8
    assert {r["node"] for r in stored if r["p50_ms"] is not None} == {m["node"] for m in measured}
    # The same matrix without Ray, built cold here (its own stage cache): the same artifacts, the same accuracy.
    monkeypatch.setenv("EDGESHIP_CACHE_DIR", str(tmp_path / "cold-cache"))
    began = time.perf_counter()
    local = api.matrix(path, tmp_path / "local", db=postgres.url(), quiet=True)
    local_seconds = time.perf_counter() - began
    assert [r.state for r in local.results] == ["done"] * 4
    key = lambda r: (r["build"], r["variant"], r["device"])  # noqa: E731
    here = {key(r): r for r in by_device(tmp_path / "local")}
    for r in rows:
        other = here[key(r)]
        assert r["sha256"] == other["sha256"] and r["sqnr"] == other["sqnr"], (r, other)
    overhead = {r.model + "/" + r.target: r.timings for r in run.results}
    print(f"matrix: Ray {ray_seconds:.1f} s, local {local_seconds:.1f} s; per build {overhead}")


def test_killing_a_node_mid_run_keeps_the_other_results_and_records_the_failures(
        cluster, boards, tiny_project, tmp_path, postgres) -> None:
    from edgeship.store import ResultsStore

    head, second = cluster
    path = matrix_file(tmp_path, tiny_project, boards, second_model(tiny_project))
    db = postgres.url()
    lines: list[str] = []
    done = threading.Event()

    def say(text: str) -> None:
        lines.append(text)
        if ": done" in text or "failed" in text:
            done.set()
    from edgeship.matrix.run import run_matrix
    from edgeship.matrix.spec import load_matrix

    result: dict = {}

    def go() -> None:
        try:
            result["run"] = run_matrix(load_matrix(path), tmp_path / "out", ray="auto", db=db, say=say)
        except BaseException as e:  # noqa: BLE001 - the test reports it
            result["error"] = e
    worker = threading.Thread(target=go)
    worker.start()
    assert done.wait(300), lines
    head.remove_node(second, allow_graceful=False)  # the node owning board-b dies
    worker.join(600)
    assert "error" not in result, result.get("error")
    assert not worker.is_alive(), lines
    run = result["run"]
    rows = by_device(tmp_path / "out")
    a = [r for r in rows if r["device"] == "board-a"]
    b = [r for r in rows if r["device"] == "board-b"]
    assert len(a) == 4 and all(r["p50"] is not None for r in a), a  # every board-a result is intact
    lost = [r for r in b if r["p50"] is None]
    assert lost and all(any("no live Ray node has device:board-b" in n or "Ray lost" in n for n in r["notes"])
                        for r in lost), lost
    assert len(run.results) == 4 and {r.state for r in run.results} <= {"done", "gates failed"}
    stored = ResultsStore(db).rows()
    assert len([r for r in stored if r["device"] == "board-a" and r["p50_ms"] is not None]) == 4
    assert any(r["device"] == "board-b" and r["p50_ms"] is None and r["notes"] for r in stored)


def test_ctrl_c_stops_the_matrix_and_its_builds_on_the_cluster(tiny_project, tmp_path) -> None:
    """SIGINT to ``edgeship matrix --ray ADDRESS`` while a build task's runner times on a cluster node:
    the driver exits 130 at once, and the runner that task started (under the node's raylet, not the
    driver) is gone within seconds. edgeship cancels nothing itself: Ray ends a job's tasks when its
    driver exits, and a worker that exits kills the processes it started
    (RAY_kill_child_processes_on_worker_exit, on by default); this test keeps both true."""
    import os
    import signal
    import subprocess
    import sys

    import psutil
    from ray.cluster_utils import Cluster

    from tests.conftest import REPO
    from tests.matrix.test_matrix import ONNX

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False})
    try:
        (tmp_path / "onnxonly.toml").write_text("[latency]\niterations = 1000000\n" + ONNX)  # the most allowed
        matrix = tmp_path / "matrix.toml"
        matrix.write_text(f'models = ["{tiny_project / "model.toml"}"]\ntargets = ["onnxonly.toml"]\n'
                          'devices = ["host"]\n')
        out = tmp_path / "out"
        proc = subprocess.Popen([sys.executable, "-m", "edgeship", "matrix", str(matrix), "--out", str(out), "--ray",
                                 cluster.address, "--db", f"sqlite:///{tmp_path / 'r.db'}"], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "EDGESHIP_CACHE_DIR": str(tmp_path / "cache")})

        def runners() -> list[psutil.Process]:
            found = []
            for p in psutil.process_iter(["cmdline"]):
                line = " ".join(p.info["cmdline"] or [])
                if "edgeship-matrix-" in line and line.endswith("job.json"):
                    found.append(p)
            return found
        deadline = time.monotonic() + 300
        while not runners():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no runner started on the cluster"
            time.sleep(0.2)
        started = runners()
        assert all(proc.pid not in [a.pid for a in r.parents()] for r in started)  # the node's, not the driver's
        time.sleep(1.0)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        seconds = time.monotonic() - sent
        assert proc.returncode == 130 and "edgeship: interrupted" in err and "Traceback" not in err, err[-2000:]
        gone, alive = psutil.wait_procs(started, timeout=30)
        print(f"\nmatrix on Ray, SIGINT: exit 130 {seconds:.2f} s after the signal; the node's runner gone "
              f"{time.monotonic() - sent:.2f} s after it")
        assert not alive, [" ".join(p.cmdline()) for p in alive]
        assert not list(out.glob("*/*/results.json"))
    finally:
        cluster.shutdown()
