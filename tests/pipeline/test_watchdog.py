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
    assert stall.user_code and "test_watchdog.py" in stall.where and "spin" in stall.where
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
    assert user and where.startswith("test_watchdog.py:") and "(test_user_code_is_code_not_installed" in where
    user, where = UserCode(["copy:deepcopy"]).locate(frame)  # a model whose entry is an installed module
    assert user and where.startswith("copy.py:")
