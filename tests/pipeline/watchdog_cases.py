"""The stage watchdog in this process (as a program calling the API has it: no last resort that ends the
process): a stage past its limit is stopped with Stalled, which ``except Exception`` does not catch, at
the limit plus a fraction of a second; whose code it was in decides the exit code; a stage that catches
Stalled and goes on still fails; long stages say they are still running; limits grow with the model."""
from __future__ import annotations

import copy
import sys
import time

import pytest

from edgeship import stopping
from edgeship.errors import StageTimeout, UserCodeTimeout
from edgeship.pipeline import watchdog as wd
from edgeship.pipeline.watchdog import Limit, Stalled, UserCode, Watchdog
from edgeship.profile import Limits


def dog(limit_s: float = 0.5, said: list[str] | None = None) -> Watchdog:
    limits = Limits(reference_s=limit_s, lowering_s=limit_s)
    return Watchdog(limits, "p.toml", UserCode(), say=(said.append if said is not None else print))


def spin() -> None:
    """The model's forward that never returns (this file, not installed, is user code)."""
    while True:
        try:
            pass
        except Exception:  # what a model may do: Stalled is no Exception
            pass


def test_watchdog_stops_a_python_loop_at_its_limit_as_user_code() -> None:
    start = time.monotonic()
    with pytest.raises(Stalled) as caught, dog().bounded("evaluation data + float reference", "reference_s"):
        spin()
    assert time.monotonic() - start < 2.0
    stall = caught.value.stall
    assert stall.user_code and "watchdog_cases.py" in stall.where and "spin" in stall.where
    error = stall.error("the previous build in out is untouched")
    assert isinstance(error, UserCodeTimeout) and error.exit_code == 2
    assert str(error).startswith("the step 'evaluation data + float reference' did not finish within 0 s "
                                 "([limits] reference_s = 0.5 in p.toml)")
    assert str(error).endswith("Raise [limits] reference_s if it needs longer; the previous build in out is untouched")


def test_watchdog_stops_a_wait_in_edgeship_code_as_a_stage_timeout() -> None:
    with pytest.raises(Stalled) as caught, dog().bounded("lower x (onnx fp32)", "lowering_s"):
        stopping.pause(60)  # a wait in a system call, in edgeship's code: not the model's
    stall = caught.value.stall
    assert not stall.user_code and stall.where.startswith("threading.py:") and "called from threading.py" in stall.where
    assert isinstance(stall.error(), StageTimeout) and stall.error().exit_code == 3


def test_watchdog_fails_a_stage_that_caught_stalled_and_went_on() -> None:
    with pytest.raises(Stalled), dog().bounded("calibration data", "reference_s"):
        try:
            time.sleep(5)
        except KeyboardInterrupt:
            pass  # a model that swallows Ctrl-C


def test_watchdog_lets_a_stage_within_its_limit_be_and_restores_the_signal_handler() -> None:
    before = wd.signal.getsignal(wd.WAKE)
    with dog(limit_s=5).bounded("calibration data", "reference_s"):
        time.sleep(0.05)
    time.sleep(0.1)
    assert wd.signal.getsignal(wd.WAKE) == before


def test_watchdog_says_a_long_stage_is_still_running(monkeypatch) -> None:
    monkeypatch.setattr(wd, "HEARTBEAT_S", 0.2)
    said: list[str] = []
    with dog(limit_s=5, said=said).bounded("lower x (onnx fp32)", "lowering_s"):
        time.sleep(0.5)
    assert said[:2] == ["  ... lower x (onnx fp32): still running after 0 s (stopped at 5 s: [limits] lowering_s)"] * 2


def test_limit_grows_with_the_models_parameters() -> None:
    limit = Limit("s", "lowering_s", 300.0, 0.05, lambda: 11_700_000, "host.toml")
    assert limit.seconds() == pytest.approx(300 * 1.585)
    assert limit.described() == ("[limits] lowering_s = 300 in host.toml, x1.58 for the model's 11.7 M parameters "
                                 "(per_million_params = 0.05)")
    assert Limit("s", "lowering_s", 300.0, 0.05, lambda: None, "h").seconds() == 300.0
    assert Limit("s", "lowering_s", 86400.0, 10, lambda: 10**12, "h").seconds() == wd.MAX_S


def test_user_code_is_code_not_installed_and_the_modules_the_spec_names() -> None:
    class Grab:
        def __deepcopy__(self, memo: dict) -> object:
            return sys._getframe(1)  # copy.deepcopy's frame: the standard library's, called from this test
    frame = copy.deepcopy(Grab())
    user, where = UserCode().locate(frame)
    assert user and where.startswith("watchdog_cases.py:") and "(test_user_code_is_code_not_installed" in where
    user, where = UserCode(["copy:deepcopy"]).locate(frame)  # a model whose entry is an installed module
    assert user and where.startswith("copy.py:")


