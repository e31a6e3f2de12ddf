"""bench.py writes the random-weight models' data files where they are missing, and nothing for a
model whose data is its own (MiniLM's sentences come from a callable, ``minilm:calibration``)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import bench  # noqa: E402


def spec(tmp_path: Path, calibration: str, evaluation: str) -> Path:
    path = tmp_path / "model.toml"
    path.write_text(f'name = "m"\nentry = "zoo:m"\ninputs = [{{ name = "x", shape = [1, 3], dtype = "float32" }}]\n'
                    f'[data]\ncalibration = "{calibration}"\nevaluation = "{evaluation}"\n')
    return path


def test_bench_writes_missing_npz_data_for_a_random_weight_model(tmp_path: Path) -> None:
    bench.ensure_data(spec(tmp_path, "data/c.npz", "data/e.npz"))
    calibration, evaluation = np.load(tmp_path / "data/c.npz")["x"], np.load(tmp_path / "data/e.npz")["x"]
    assert calibration.shape == (bench.CALIBRATION_SAMPLES, 3) and evaluation.shape == (bench.EVALUATION_SAMPLES, 3)
    assert 0 <= evaluation.min() and evaluation.max() <= 1


def test_bench_leaves_a_models_own_data_alone(tmp_path: Path) -> None:
    bench.ensure_data(spec(tmp_path, "minilm:calibration", "minilm:evaluation"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.toml"]
