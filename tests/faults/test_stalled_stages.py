"""A stage that never ends stops the build at its ``[limits]`` limit: real ``edgeship build`` processes, with
a model whose forward never returns, a data source that never yields, a converter that waits forever for
its helper process and native code that deadlocks. Each exits within the limit plus a few seconds, 2 when
the stage was in user code and 3 otherwise, with one message naming the step, the limit and its key; no
traceback, no process left behind, and the build folder exactly as the earlier build left it. Before, each
sat in its step with no message until killed."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from edgeship.devices.hashing import sha256_file
from edgeship.pipeline.output import MANIFEST, BuildFiles
from tests.conftest import REPO, make_tiny_project, write_profile

MOST_S = 120  # a build that takes longer has not been stopped (each of these is stopped within ~15 s)

ONNX = """
[[variants]]
name = "onnx-fp32"
backend = "onnx"
precision = "fp32"
"""
STUCK = '''

class _NeverReturns(TinyNet):
    def forward(self, x):
        import time

        while True:  # a forward that never returns (asleep: the test costs no core)
            time.sleep(0.01)


def never_returns():
    return _NeverReturns()


class _Slow(TinyNet):
    def forward(self, x):
        import sys
        import time

        if "edgeship.pipeline.run" in sys.modules:  # the build's float reference, not the runner timing it
            time.sleep(0.3)  # a big model on a big evaluation set, in small: each batch within the limit
        return super().forward(x)


def slow():
    return _Slow()
'''
DATA = '''
def never_yields():
    while True:
        pass
    yield
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The tiny model, with ``tinynet:never_returns``, ``tinynet:slow`` and ``stuckdata:never_yields`` beside it."""
    folder = make_tiny_project(tmp_path / "project")
    (folder / "tinynet.py").write_text((folder / "tinynet.py").read_text() + STUCK)
    (folder / "stuckdata.py").write_text(textwrap.dedent(DATA))
    return folder


def earlier_build(out: Path) -> dict[str, str]:
    """A folder an earlier build left (results, report, artifact, manifest): every file's sha256."""
    (out / "onnx-fp32").mkdir(parents=True)
    (out / "onnx-fp32" / "model.onnx").write_bytes(b"an earlier build's artifact")
    (out / "results.json").write_text((REPO / "tests" / "fixtures" / "results-before-backends.json").read_text())
    (out / "report.md").write_text("# an earlier build\n")
    files = {name: sha256_file(out / name) for name in ("results.json", "report.md", "onnx-fp32/model.onnx")}
    (out / MANIFEST).write_text(BuildFiles("earlier", files).dump())
    return contents(out)


def contents(out: Path) -> dict[str, str]:
    return {p.relative_to(out).as_posix(): sha256_file(p) for p in sorted(out.rglob("*")) if p.is_file()}


def build(tmp_path: Path, project: Path, limits: str, *, entry: str = "tinynet:build", variants: str = ONNX,
          stall: str | None = None) -> tuple[int, str, dict[str, float]]:
    """``edgeship build`` (through ``tests.faults.stall_at`` with ``stall``) into ``tmp_path/out``, its own
    stage cache beside; the exit status, stderr, and when each step's closing line came (seconds)."""
    spec = project / "model.toml"
    spec.write_text(spec.read_text().replace('entry = "tinynet:build"', f'entry = "{entry}"'))
    profile = write_profile(tmp_path, variants, extra=limits)
    driver = ["-m", "tests.faults.stall_at", stall, str(tmp_path)] if stall else ["-m", "edgeship"]
    env = {**os.environ, "EDGESHIP_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "400", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, *driver, "build", "--target", str(profile), "--model", str(spec),
                             "--out", str(tmp_path / "out"), "--db", f"sqlite:///{tmp_path / 'r.db'}"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    start, seen, lines = time.monotonic(), {}, []

    def read() -> None:
        for line in proc.stderr:
            lines.append(line)
            seen.setdefault(line.split(":")[0].split(" (")[0].strip(), time.monotonic() - start)
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=MOST_S)
    except subprocess.TimeoutExpired:
        for child in [*psutil.Process(proc.pid).children(recursive=True), proc]:
            child.kill()
        pytest.fail(f"the build did not exit within {MOST_S} s; it said: {''.join(lines)[-2000:]}")
    reader.join()
    seen["exit"] = time.monotonic() - start
    return proc.returncode, "".join(lines), seen


def step_seconds(err: str, label: str) -> float:
    """The seconds on a step's closing line: ``✗ label (3.1 s)``."""
    return float(re.search(rf"✗ {re.escape(label)} \(([\d.]+) s\)", err)[1])


