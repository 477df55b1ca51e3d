"""Diagnostics that sit beside every decision: what the classic rule does not say about its own evidence.

Pure functions over plain sequences (or numpy arrays along the last axis, so `gate simulate` runs the very
same arithmetic on 100 000 gates at once). Run times are compared on log values, so Δ is a ratio of
geometric means and a CI on the log difference turns into a CI on that ratio (Kalibera & Jones, "Rigorous
Benchmarking in Reasonable Time", ISMM 2013, §5: report a ratio with a confidence interval).

Percent values are `_pct`; everything here handles n < 2 and σ = 0 in code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from scipy import optimize
from scipy import stats as sps

from gatekit import stats
from gatekit.config import GuardSpec
from gatekit.verdict import classic_decision

# a function vectorised over many gates (the simulations') also takes one gate's scalars
ArrayOrScalar = np.ndarray | float

CI_LEVEL = 0.95
MDE_ALPHA = 0.05  # one-sided
MDE_POWER = 0.80


# -- Welch on log values ---------------------------------------------------------------------------

def welch_arrays(off: np.ndarray, on: np.ndarray, df_mode: str = "satterthwaite"
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Welch's two-sample t on the last axis: (mean(on) − mean(off), standard error, degrees of freedom).

    df_mode "satterthwaite": Welch (1947) / Satterthwaite (1946) df, as scipy's ttest_ind(equal_var=False).
    df_mode "conservative": min(n_off, n_on) − 1 (Hsu 1938; the "conservative" two-sample t of Moore &
    McCabe), which stays at or below its nominal level when one arm is much noisier at n = 4.
    An arm with fewer than two values gives NaN everywhere; zero variance in both arms gives se = 0 and
    df = n_off + n_on − 2 (the Satterthwaite formula is 0/0 there).
    """
    off, on = np.asarray(off, dtype=float), np.asarray(on, dtype=float)
    n_off, n_on = off.shape[-1], on.shape[-1]
    shape = np.broadcast_shapes(off.shape[:-1], on.shape[:-1])
    if n_off < 2 or n_on < 2:
        nan = np.full(shape, np.nan)
        return nan, nan.copy(), nan.copy()
    diff = on.mean(axis=-1) - off.mean(axis=-1)
    v_off = off.var(axis=-1, ddof=1) / n_off
    v_on = on.var(axis=-1, ddof=1) / n_on
    se = np.sqrt(v_off + v_on)
    if df_mode == "conservative":
        df = np.full(shape, float(min(n_off, n_on) - 1))
    else:
        denominator = v_off ** 2 / (n_off - 1) + v_on ** 2 / (n_on - 1)
        with np.errstate(invalid="ignore", divide="ignore"):
            df = np.where(denominator > 0, (v_off + v_on) ** 2 / np.where(denominator > 0, denominator, 1.0),
                          float(n_off + n_on - 2))
    return np.broadcast_to(diff, shape).copy(), np.broadcast_to(se, shape).copy(), np.broadcast_to(df, shape).copy()


def p_better_arrays(diff: ArrayOrScalar, se: ArrayOrScalar, df: ArrayOrScalar, direction: str) -> np.ndarray:
    """One-sided p of H1 "on is better": P(T ≤ t) when lower is better, P(T ≥ t) when higher is better.

    se = 0: p is 0 when the (exact) difference points the better way, 1 otherwise (no evidence).
    """
    diff, se, df = np.asarray(diff, float), np.asarray(se, float), np.asarray(df, float)
    sign = -1.0 if direction == "lower" else 1.0
    with np.errstate(invalid="ignore", divide="ignore"):
        t = sign * diff / se
        p = sps.t.sf(t, df)
    exact = (se == 0) & np.isfinite(diff)
    return np.where(exact, np.where(sign * diff > 0, 0.0, 1.0), p)