def test_watchdog_stacks_file_is_made_new_and_private_never_through_a_link(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(stopping, "is_installed", lambda: True)  # the command line's last resort is armed
    victim = tmp_path / "victim.txt"
    victim.write_text("precious data\n")
    stacks = tmp_path / ".work" / "watchdog-stacks.txt"
    stacks.parent.mkdir()
    made = Watchdog(Limits(lowering_s=30), "p.toml", UserCode(), stacks=tmp_path / "made" / "watchdog-stacks.txt")
    with made.bounded("lower x (onnx fp32)", "lowering_s"):
        mode = (tmp_path / "made" / "watchdog-stacks.txt").stat().st_mode & 0o777
    assert mode == 0o600 and not (tmp_path / "made" / "watchdog-stacks.txt").exists()
    stacks.symlink_to(victim)  # planted in --out/.work before the build
    with Watchdog(Limits(lowering_s=30), "p.toml", UserCode(), stacks=stacks).bounded("lower x", "lowering_s"):
        pass
    assert victim.read_text() == "precious data\n"


def test_watchdog_signal_handler_never_raises_in_a_stage_that_is_ending(monkeypatch) -> None:
    import contextlib

    watch = wd._Watch(Limit("s", "lowering_s", 1.0, 0.0, lambda: None, "p.toml"), dog())
    watch.stall = wd.Stall(watch.limit, 1.0, False, "here")
    monkeypatch.setattr(wd, "_active", [watch])

    @contextlib.contextmanager
    def entered():
        yield sys._getframe(1)  # contextlib's __enter__, as the main thread is when a stage's with ends
    with entered() as in_contextlib:
        pass
    in_watchdog = dog().bounded("s", "lowering_s").gen.gi_frame  # watchdog.py's bounded
    for frame in (in_contextlib, in_watchdog):
        try:
            wd._on_wake(wd.WAKE, frame)  # not raised: sent again 0.25 s later
        except Stalled:  # a KeyboardInterrupt: let out, it would stop the test session
            pytest.fail(f"Stalled raised in {frame.f_code.co_filename}")
    with pytest.raises(Stalled):
        wd._on_wake(wd.WAKE, sys._getframe())


def test_watchdog_disarms_its_last_resort_when_an_exception_cuts_a_stages_end_short(monkeypatch, tmp_path) -> None:
    armed: list[float] = []
    monkeypatch.setattr(wd, "faulthandler", type("F", (), {
        "dump_traceback_later": staticmethod(lambda timeout, **_: armed.append(timeout)),
        "cancel_dump_traceback_later": staticmethod(armed.clear)}))
    monkeypatch.setattr(stopping, "is_installed", lambda: True)
    ended: list[object] = []
    monkeypatch.setattr(wd._Watch, "_end_process", lambda self, stall: ended.append(stall))
    monkeypatch.setattr(wd, "GRACE_S", 0.2)
    body_done = {"now": False}

    def trace(frame, event, _arg):  # a signal's exception, at the first line of watchdog.py after the stage
        if body_done["now"] and event == "line" and frame.f_code.co_filename == wd.__file__:
            body_done["now"] = False
            raise KeyboardInterrupt("came as the stage ended")
        return trace
    before = sys.gettrace()
    sys.settrace(trace)
    try:
        with pytest.raises(KeyboardInterrupt), Watchdog(Limits(lowering_s=0.3), "p.toml", UserCode(),
                                                        stacks=tmp_path / "stacks.txt").bounded("s", "lowering_s"):
            body_done["now"] = True
    finally:
        sys.settrace(before)
    time.sleep(0.3 + 0.2 + 0.3)  # past the limit and the grace: a watch left armed would end the process now
    assert armed == [] and ended == [] and not (tmp_path / "stacks.txt").exists()


def test_watchdog_stops_only_what_its_stages_thread_started_when_builds_run_in_threads() -> None:
    import subprocess
    import threading

    ready, done, others, caught = threading.Event(), threading.Event(), [], []

    def other_build() -> None:  # another build's measuring thread: its runner starts while the stage runs
        ready.wait(5)
        others.append(subprocess.Popen(["sleep", "60"]))
        done.wait(10)

    def stage() -> None:
        try:
            with dog(limit_s=0.8).bounded("lower x (onnx fp32)", "lowering_s"):
                ready.set()
                subprocess.run(["sleep", "60"])  # its converter's helper, which never ends
        except Stalled as e:
            caught.append(e)
    threads = [threading.Thread(target=other_build), threading.Thread(target=stage)]
    for thread in threads:
        thread.start()
    threads[1].join(10)
    try:
        assert caught and others and others[0].poll() is None  # the stage stopped; the other build's runner runs
    finally:
        done.set()
        for process in others:
            process.kill()
            process.wait()
        threads[0].join()


def test_watchdog_lets_a_stage_that_makes_progress_run_past_its_limit() -> None:
    start = time.monotonic()
    with dog(limit_s=0.5).bounded("evaluation data + float reference", "reference_s", progress=True):
        for _ in range(12):  # 1.2 s of batches, each well within the limit
            time.sleep(0.1)
            stopping.progressed()
    assert time.monotonic() - start > 1.0


def test_watchdog_stops_a_stage_one_limit_after_its_last_progress_saying_so() -> None:
    start = time.monotonic()
    with pytest.raises(Stalled) as caught, dog(limit_s=1.0).bounded("evaluation data + float reference",
                                                                     "reference_s", progress=True):
        for _ in range(6):
            time.sleep(0.1)
            stopping.progressed()
        spin()  # a forward that never returns
    assert 1.5 < time.monotonic() - start < 2.6
    assert str(caught.value.stall.error()).startswith(
        "the step 'evaluation data + float reference' made no progress (no batch of data read or evaluated) for "
        "1 s ([limits] reference_s = 1 in p.toml): it was running user code")
