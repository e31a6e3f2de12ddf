"""A runner that ends without a result (a real process killed by a real signal, or stopped at its
deadline) was not measured: the reason is said in words and the variant fails its gates; it never
passes on missing figures."""
from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from edgeship.devices.base import JobResult, RunnerLost, exit_words
from edgeship.pipeline.gates import check_device_gates
from edgeship.pipeline.validate import measure
from edgeship.profile import Gates, LatencySettings
from tests.pipeline.test_validate import ScriptedDevice, job


@pytest.mark.parametrize(("sig", "words"), [
    (signal.SIGKILL, "runner killed by signal 9 (SIGKILL; out of memory?) without a result"),
    (signal.SIGTERM, "runner killed by signal 15 (SIGTERM) without a result"),
    (signal.SIGSEGV, "runner killed by signal 11 (SIGSEGV) without a result"),
])
def test_faults_a_runner_killed_by_a_signal_is_named_and_fails_the_variant(sig, words, tmp_path) -> None:
    proc = subprocess.run([sys.executable, "-c", f"import os; print('loading'); os.kill(os.getpid(), {int(sig)})"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == -sig
    with pytest.raises(RunnerLost) as lost:
        JobResult.read_from(tmp_path, proc.returncode, proc.stdout)
    assert str(lost.value) == f"{words}: loading"
    m = measure(ScriptedDevice([lost.value], [1.0]), job(), LatencySettings(), tmp_path, sleep=lambda s: None)
    assert m.latency.p50_ms is None and m.latency.run_error == str(lost.value)
    gates = check_device_gates(Gates(min_sqnr_db=20.0), None, [m.latency])
    assert not gates.passed and gates.failures == [f"did not run on board: {words}: loading"]


def test_exit_words_reads_a_shells_status_and_a_plain_exit_code() -> None:
    assert exit_words(137) == "exited 137 (signal 9, SIGKILL; out of memory?, as a shell reports it)"
    assert exit_words(1) == "exited 1" and exit_words(0) == "exited 0" and exit_words(255) == "exited 255"


def test_faults_a_runner_that_printed_nothing_says_so(tmp_path) -> None:
    with pytest.raises(RunnerLost, match=r"^runner exited 0 without a result \(it printed nothing\)$"):
        JobResult.read_from(tmp_path, 0, "")


def test_faults_the_real_runner_stopped_at_its_deadline_fails_the_variant(tmp_path) -> None:
    """edgeship's own runner on this machine, given less time than Python takes to start it."""
    from dataclasses import replace

    from edgeship.devices.local import LocalDevice

    host = LocalDevice("host")
    m = measure(host, replace(job(), timeout_s=0.01), LatencySettings(), tmp_path, sleep=lambda s: None)
    reason = "runner did not finish within 0.01 s (latency.timeout_s) and was stopped"
    assert m.latency.p50_ms is None and m.latency.run_error == reason and m.latency.notes == [f"not measured: {reason}"]
    assert check_device_gates(Gates(), None, [m.latency]).failures == [f"did not run on host: {reason}"]


def test_faults_a_device_that_gave_no_result_fails_the_variant_with_its_reason() -> None:
    """A device lost after its retries, or kept busy by another build past the lock's timeout: no
    figure, no runner error; the variant fails on that device instead of passing on nothing."""
    from edgeship.results import Latency

    busy = Latency(device="board", runtime="onnxruntime", warmup=2, iterations=10, notes=[
        "not measured: device ssh-board stayed busy for 3600 s (held by pid 7 on lab, for 3700 s)"])
    gates = check_device_gates(Gates(min_sqnr_db=20.0), None, [busy])
    assert not gates.passed and gates.failures == [
        "not measured on board: device ssh-board stayed busy for 3600 s (held by pid 7 on lab, for 3700 s)"]
    bare = Latency(device="board", runtime="onnxruntime", warmup=2, iterations=10)
    assert check_device_gates(Gates(), None, [bare]).failures == ["not measured on board: no result came back"]


def test_faults_timings_without_outputs_never_pass_an_accuracy_gate() -> None:
    """A device that timed the artifact but returned no outputs (a native benchmark binary): its
    accuracy gates cannot be judged, so they fail; a profile with only a latency gate passes."""
    from edgeship.results import Latency

    timed = Latency(device="phone", runtime="executorch", warmup=2, iterations=10, p50_ms=1.5, mean_ms=1.6)
    failed = check_device_gates(Gates(min_sqnr_db=20.0), None, [timed])
    assert not failed.passed and failed.failures == [
        "accuracy not computed: no device returned outputs to compare with the float model's (accuracy gates "
        "not checked)"]
    assert check_device_gates(Gates(max_p50_ms=5.0), None, [timed]).passed


@pytest.mark.slow
def test_faults_a_runner_killed_mid_build_fails_its_variant_and_the_others_are_measured(tmp_path) -> None:
    """A real build; its ONNX Runtime runner (a real process) is killed with SIGKILL from outside, as
    the OOM killer would: that variant fails with the reason in words, the OpenVINO one is still
    measured and passes, and the build exits 3 with results.json written."""
    import json
    import os
    import time

    import psutil

    from tests.conftest import REPO, make_tiny_project, write_profile

    project = make_tiny_project(tmp_path / "tiny")
    profile = write_profile(tmp_path, '[[variants]]\nname = "ort"\nbackend = "onnx"\n\n'
                                      '[[variants]]\nname = "ov"\nbackend = "openvino"\n')
    profile.write_text(profile.read_text().replace("iterations = 10", "iterations = 20000"))
    out = tmp_path / "out"
    env = {**os.environ, "EDGESHIP_CACHE_DIR": str(tmp_path / "cache")}
    build = subprocess.Popen([sys.executable, "-m", "edgeship", "build", "--target", str(profile), "--model",
                              str(project / "model.toml"), "--out", str(out), "--db", f"sqlite:///{tmp_path / 'r.db'}"],
                             cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    job = str(out / ".work" / "ort" / "host" / "job.json")
    killed, deadline = None, time.monotonic() + 300
    while killed is None and build.poll() is None and time.monotonic() < deadline:
        for child in psutil.Process(build.pid).children(recursive=True):
            try:
                if job in child.cmdline():
                    child.kill()
                    killed = child.pid
            except psutil.Error:
                continue
        time.sleep(0.02)
    _, err = build.communicate(timeout=600)
    assert killed is not None, "the ort runner was never seen"
    assert build.returncode == 3 and "Traceback" not in err, err[-3000:]
    rows = {r["name"]: r for r in json.loads((out / "results.json").read_text())["variants"]}
    ort, ov = rows["ort"], rows["ov"]
    assert not ort["gates"]["passed"] and ort["latency"][0]["p50_ms"] is None
    assert ort["gates"]["failures"][0].startswith(
        "did not run on host: runner killed by signal 9 (SIGKILL; out of memory?) without a result")
    assert ov["gates"]["passed"] and ov["latency"][0]["p50_ms"] > 0 and rows["eager"]["latency"][0]["p50_ms"] > 0
    assert "1 variant(s) failed validation: ort" in " ".join(err.split())


def test_faults_a_variant_no_device_here_can_run_reads_not_measured_and_the_build_passes(tmp_path, capsys) -> None:
    """A Core ML variant (built and checked here; its prediction needs macOS) beside an ONNX one: the
    build exits 0, and the Core ML row's gate column reads "not measured" in the console table,
    report.md and results.csv (``gates.checked`` false in results.json), never "pass"."""
    import csv
    import json

    from edgeship.cli import main
    from tests.conftest import make_tiny_project, write_profile

    project = make_tiny_project(tmp_path / "tiny")
    profile = write_profile(tmp_path, '[[variants]]\nname = "ort"\nbackend = "onnx"\n\n'
                                      '[[variants]]\nname = "coreml"\nbackend = "coreml"\nprecision = "fp32"\n')
    out = tmp_path / "out"
    capsys.readouterr()
    code = main(["build", "--target", str(profile), "--model", str(project / "model.toml"), "--out", str(out),
                 "--db", f"sqlite:///{tmp_path / 'r.db'}"])
    table = capsys.readouterr().out
    assert code == 0
    rows = {r["name"]: r for r in json.loads((out / "results.json").read_text())["variants"]}
    assert rows["coreml"]["gates"] == {"passed": True, "failures": [], "checked": False}
    assert not rows["coreml"]["latency"]
    assert rows["ort"]["gates"]["checked"] and rows["ort"]["gates"]["passed"]
    line = next(ln for ln in table.splitlines() if "coreml" in ln and "fp32" in ln)
    assert line.rstrip(" │").endswith("not measured") and "pass" not in line
    md = next(ln for ln in (out / "report.md").read_text().splitlines() if ln.startswith("| coreml |"))
    assert [c.strip() for c in md.split("|")][-3] == "not measured"  # the gates column, then "built in"
    with open(out / "results.csv", newline="") as f:
        assert {r["variant"]: r["gates_passed"] for r in csv.DictReader(f)}["coreml"] == ""