def ci_arrays(diff: ArrayOrScalar, se: ArrayOrScalar, df: ArrayOrScalar, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided `level` CI of the difference: diff ± t_{(1+level)/2, df} · se."""
    q = sps.t.ppf(0.5 + level / 2, np.asarray(df, float))
    half = np.where(np.asarray(se) == 0, 0.0, q * se)
    return diff - half, diff + half


def log_values(values: Sequence[float]) -> np.ndarray | None:
    """Natural logs, or None when a value is not positive (run times and rates always are)."""
    array = np.asarray(list(values), dtype=float)
    if array.size and (not np.all(np.isfinite(array)) or np.any(array <= 0)):
        return None
    return np.log(array)


def pct(log_ratio: float) -> float:
    """A log ratio as a percent change: 100·(e^x − 1)."""
    return 100.0 * math.expm1(log_ratio) if math.isfinite(log_ratio) else math.nan


# -- power -----------------------------------------------------------------------------------------

def power_one_sided(effect_log: float, se: float, df: float, alpha: float) -> float:
    """Power of a one-sided t test: P(T' > t_{1−α,df}) with T' noncentral t, noncentrality effect/se."""
    if not (math.isfinite(se) and math.isfinite(df)) or se <= 0 or df <= 0:
        return math.nan
    return float(sps.nct.sf(sps.t.ppf(1 - alpha, df), df, effect_log / se))


def mde_log(se: float, df: float, alpha: float = MDE_ALPHA, power: float = MDE_POWER) -> float:
    """Minimum detectable effect (log units): the true difference a one-sided t test at `alpha` finds with
    probability `power`, solved exactly on the noncentral t (≈ (t_{1−α} + t_{power})·se for large df)."""
    if not (math.isfinite(se) and math.isfinite(df)) or df <= 0:
        return math.nan
    if se == 0:
        return 0.0
    upper = (sps.t.ppf(1 - alpha, df) + sps.t.ppf(power, df)) * se * 4 + se
    return float(optimize.brentq(lambda e: power_one_sided(e, se, df, alpha) - power, 0.0, upper, xtol=1e-12 * se))


def n_for_effect(cv_pct: float, effect_pct: float, alpha: float = MDE_ALPHA, power: float = MDE_POWER,
                 n_max: int = 10_000) -> int | None:
    """Runs per arm for a one-sided two-sample t test (equal n, σ_log from the CV) to find `effect_pct`
    with probability `power`; None when n_max is not enough or the inputs are degenerate."""
    sigma = math.sqrt(math.log1p((cv_pct / 100) ** 2))
    effect = abs(math.log1p(-abs(effect_pct) / 100)) if abs(effect_pct) < 100 else math.inf
    if effect == 0 or not math.isfinite(effect):
        return None
    if sigma == 0:
        return 2
    for n in range(2, n_max + 1):
        if power_one_sided(effect, sigma * math.sqrt(2 / n), 2 * n - 2, alpha) >= power:
            return n
    return None


# -- location, drift, pairs ------------------------------------------------------------------------

HL_OUTER_MAX = 1_000_000  # up to this many differences the median is taken of them all (8 MB)


def hodges_lehmann_log(off_logs: Sequence[float], on_logs: Sequence[float]) -> float:
    """Hodges–Lehmann shift (1963): the median of all n_off·n_on differences on_j − off_i.

    Beyond HL_OUTER_MAX differences (10 000 runs per arm would be 10⁸, 800 MB) the two middle order
    statistics are selected without forming the differences (`kth_difference`), with the same result."""
    if not len(off_logs) or not len(on_logs):
        return math.nan
    off, on = np.asarray(off_logs, float), np.asarray(on_logs, float)
    total = off.size * on.size
    if total <= HL_OUTER_MAX:
        return float(np.median(np.subtract.outer(on, off)))
    off_sorted = np.sort(off)
    middle = [kth_difference(off_sorted, on, k) for k in sorted({(total + 1) // 2, total // 2 + 1})]
    return float(sum(middle) / len(middle))


def kth_difference(off_sorted: np.ndarray, on: np.ndarray, k: int) -> float:
    """The k-th smallest (1-based) of all differences on_j − off_i as floating point computes them, without
    forming them: bisect on the value t with an exact count of differences ≤ t, then step up through the
    few distinct differences left in the bracket."""
    n = off_sorted.size

    def first_at_most(t: float) -> np.ndarray:
        # per on_j, the first i with on_j − off_i ≤ t (a suffix, as off is sorted): binary search on the
        # computed differences themselves, so rounding cannot make the count disagree with them
        lo, hi = np.zeros(on.size, np.int64), np.full(on.size, n, np.int64)
        while np.any(lo < hi):
            mid = (lo + hi) // 2
            at_most = (on - off_sorted[np.minimum(mid, n - 1)]) <= t
            active = lo < hi
            hi = np.where(active & at_most, mid, hi)
            lo = np.where(active & ~at_most, mid + 1, lo)
        return lo

    def count_le(t: float) -> int:
        return int(np.sum(n - first_at_most(t)))

    def next_above(t: float) -> float:  # the smallest difference > t
        index = first_at_most(t) - 1
        valid = index >= 0
        return float(np.min(on[valid] - off_sorted[index[valid]]))

    lo, hi = float(np.min(on - off_sorted[-1])), float(np.max(on - off_sorted[0]))
    if count_le(lo) >= k:
        return lo
    for _ in range(100):  # invariant: count_le(lo) < k <= count_le(hi)
        mid = lo + (hi - lo) / 2
        if not lo < mid < hi:
            break
        if count_le(mid) >= k:
            hi = mid
        else:
            lo = mid
    while True:  # the distinct differences in (lo, hi], smallest first
        candidate = next_above(lo)
        if count_le(candidate) >= k:
            return candidate
        lo = candidate


def ols_slope(positions: Sequence[float], values: Sequence[float]) -> float:
    """Least-squares slope of values on positions; NaN below two points or with one position only."""
    x, y = np.asarray(positions, float), np.asarray(values, float)
    if x.size < 2:
        return math.nan
    sxx = float(np.sum((x - x.mean()) ** 2))
    return float(np.sum((x - x.mean()) * (y - y.mean())) / sxx) if sxx > 0 else math.nan


def pooled_slope(groups: Sequence[tuple[Sequence[float], Sequence[float]]]) -> float:
    """Common slope with one intercept per group (ANCOVA): Σ Sxy / Σ Sxx over the groups."""
    sxx = sxy = 0.0
    for positions, values in groups:
        x, y = np.asarray(positions, float), np.asarray(values, float)
        if x.size < 2:
            continue
        sxx += float(np.sum((x - x.mean()) ** 2))
        sxy += float(np.sum((x - x.mean()) * (y - y.mean())))
    return sxy / sxx if sxx > 0 else math.nan


def sign_test_p(better: int, pairs: int) -> float:
    """One-sided sign test: P(at least `better` of `pairs` fair coin flips) — 3/3 gives 0.125.

    The binomial survival function (scipy, computed without big integers), so any number of pairs works;
    the sum of C(n, k) / 2^n it replaces overflowed a float above about 1 025 pairs."""
    if pairs <= 0:
        return math.nan
    return float(sps.binom.sf(better - 1, pairs, 0.5))


# -- the finding's diagnostics ---------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Diagnostics:
    """Everything `stats` gains beside the classic Δ and threshold (see docs/statistics.md)."""

    gm_delta_pct: float  # ratio of geometric means − 1
    ci_low_pct: float
    ci_high_pct: float
    welch_df: float
    p_one_sided: float  # H1: on is better in the gate's direction
    mde_pct: float  # smallest true change found with MDE_POWER at one-sided MDE_ALPHA, this σ and n
    hl_shift_pct: float  # Hodges–Lehmann, n ≥ 4 per arm
    drift_off_pct_per_run: float
    drift_on_pct_per_run: float
    drift_pct_per_run: float  # pooled over both arms
    order_gap_runs: float  # mean position of on runs − mean position of off runs
    order_bias_pct: float  # what the pooled drift adds to Δ through the order
    pairs_sign_p: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "gm_delta_pct": self.gm_delta_pct, "ci_low_pct": self.ci_low_pct, "ci_high_pct": self.ci_high_pct,
            "ci_level": CI_LEVEL, "welch_df": self.welch_df, "p_one_sided": self.p_one_sided,
            "mde_pct": self.mde_pct, "mde_alpha": MDE_ALPHA, "mde_power": MDE_POWER,
            "hl_shift_pct": self.hl_shift_pct, "drift_off_pct_per_run": self.drift_off_pct_per_run,
            "drift_on_pct_per_run": self.drift_on_pct_per_run, "drift_pct_per_run": self.drift_pct_per_run,
            "order_gap_runs": self.order_gap_runs, "order_bias_pct": self.order_bias_pct,
            "pairs_sign_p": self.pairs_sign_p,
        }


def _relative_slope_pct(positions: Sequence[float], values: Sequence[float]) -> float:
    m = stats.mean(values)
    return 100.0 * ols_slope(positions, values) / m if values and m else math.nan


def diagnose(off: Sequence[float], on: Sequence[float], off_positions: Sequence[float],
             on_positions: Sequence[float], *, direction: str, pairs_better: int, pairs: int) -> Diagnostics:
    """The diagnostics of one comparison; positions are the runs' places in execution order."""
    off_logs, on_logs = log_values(off), log_values(on)
    nan = math.nan
    gm = low = high = df = p = mde = hl = nan
    if off_logs is not None and on_logs is not None and len(off) >= 2 and len(on) >= 2:
        diff, se, dfs = (float(a) for a in welch_arrays(off_logs, on_logs))
        lo, hi = ci_arrays(np.float64(diff), np.float64(se), np.float64(dfs), CI_LEVEL)
        gm, low, high, df = pct(diff), pct(float(lo)), pct(float(hi)), dfs
        p = float(p_better_arrays(np.float64(diff), np.float64(se), np.float64(dfs), direction))
        effect = mde_log(se, dfs)
        # the change a lower-is-better gate needs is a drop: e^{−δ} − 1; higher-is-better a rise
        mde = -pct(-effect) if direction == "lower" else pct(effect)
        if len(off) >= 4 and len(on) >= 4:
            hl = pct(hodges_lehmann_log(off_logs.tolist(), on_logs.tolist()))
    mean_all = stats.mean([*off, *on])
    pooled = pooled_slope([(off_positions, off), (on_positions, on)])
    pooled_pct = 100.0 * pooled / mean_all if mean_all and math.isfinite(pooled) else nan
    gap = stats.mean(on_positions) - stats.mean(off_positions) if off_positions and on_positions else nan
    return Diagnostics(
        gm_delta_pct=gm, ci_low_pct=low, ci_high_pct=high, welch_df=df, p_one_sided=p, mde_pct=mde,
        hl_shift_pct=hl, drift_off_pct_per_run=_relative_slope_pct(off_positions, off),
        drift_on_pct_per_run=_relative_slope_pct(on_positions, on), drift_pct_per_run=pooled_pct,
        order_gap_runs=gap, order_bias_pct=pooled_pct * gap if math.isfinite(pooled_pct * gap) else nan,
        pairs_sign_p=sign_test_p(pairs_better, pairs),
    )


def classic_warnings(diag: Diagnostics, *, order: str, direction: str, sigma_off_pct: float, sigma_on_pct: float,
                     delta_pct: float, threshold_pct: float) -> list[str]:
    """Warnings about the classic decision's own evidence (the classic policy asks for them; under another
    policy the classic figures only sit beside the decision)."""
    def decide(delta: float, threshold: float) -> str:
        return classic_decision(delta, threshold, direction).value

    warnings: list[str] = []
    if math.isfinite(sigma_on_pct) and math.isfinite(sigma_off_pct) and sigma_on_pct > 2 * sigma_off_pct:
        warnings.append(
            f"σ_on {sigma_on_pct:.4f} % is more than twice σ_off {sigma_off_pct:.4f} %: the classic threshold "
            f"max(k·σ_off, floor) ignores the on arm's noise; the Welch 95 % CI of Δ is "
            f"[{diag.ci_low_pct:+.4f} %, {diag.ci_high_pct:+.4f} %]")
    if decide(delta_pct, threshold_pct) == "adopted" and math.isfinite(diag.ci_high_pct) \
            and diag.ci_low_pct <= 0 <= diag.ci_high_pct:
        warnings.append(
            f"the classic rule adopts, but the Welch 95 % CI of Δ [{diag.ci_low_pct:+.4f} %, "
            f"{diag.ci_high_pct:+.4f} %] contains 0 %: no change is not ruled out (one-sided p {diag.p_one_sided:.4f}); "
            "the sequential policy would run more rounds before deciding")
    bias, gap = diag.order_bias_pct, diag.order_gap_runs
    # Blocked runs (an import) confound drift with the arm: no correction is meaningful, and the finding
    # already warns that the runs were not interleaved.
    if math.isfinite(bias) and math.isfinite(delta_pct) and gap != 0 and order != "blocked":
        corrected = delta_pct - bias
        flips = decide(corrected, threshold_pct) != decide(delta_pct, threshold_pct)
        if flips or abs(bias) >= 0.5 * threshold_pct:
            warnings.append(
                f"order {order} puts the on runs {gap:+.2f} run(s) after the off runs on average, so the "
                f"drift of {diag.drift_pct_per_run:+.4f} %/run biases Δ by {bias:+.4f} %; without it Δ would be "
                f"{corrected:+.4f} % ({decide(corrected, threshold_pct)}); orders abba or thue-morse cancel "
                "a linear drift")
    return warnings


@dataclass(frozen=True, slots=True)
class GuardNoise:
    """A guard's difference (on − off, absolute units) with its Welch CI."""

    ci_low: float
    ci_high: float
    within_noise: bool  # the CI contains the guard's limit: the point estimate decided inside its noise

    def to_dict(self) -> dict[str, Any]:
        return {"ci_low": self.ci_low, "ci_high": self.ci_high, "ci_level": CI_LEVEL,
                "within_noise": self.within_noise}


def guard_noise(spec: GuardSpec, off_values: Sequence[float], on_values: Sequence[float]) -> GuardNoise | None:
    """The guard's Welch CI on the raw metric; None below two values an arm."""
    if len(off_values) < 2 or len(on_values) < 2:
        return None
    diff, se, df = (float(a) for a in welch_arrays(np.asarray(off_values, float), np.asarray(on_values, float)))
    lo, hi = (float(a) for a in ci_arrays(np.float64(diff), np.float64(se), np.float64(df), CI_LEVEL))
    limit = -spec.max_drop if spec.direction == "higher" else spec.max_drop
    return GuardNoise(lo, hi, lo < limit < hi)


def guard_warning(metric: str, delta: float, noise: GuardNoise, limit: float) -> str:
    return (f"guard {metric} is decided by a point estimate inside its own noise: Δ {delta:+.4f}, Welch 95 % CI "
            f"[{noise.ci_low:+.4f}, {noise.ci_high:+.4f}] contains the limit {limit:+g}")
