"""Rank statistics for thousands of heavy-tailed times (imports of hyperfine, pyperf, pytest-benchmark, …): the
Hodges–Lehmann shift of log times with its distribution-free interval, and the Mann–Whitney p-values.

The interval inverts the Mann–Whitney (Wilcoxon rank-sum) test (Hollander & Wolfe, "Nonparametric Statistical
Methods", §4.3): of the m·n differences log on_j − log off_i sorted, it runs from the k-th to the (mn + 1 − k)-th,
k the largest count with P(U ≤ k − 1) ≤ α under no shift. U's null distribution is exact up to EXACT_MAX runs per
arm (Mann & Whitney 1947's recursion) and normal beyond (no tie correction: ties only make U less variable, so
the interval is then a little wider than it need be). Order statistics of the differences are selected without
forming them above diagnostics.HL_OUTER_MAX (3 000 runs per arm make 9 million), so memory stays O(m + n).

`interval_codes` decides many gates at once from the same test without any order statistic: the upper end of the
interval is below c exactly when at most k − 1 differences are ≥ c, a count of one rank sum (O(n log n)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np
from scipy import stats as sps

from gatekit.diagnostics import HL_OUTER_MAX, hodges_lehmann_log, kth_difference
from gatekit.verdict import ADOPTED, EQUIVALENT, INCONCLUSIVE, REGRESSION, REJECTED

EXACT_MAX = 50  # runs per arm up to which U's null distribution is computed exactly


@lru_cache(maxsize=64)
def rank_sum_null_cdf(m: int, n: int) -> tuple[float, ...]:
    """P(U ≤ u), u = 0 … m·n, for U the Mann–Whitney count of (i, j) with x_i > y_j under no shift (m x's,
    n y's, no ties), by the recursion p(m, n; u) = m/(m+n)·p(m−1, n; u−n) + n/(m+n)·p(m, n−1; u)."""
    # row[j] holds p(i, j; ·) for the current i
    row = [np.ones(1) for _ in range(n + 1)]
    for i in range(1, m + 1):
        new = [np.ones(1)]
        for j in range(1, n + 1):
            p = np.zeros(i * j + 1)
            p[j:j + row[j].size] += i / (i + j) * row[j]  # the largest x above all j y's: U gains j
            p[:new[j - 1].size] += j / (i + j) * new[j - 1]
            new.append(p)
        row = new
    return tuple(np.cumsum(row[n]).tolist())


def rank_sum_cut(m: int, n: int, alpha: float) -> int:
    """k: the largest count with P(U ≤ k − 1) ≤ α under no shift (0: no interval at this size and level)."""
    if m < 1 or n < 1:
        return 0
    if max(m, n) <= EXACT_MAX:
        cdf = rank_sum_null_cdf(m, n)
        return int(np.searchsorted(np.asarray(cdf), alpha * (1 + 1e-12), side="right"))
    sd = math.sqrt(m * n * (m + n + 1) / 12)
    # P(U ≤ k − 1) ≈ Φ((k − 1 + ½ − mn/2) / sd), continuity-corrected
    return max(0, math.floor(m * n / 2 + 0.5 - float(sps.norm.ppf(1 - alpha)) * sd))


@dataclass(frozen=True, slots=True)
class ShiftInterval:
    """The Hodges–Lehmann shift of log times (on − off) and its 1 − 2α interval; ±inf ends: too few runs."""

    shift: float
    low: float
    high: float
    cut: int  # k: differences left out at each end


def kth_of_differences(off: np.ndarray, on: np.ndarray, k: int) -> float:
    """The k-th smallest (1-based) of all on_j − off_i; selected without forming them above HL_OUTER_MAX."""
    if off.size * on.size <= HL_OUTER_MAX:
        return float(np.partition(np.subtract.outer(on, off).ravel(), k - 1)[k - 1])
    return kth_difference(np.sort(off), on, k)


def shift_interval(off_logs: Sequence[float] | np.ndarray, on_logs: Sequence[float] | np.ndarray, alpha: float) -> ShiftInterval:
    """Hodges–Lehmann shift and the Mann–Whitney inversion interval [D_(k), D_(mn+1−k)] (two-sided 1 − 2α)."""
    off, on = np.asarray(off_logs, float), np.asarray(on_logs, float)
    shift = hodges_lehmann_log(off.tolist(), on.tolist())
    k = rank_sum_cut(off.size, on.size, alpha)
    if k < 1:
        return ShiftInterval(shift, -math.inf, math.inf, 0)
    total = off.size * on.size
    return ShiftInterval(shift, kth_of_differences(off, on, k), kth_of_differences(off, on, total + 1 - k), k)


def rank_sum_p(off_logs: Sequence[float] | np.ndarray, on_logs: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """One-sided Mann–Whitney p-values (scipy: exact for small samples without ties, else normal with the tie
    correction): (on lower than off, on higher than off)."""
    if not len(off_logs) or not len(on_logs):
        return math.nan, math.nan
    lower = float(sps.mannwhitneyu(on_logs, off_logs, alternative="less").pvalue)
    higher = float(sps.mannwhitneyu(on_logs, off_logs, alternative="greater").pvalue)
    return lower, higher


def interval_code(low: float, high: float, *, better_log: float, worse_log: float) -> int:
    """The outcome of one interval against the floor's two log bounds (better_log < 0 < worse_log, lower is
    better): adopted when it lies wholly beyond the better bound, regression beyond the worse one, equivalent
    inside both, rejected when it rules out a floor-sized improvement, else inconclusive."""
    if high < better_log:
        return ADOPTED
    if low > worse_log:
        return REGRESSION
    if better_log < low and high < worse_log:
        return EQUIVALENT
    if low > better_log:
        return REJECTED
    return INCONCLUSIVE


def count_at_least(off: np.ndarray, on: np.ndarray, c: float) -> np.ndarray:
    """Per gate (last axis: runs), how many differences on_j − off_i are ≥ c, from one rank sum of on − c among
    off (continuous values: ties have probability 0)."""
    m, n = off.shape[-1], on.shape[-1]
    joined = np.concatenate([off, on - c], axis=-1)
    ranks = np.argsort(np.argsort(joined, axis=-1, kind="stable"), axis=-1)[..., m:]  # 0-based ranks of on − c
    below = ranks.sum(axis=-1) - n * (n - 1) // 2  # pairs with off_i < on_j − c
    return below


def interval_codes(off_log: np.ndarray, on_log: np.ndarray, *, alpha: float, better_log: float,
                   worse_log: float) -> np.ndarray:
    """`interval_code` of many gates at once without any order statistic: with k = rank_sum_cut, the interval's
    high end is < c iff at most k − 1 differences are ≥ c, and its low end is > c iff at most k − 1 are ≤ c."""
    m, n = off_log.shape[-1], on_log.shape[-1]
    k = rank_sum_cut(m, n, alpha)
    if k < 1:
        return np.full(off_log.shape[0], INCONCLUSIVE)
    total = m * n

    def high_below(c: float) -> np.ndarray:
        return count_at_least(off_log, on_log, c) <= k - 1

    def low_above(c: float) -> np.ndarray:
        return total - count_at_least(off_log, on_log, c) <= k - 1  # ≤ c counts the rest (no ties)

    adopted, regression = high_below(better_log), low_above(worse_log)
    above_better = low_above(better_log)
    equivalent = above_better & high_below(worse_log)
    return np.select([adopted, regression, equivalent, above_better],
                     [ADOPTED, REGRESSION, EQUIVALENT, REJECTED], default=INCONCLUSIVE)
