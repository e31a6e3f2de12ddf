"""The stage watchdog's in-process cases (tests/pipeline/watchdog_cases.py), run in a pytest of their own.

They raise Stalled in this process's threads by signal and by PyThreadState_SetAsyncExc, and stop the
processes a stage's thread started. Inside a pytest-xdist worker, after other files' tests, a worker ended
during them three times ("node down: Not properly terminated", and the run then waited forever); in a
process of their own they have never failed. Until the cause is found (see CHANGELOG, Unreleased), a
crash here fails this test with the cases' output instead of taking a worker and the run with it."""
from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO


def test_watchdog_cases_pass_in_a_process_of_their_own() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "EDGESHIP_TEST_TURN"))}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
                           "tests/pipeline/watchdog_cases.py"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, (f"exit {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}")
