"""How sure a measured speed ratio is: an interval over the interleaved rounds, and the verdict
it allows (faster, slower, or a tie that the noise cannot separate).

Both candidates of a ratio are timed in the same rounds (benchmarks/harness.py), so each round gives
one paired ratio (the reference's median time over the candidate's, in that round: a round in which
the machine was slow for both leaves it alone). The ratio reported is the median of the per-round
ratios, and its interval the distribution-free one for a median (order statistics of the sorted
ratios, from the binomial distribution: the sign-test interval), at 95% or, with fewer than six
rounds, the widest there is (the smallest to the largest ratio). A bootstrap of so few rounds
calls a difference where there is none more often than it says (7% of ties at 7 rounds, checked in
tests/benchmarks/test_stats.py); this interval does not. A ratio whose interval holds 1.0 is a tie
(printed ≈), never a win or a loss.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass

LEVEL = 0.95
TIE = "≈"


@dataclass
class Ratio:
    """``reference`` time / ``candidate`` time (above 1: the candidate is faster), with its interval."""

    value: float
    low: float
    high: float
    rounds: int

    @property
    def verdict(self) -> str:
        """"faster", "slower" or "tie" (the interval holds 1.0)."""
        if self.low > 1.0:
            return "faster"
        if self.high < 1.0:
            return "slower"
        return "tie"

    @property
    def width(self) -> float:
        """The interval's width relative to the ratio."""
        return (self.high - self.low) / self.value

    def text(self) -> str:
        mark = TIE if self.verdict == "tie" else ""
        return f"{mark}{self.value:.2f} [{self.low:.2f}, {self.high:.2f}]"

    def as_dict(self) -> dict:
        return {**asdict(self), "verdict": self.verdict}


def ratio(reference: list[float], candidate: list[float]) -> Ratio:
    """The median per-round ratio of two jobs' times (the same rounds, in order: ``Timing.paired``),
    with its interval."""
    ratios = sorted(a / b for a, b in zip(reference, candidate))
    n = len(ratios)
    if n < 2:
        return Ratio(ratios[0] if ratios else float("nan"), 0.0, float("inf"), n)
    k = order_statistic(n)
    return Ratio(statistics.median(ratios), ratios[k - 1], ratios[n - k], n)


def order_statistic(n: int, level: float = LEVEL) -> int:
    """The largest k for which (k-th smallest, k-th largest) of n values holds their median with
    probability >= ``level`` (1 when even the smallest and largest do not reach it)."""
    def below(k: int) -> float:  # P(Binomial(n, 1/2) <= k - 1)
        return sum(math.comb(n, i) for i in range(k)) / 2 ** n

    k = 1
    while k + 1 <= n // 2 and 1 - 2 * below(k + 1) >= level:
        k += 1
    return k