def leftovers(marker: str) -> list[str]:
    """Processes still running whose command line names ``marker``."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if any(marker in part for part in p.info["cmdline"] or []) and p.pid != os.getpid():
            found.append(" ".join(p.info["cmdline"]))
    return found


def test_stall_in_forward_exits_2_naming_the_step_and_keeps_the_earlier_build(project, tmp_path) -> None:
    before = earlier_build(tmp_path / "out")
    code, err, _ = build(tmp_path, project, "[limits]\nreference_s = 12\n", entry="tinynet:never_returns")
    assert code == 2, err[-2000:]
    assert ("edgeship: error: the step 'evaluation data + float reference' made no progress (no batch of data read "
            f"or evaluated) for 12 s ([limits] reference_s = 12 in {tmp_path / 'testhost.toml'}): it was running user "
            "code (the model's or a data source's) at tinynet.py:") in err, err
    assert ("(forward), which did not return; it was stopped. Raise [limits] reference_s if it needs longer; the "
            f"previous build in {tmp_path / 'out'} is untouched") in err, err
    # The step's time is what it did before the forward (reading data: seconds on a loaded machine), then the
    # limit without progress: stopped well before the last resort would end the process (GRACE_S + STACKS_S later)
    assert step_seconds(err, "evaluation data + float reference") < 12 + 9
    assert "Traceback" not in err and contents(tmp_path / "out") == before


def test_stall_in_a_data_source_exits_2_naming_the_step(project, tmp_path) -> None:
    int8 = ONNX.replace("fp32", "int8") + '[data]\ncalibration = "stuckdata:never_yields"\n'
    code, err, _ = build(tmp_path, project, "[limits]\ncalibration_s = 2\n", variants=int8)
    assert code == 2, err[-2000:]
    assert "the step 'calibration data' made no progress (no batch of data read or evaluated) for 2 s ([limits] " \
        "calibration_s = 2" in err
    assert "running user code (the model's or a data source's) at stuckdata.py:" in err, err
    assert step_seconds(err, "calibration data") < 2 + 8  # before the last resort (GRACE_S + STACKS_S later)
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_float_reference_that_makes_progress_runs_past_its_limit(project, tmp_path) -> None:
    """Its 24 batches take 7.2 s, each 0.3 s: a limit of 5 s between two batches stops nothing (5 s: on a loaded
    machine the imports before the first batch took over 2 s). Before, the limit was for the whole step: exit 2,
    "did not return", for a forward that returned 24 times."""
    code, err, _ = build(tmp_path, project, "[limits]\nreference_s = 5\n", entry="tinynet:slow")
    assert code == 0, err[-2000:]
    took = float(re.search(r"✓ evaluation data \+ float reference: .* \(([\d.]+) s\)", err)[1])
    assert took > 7.2 and "made no progress" not in err


def test_stall_in_a_converter_exits_3_and_stops_its_helper_process(project, tmp_path) -> None:
    before = earlier_build(tmp_path / "out")
    code, err, _ = build(tmp_path, project, "[limits]\nlowering_s = 2\n", stall="waits")
    assert code == 3, err[-2000:]
    assert ("edgeship: error: the step 'lower onnx-fp32 (onnx fp32)' did not finish within 2 s ([limits] "
            "lowering_s = 2 in") in err and "called from vendorconvert/lower.py:" in err, err
    assert "user code" not in err and "Traceback" not in err
    assert step_seconds(err, "lower onnx-fp32 (onnx fp32)") < 2 + 5  # its capture included
    assert leftovers(str(tmp_path)) == [] and contents(tmp_path / "out") == before


def test_stall_in_native_code_ends_the_command_with_exit_3(project, tmp_path) -> None:
    before = earlier_build(tmp_path / "out")
    code, err, seen = build(tmp_path, project, "[limits]\nlowering_s = 2\n", stall="native")
    assert code == 3, err[-2000:]
    assert "the step 'lower onnx-fp32 (onnx fp32)' did not finish within 2 s ([limits] lowering_s = 2" in err
    assert ("it did not come back from native code, so edgeship ended its process; the previous build in "
            f"{tmp_path / 'out'} is untouched") in err, err
    from edgeship.pipeline.watchdog import GRACE_S

    assert seen["exit"] - seen["✓ evaluation data + float reference"] < 2 + GRACE_S + 8  # capture, stopping
    assert "Traceback" not in err and contents(tmp_path / "out") == before


def test_stall_in_native_code_holding_the_interpreter_lock_ends_with_exit_1_and_its_stacks(project, tmp_path) -> None:
    before = earlier_build(tmp_path / "out")
    code, err, seen = build(tmp_path, project, "[limits]\nlowering_s = 2\n", stall="holds")
    from edgeship.pipeline.watchdog import GRACE_S, STACKS_S

    assert code == 1 and seen["exit"] - seen["✓ evaluation data + float reference"] < 2 + GRACE_S + STACKS_S + 8
    stacks = (tmp_path / "out" / ".work" / "watchdog-stacks.txt").read_text()
    assert stacks.startswith("edgeship (pid ") and "the step 'lower onnx-fp32 (onnx fp32)' ran past its limit " \
        "([limits] lowering_s = 2 in" in stacks and 'pipeline/lower.py", line' in stacks, stacks
    assert "Traceback" not in err and {k: v for k, v in contents(tmp_path / "out").items() if k in before} == before
