"""benchmarks/stats.py: a speed ratio's bootstrap interval and the verdict it allows."""
from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from stats import ratio  # noqa: E402


def rounds(mean: float, noise: float, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [mean * (1 + rng.uniform(-noise, noise)) for _ in range(n)]


def test_stats_a_clear_speedup_is_faster_with_an_interval_around_it() -> None:
    r = ratio(rounds(10.0, 0.02, 9, 1), rounds(5.0, 0.02, 9, 2))
    assert r.verdict == "faster" and r.low < r.value < r.high and 1.9 < r.low and r.high < 2.1


def test_stats_the_same_speed_is_called_a_tie_at_least_95_percent_of_the_time() -> None:
    """Two candidates of one speed, ±20% noise a round, 7 rounds: a difference is called in at
    most 5% of 400 draws (a bootstrap of the medians called one in 7%)."""
    calls = [ratio(rounds(5.0, 0.2, 7, seed), rounds(5.0, 0.2, 7, seed + 1000)) for seed in range(400)]
    assert sum(r.verdict != "tie" for r in calls) <= 20
    assert all(r.text().startswith("≈") for r in calls if r.verdict == "tie")


def test_stats_rounds_are_resampled_in_pairs() -> None:
    """A round slow for both (the machine was busy) leaves the ratio alone: paired resampling."""
    base = rounds(1.0, 0.01, 9, 3)
    slow = [v * (8 if i % 3 == 0 else 1) for i, v in enumerate(base)]
    r = ratio([2 * v for v in slow], slow)
    assert r.verdict == "faster" and abs(r.value - 2) < 1e-9 and r.width < 0.05


def test_stats_one_round_has_no_interval() -> None:
    r = ratio([2.0], [1.0])
    assert r.value == 2.0 and r.verdict == "tie" and r.rounds == 1
