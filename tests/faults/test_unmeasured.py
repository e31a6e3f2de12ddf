"""A runner that ends without a result (a real process killed by a real signal, or stopped at its
deadline) was not measured: the reason is said in words and the variant fails its gates; it never
passes on missing figures."""
from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from edgeship.devices.base import JobResult, RunnerLost, exit_words
from edgeship.pipeline.validate import check_device_gates, measure
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
