"""PyTorch's speed_benchmark_torch (backends/pytorch_mobile/native.py): its command line, and its
parser against recorded outputs (tests/fixtures/native/, each naming its source)."""
from __future__ import annotations

import numpy as np
import pytest

from edgeship.backends.pytorch_mobile.native import SpeedBenchmarkTorch
from edgeship.devices.base import MeasurementError
from tests.devices.test_native import job, recorded


def test_speed_benchmark_torch_command_gives_every_input_its_dims_and_type(tmp_path) -> None:
    cmd = SpeedBenchmarkTorch().command("/data/local/tmp/sbt", "/data/local/tmp/e/m.ptl", job(tmp_path))
    assert cmd == ["/data/local/tmp/sbt", "--model=/data/local/tmp/e/m.ptl", "--input_dims=1,3,16,16;1,7",
                   "--input_type=float;int64", "--warmup=3", "--iter=20", "--report_pep=true"]


def test_speed_benchmark_torch_command_refuses_an_input_type_it_does_not_take(tmp_path) -> None:
    bad = job(tmp_path)
    np.savez(bad.inputs, image=np.zeros((5, 3, 16, 16), np.float64), mask=np.zeros((5, 7), np.int64))
    with pytest.raises(MeasurementError, match="input image: speed_benchmark_torch takes float32, uint8, int64 "
                                               "inputs, not float64"):
        SpeedBenchmarkTorch().command("sbt", "m.ptl", bad)


def test_speed_benchmark_torch_parser_reads_every_recorded_run_in_ms() -> None:
    t = SpeedBenchmarkTorch().parse(recorded("speed_benchmark_torch_report_pep.log"), warmup=5)
    assert t.timings_ms == [599.746, 570.505, 583.396] and t.runs == 3
    assert t.mean_ms == pytest.approx(584.549, abs=1e-3)


def test_speed_benchmark_torch_parser_without_per_run_lines_keeps_only_the_mean() -> None:
    t = SpeedBenchmarkTorch().parse(recorded("speed_benchmark_torch_recipe.log"), warmup=0)
    assert t.timings_ms is None and t.mean_ms == pytest.approx(121.318)
    assert any("no per-run PyTorchObserver lines" in n for n in t.notes)
