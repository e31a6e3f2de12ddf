"""Ctrl-C (SIGINT) and SIGTERM stop a real ``edgeship build`` process in the stage it is in: it
exits 130 or 143 with "interrupted; the previous build in OUT is untouched", leaves every process it
started stopped, removes its ``.work`` and lock, and the finished build in the folder is as it was.
The signal comes from outside, when the build's progress shows it in the stage (its stage cache is
cold and the measurement long, so each stage lasts seconds); the seconds from signal to exit are
printed (the issue's figure is 2 s; the assertion only separates stopping from running on: a loaded
machine may take longer than 2 s)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from edgeship.pipeline.output import LOCK, WORK
from tests.conftest import REPO, make_tiny_project, write_profile
from tests.faults.test_one_build_per_folder import files
from tests.pipeline.test_faults import ORT

# stage: (the progress text after which the signal is sent, seconds to wait after it, the stage's name)
STAGES = {"calibration": ("✓ plan", 1.0, "✗ calibration data"),
          "reference": ("✓ plan", 1.0, "✗ evaluation data + float reference"),
          "lowering": ("✓ evaluation data + float reference", 0.5, "✗ lower ort"),
          "measuring": ("✓ lower ort", 0.0, "✗ measure on host")}  # then: a runner started


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A finished build of the tiny model (model.toml, profile, the build folder); the profile then
    times 200,000 runs: the eager model's measurement alone would last over a minute."""
    root = tmp_path_factory.mktemp("interrupts")
    model = make_tiny_project(root / "tiny") / "model.toml"
    profile = write_profile(root, ORT)
    out = root / "out"
    done = subprocess.run(command(model, profile, out), cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "EDGESHIP_CACHE_DIR": str(root / "cache")})
    assert done.returncode == 0, done.stderr[-2000:]
    profile.write_text(profile.read_text().replace("iterations = 10", "iterations = 200000"))
    return model, profile, out


def command(model: Path, profile: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "edgeship", "build", "--target", str(profile), "--model", str(model), "--out",
            str(out), "--db", f"sqlite:///{profile.parent / 'r.db'}"]



Children = list[tuple[psutil.Process, str]]


def interrupt_at(cmd: list[str], stage: str, signum: int, env: dict[str, str],
                 ready: Callable[[subprocess.Popen], None] = lambda proc: None) -> tuple[int, str, float, Children]:
    """Run ``cmd``, send ``signum`` once its progress shows ``stage`` running (and ``ready`` returned):
    (exit status, stderr, seconds from the signal to the exit, the processes it had started then)."""
    after, wait_s, _ = STAGES[stage]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    err = ""
    deadline = time.monotonic() + 300
    while after not in err:
        line = proc.stderr.readline()
        assert line or proc.poll() is None, f"the build ended before {after!r}: {err[-2000:]}"
        assert time.monotonic() < deadline, err[-2000:]
        err += line
    time.sleep(wait_s)
    ready(proc)
    assert proc.poll() is None, f"the build ended before the signal: {err}"
    children = []
    for child in psutil.Process(proc.pid).children(recursive=True):
        try:
            children.append((child, " ".join(child.cmdline())))
        except psutil.Error:
            pass
    sent = time.monotonic()
    proc.send_signal(signum)
    _, rest = proc.communicate(timeout=120)
    return proc.returncode, " ".join((err + rest).split()), time.monotonic() - sent, children


