"""Command lines of the native benchmark programs, and their parsers against recorded outputs.

The recorded outputs under tests/fixtures/native/ were printed by the real programs on real
devices and published (each file names its source); none was produced here.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeship.devices import Job
from edgeship.devices.base import MeasurementError
from edgeship.devices.native import ExecutorRunner, SpeedBenchmarkTorch

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "native"


def recorded(name: str) -> str:
    """A recorded output without its provenance header (the lines up to '# ---')."""
    text = (FIXTURES / name).read_text()
    return text.split("# ---\n", 1)[1]


def job(tmp_path: Path, warmup: int = 3, iterations: int = 20, threads: int | None = 2) -> Job:
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, image=np.zeros((5, 3, 16, 16), np.float32), mask=np.zeros((5, 7), np.int64))
    return Job(runtime="executorch", artifact=tmp_path / "m.pte", sha256=None, inputs=inputs,
               input_names=["image", "mask"], batch=1, warmup=warmup, iterations=iterations, threads=threads,
               timeout_s=60)


def test_executor_runner_command_runs_warmup_plus_iterations_with_the_threads(tmp_path) -> None:
    cmd = ExecutorRunner().command("/data/local/tmp/executor_runner", "/data/local/tmp/e/m.pte", job(tmp_path))
    assert cmd == ["/data/local/tmp/executor_runner", "--model_path=/data/local/tmp/e/m.pte",
                   "--num_executions=23", "--cpu_threads=2"]
    assert "--cpu_threads" not in " ".join(ExecutorRunner().command("er", "m.pte", job(tmp_path, threads=None)))


def test_speed_benchmark_torch_command_gives_every_input_its_dims_and_type(tmp_path) -> None:
    cmd = SpeedBenchmarkTorch().command("/data/local/tmp/sbt", "/data/local/tmp/e/m.ptl", job(tmp_path))
    assert cmd == ["/data/local/tmp/sbt", "--model=/data/local/tmp/e/m.ptl", "--input_dims=1,3,16,16;1,7",
                   "--input_type=float;int64", "--warmup=3", "--iter=20", "--report_pep=true"]


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


def test_speed_benchmark_torch_parser_reads_every_recorded_run_in_ms() -> None:
    t = SpeedBenchmarkTorch().parse(recorded("speed_benchmark_torch_report_pep.log"), warmup=5)
    assert t.timings_ms == [599.746, 570.505, 583.396] and t.runs == 3
    assert t.mean_ms == pytest.approx(584.549, abs=1e-3)


def test_speed_benchmark_torch_parser_without_per_run_lines_keeps_only_the_mean() -> None:
    t = SpeedBenchmarkTorch().parse(recorded("speed_benchmark_torch_recipe.log"), warmup=0)
    assert t.timings_ms is None and t.mean_ms == pytest.approx(121.318)
    assert any("no per-run PyTorchObserver lines" in n for n in t.notes)
