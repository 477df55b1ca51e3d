"""Pure statistics over plain sequences. Each function names its formula and handles n < 2 in code.

Percentages are returned in percent (`_pct`); nothing here reads files or the clock.
"""

from __future__ import annotations

import math
from typing import Sequence


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean; NaN for an empty sequence."""
    return math.fsum(values) / len(values) if values else math.nan


def compensated_mean(values: Sequence[float]) -> float:
    """Arithmetic mean by Kahan-compensated summation in the given order (NaN values skipped, NaN for none):
    the algorithm of pandas' groupby mean, which the cycle check's mean clocks were first computed with, so
    findings keep their bits. An infinite value makes the compensation NaN; it is reset to 0 (pandas GH#50367)."""
    total = compensation = 0.0
    count = 0
    for value in values:
        if math.isnan(value):
            continue
        count += 1
        y = value - compensation
        t = total + y
        compensation = t - total - y
        if math.isnan(compensation):
            compensation = 0.0
        total = t
    return total / count if count else math.nan


def sample_sd(values: Sequence[float]) -> float:
    """Sample standard deviation (Bessel, ddof=1); NaN below two values."""
    if len(values) < 2:
        return math.nan
    m = mean(values)
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / (len(values) - 1))


def relative_sd_pct(values: Sequence[float]) -> float:
    """Sample SD relative to the mean, in percent (the seed's σ_off = 0.4541 %)."""
    m = mean(values)
    if not values or m == 0:
        return math.nan
    return 100.0 * sample_sd(values) / abs(m)


def delta_pct(mean_off: float, mean_on: float) -> float:
    """Δ = (mean_on − mean_off) / mean_off, in percent (DESIGN step 6)."""
    if mean_off == 0:
        return math.nan
    return 100.0 * (mean_on - mean_off) / abs(mean_off)


def threshold_pct(sigma_off_pct: float, sigma_k: float, floor_pct: float) -> float:
    """max(sigma_k · σ_off, floor); a NaN σ (n < 2) falls back to the floor."""
    if math.isnan(sigma_off_pct):
        return floor_pct
    return max(sigma_k * sigma_off_pct, floor_pct)


def max_attainable_z(n: int) -> float:
    """Largest |x − mean| / s any point can reach when s is computed from the same n points.

    Samuelson's inequality (1968): |x_i − x̄| ≤ s·(n − 1)/√n, so a "3σ within own arm" rule cannot
    fire while (n − 1)/√n < 3, i.e. for n ≤ 10.
    """
    if n < 2:
        return 0.0
    return (n - 1) / math.sqrt(n)


def z_scores(values: Sequence[float]) -> list[float]:
    """|x − mean| / s within one arm; 0 where s is 0 or undefined."""
    m, s = mean(values), sample_sd(values)
    if not values or math.isnan(s) or s == 0:
        return [0.0 for _ in values]
    return [abs(v - m) / s for v in values]


def leave_one_out_z_scores(values: Sequence[float]) -> list[float]:
    """|x − mean(others)| / s(others): the point is not allowed to inflate its own σ.

    Needs at least two other points for s(others); a point with fewer others gets 0 (cannot be judged).
    A zero s(others) with a differing point gives +inf: the others agree exactly and it does not.
    """
    scores = []
    for i, value in enumerate(values):
        others = [v for j, v in enumerate(values) if j != i]
        s = sample_sd(others)
        if math.isnan(s):
            scores.append(0.0)
        elif s == 0:
            scores.append(0.0 if value == others[0] else math.inf)
        else:
            scores.append(abs(value - mean(others)) / s)
    return scores


def history_z_scores(values: Sequence[float], sigma_pct: float) -> list[float]:
    """|x − mean(others)| / σ with σ = sigma_pct % of mean(others), σ calibrated before the series.

    Neither the point nor its arm's spread sets the yardstick, so there is no Samuelson bound and rule (ii)
    can fire at n = 3. A point without others, or σ = 0, gets 0 (cannot be judged).
    """
    scores = []
    for i, value in enumerate(values):
        others = [v for j, v in enumerate(values) if j != i]
        sigma = sigma_pct / 100 * abs(mean(others)) if others else math.nan
        scores.append(abs(value - mean(others)) / sigma if sigma and math.isfinite(sigma) else 0.0)
    return scores


def median(values: Sequence[float]) -> float:
    """Median; NaN for an empty sequence."""
    ordered = sorted(values)
    k = len(ordered)
    if k == 0:
        return math.nan
    mid = k // 2
    return ordered[mid] if k % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def pairs_better(pairs: Sequence[tuple[float, float]], direction: str) -> int:
    """How many (off, on) pairs have on better than off; ties count as not better."""
    if direction == "lower":
        return sum(1 for off, on in pairs if on < off)
    return sum(1 for off, on in pairs if on > off)
