"""ExecuTorch's executor_runner (backends/executorch/native.py): its command line, and its parser
against recorded outputs (tests/fixtures/native/, each naming its source)."""
from __future__ import annotations

import pytest

from edgeship.backends.executorch.native import ExecutorRunner
from edgeship.devices.base import MeasurementError
from tests.devices.test_native import job, recorded


def test_executor_runner_command_runs_warmup_plus_iterations_with_the_threads(tmp_path) -> None:
    cmd = ExecutorRunner().command("/data/local/tmp/executor_runner", "/data/local/tmp/e/m.pte", job(tmp_path))
    assert cmd == ["/data/local/tmp/executor_runner", "--model_path=/data/local/tmp/e/m.pte",
                   "--num_executions=23", "--cpu_threads=2"]
    assert "--cpu_threads" not in " ".join(ExecutorRunner().command("er", "m.pte", job(tmp_path, threads=None)))


@pytest.mark.parametrize("name, mean_ms", [("executor_runner_arm64_linear.log", 2.904883),
                                           ("executor_runner_mv2_xnnpack.log", 15.013292)])
def test_executor_runner_parser_reads_the_recorded_total(name: str, mean_ms: float) -> None:
    t = ExecutorRunner().parse(recorded(name), warmup=0)
    assert t.mean_ms == pytest.approx(mean_ms) and t.runs == 1 and t.timings_ms is None
    assert any("p50/p90/p99 not measured" in n for n in t.notes)


def test_executor_runner_parser_drops_warmup_runs_from_per_run_lines() -> None:
    # Newer executor_runner logs each run; these lines follow its format strings (executor_runner.cpp:
    # "Iteration %u of %u: %f ms", "Model loaded in %f ms.") - composed here, not recorded.
    text = ("I 00:00:00.010000 executorch:executor_runner.cpp:718] Model loaded in 7.850000 ms.\n"
            + "".join(f"I 00:00:00.0{i}0000 executorch:executor_runner.cpp:880] Iteration {i} of 4: {t} ms\n"
                      for i, t in enumerate([9.0, 2.0, 2.5, 3.0], start=1))
            + "I 00:00:00.060000 executorch:executor_runner.cpp:889] Model executed successfully 4 time(s) "
              "in 16.5 ms.\n")
    t = ExecutorRunner().parse(text, warmup=1)
    assert t.timings_ms == [2.0, 2.5, 3.0] and t.runs == 3 and t.load_ms == 7.85


def test_executor_runner_parser_without_a_success_line_names_the_error() -> None:
    text = ("I 00:00:00.073575 executorch:executor_runner.cpp:73] Model file m.pte is loaded.\n"
            "E 00:00:00.074000 executorch:method.cpp:1056] Execution of method forward failed with status 0x12\n")
    with pytest.raises(MeasurementError, match="no 'Model executed successfully'.*failed with status 0x12"):
        ExecutorRunner().parse(text, warmup=0)