def runner_started(proc: subprocess.Popen) -> None:
    """Wait until the build has a runner process (its command line names its job.json)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        for child in psutil.Process(proc.pid).children(recursive=True):
            try:
                if any(arg.endswith("job.json") for arg in child.cmdline()):
                    time.sleep(0.3)
                    return
            except psutil.Error:
                continue
        time.sleep(0.02)
    raise AssertionError("no runner started")


@pytest.mark.parametrize(("stage", "signum"), [("reference", signal.SIGTERM), ("lowering", signal.SIGINT),
                                               ("measuring", signal.SIGINT), ("measuring", signal.SIGTERM),
                                               ("measuring", signal.SIGHUP)])
def test_faults_a_signal_stops_the_build_in_its_stage_and_the_folder_is_untouched(
        finished, stage: str, signum: int, tmp_path) -> None:
    model, profile, out = finished
    before = files(out)
    env = {**os.environ, "EDGESHIP_CACHE_DIR": str(tmp_path / "cold-cache")}
    ready = runner_started if stage == "measuring" else (lambda proc: None)
    code, err, seconds, children = interrupt_at(command(model, profile, out) + ["--remeasure"], stage, signum, env,
                                                ready)
    print(f"\n{stage}, {signal.Signals(signum).name}: exit {code} {seconds:.2f} s after the signal; "
          f"{len(children)} child process(es) then")
    assert code == 128 + signum, err[-2000:]
    assert STAGES[stage][2] in err and f"edgeship: interrupted; the previous build in {out} is untouched" in err
    # stopped, not finished: the uninterrupted measurement takes over a minute (before this fix: exit
    # after the measurement ran to its end)
    assert "Traceback" not in err and seconds < 30, (seconds, err[-2000:])
    if stage == "measuring":  # a runner was timing when the signal came
        assert any("job.json" in line for _, line in children), children
    left = [line for c, line in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert not left, left
    assert files(out) == before and not (out / WORK).exists() and not (out / LOCK).exists()


FORKED_CHILD = """
import ctypes, multiprocessing, threading
from edgeship import stopping

libc = ctypes.CDLL(None)
mutex = ctypes.create_string_buffer(64)   # a pthread_mutex_t, zeroed: unlocked
libc.pthread_mutex_lock(mutex)   # held at the fork, as another thread held libc's resolver lock


def stuck():   # what OpenVINO's telemetry child did: wait in C for a lock nobody will release
    libc.pthread_mutex_lock(mutex)


def send():   # the library forks from a thread of its pool, as here
    child = multiprocessing.get_context("fork").Process(target=stuck, daemon=True)
    child.start()
    child.join(0.5)
    child.terminate()   # what the library and multiprocessing's exit do with a child that hangs
    child.join(10)
    print(child.exitcode)
    if child.is_alive():
        child.kill()
        child.join()


with stopping.installed():
    sender = threading.Thread(target=send)
    sender.start()
    sender.join()
"""


def test_faults_a_child_a_library_forks_dies_at_sigterm_while_stuck_in_c() -> None:
    """A build hung after its last line: OpenVINO's telemetry forked a child (multiprocessing) while
    another of its threads held libc's resolver lock; the child waited for it forever, and with
    edgeship's SIGTERM handler inherited it could not die of the SIGTERM sent to it, so the build
    waited for it at exit. A forked child gets the handlers from before: killed by the signal (-15)."""
    proc = subprocess.run([sys.executable, "-c", FORKED_CHILD], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == [str(-signal.SIGTERM)]


EXTENSION_INIT = """
import os, signal, sys, time
from importlib.machinery import ExtensionFileLoader
from edgeship import stopping
ns = {}   # importlib's exec_module of an extension, as the handler sees it on the stack
exec(compile("def exec_module(self, init):\\n    return init()\\n", "<frozen importlib._bootstrap_external>",
             "exec"), ns)
done = []

def init():   # Python code the extension's initialization calls (onnx's: creating its enums)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.3)
    done.append(True)

try:
    with stopping.installed():
        ns["exec_module"](ExtensionFileLoader("fake", "fake.so"), init)
        time.sleep(5)
    print("not interrupted")
except stopping.Interrupted as e:
    print("interrupted", bool(done), e.exit_code)
time.sleep(0.2)   # a signal still sent again would reach the handlers from before now
"""


@pytest.mark.parametrize("after", ["time.sleep(5)", "pass"])   # more work after it, or the command's end
def test_faults_a_signal_while_an_extension_initializes_stops_the_command_once_it_is_done(after: str) -> None:
    """Raised in the Python code a C extension's initialization calls, Interrupted would cross C and
    abort the process (seen: SIGINT while onnx created its enums; exit -6, the folder's lock left).
    Where the command ends before the signal comes again, it is raised as the handlers go."""
    code = EXTENSION_INIT.replace("time.sleep(5)", after)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.split() == ["interrupted", "True", "130"], done.stderr[-2000:]
