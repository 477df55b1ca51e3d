"""Diagnostics against hand-computed values and scipy, never against themselves."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from gatekit import diagnostics as dg
from gatekit.config import GuardSpec

OFF = [125.094, 124.605, 123.966]  # the seed's §6 runs (DESIGN worked example)
ON = [123.987, 122.062, 122.254]


def test_welch_by_hand() -> None:
    # off 1,2,3 (s² = 1), on 2,4,6 (s² = 4): diff 2, se = sqrt(1/3 + 4/3) = 1.290994,
    # df = (5/3)² / ((1/3)²/2 + (4/3)²/2) = 2.777778 / 0.944444 = 2.941176
    diff, se, df = dg.welch_arrays(np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 6.0]))
    assert float(diff) == pytest.approx(2.0)
    assert float(se) == pytest.approx(math.sqrt(5 / 3), rel=1e-12)
    assert float(df) == pytest.approx(50 / 17, rel=1e-12)
    _, _, conservative = dg.welch_arrays(np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 6.0, 8.0]), "conservative")
    assert float(conservative) == 2.0  # min(3, 4) − 1


def test_welch_on_logs_matches_scipy() -> None:
    off, on = np.log(OFF), np.log(ON)
    diff, se, df = dg.welch_arrays(off, on)
    ref = sps.ttest_ind(on, off, equal_var=False, alternative="less")
    assert float(diff / se) == pytest.approx(ref.statistic, rel=1e-12)
    assert float(df) == pytest.approx(ref.df, rel=1e-12)
    assert float(dg.p_better_arrays(diff, se, df, "lower")) == pytest.approx(ref.pvalue, rel=1e-10)
    greater = sps.ttest_ind(on, off, equal_var=False, alternative="greater")
    assert float(dg.p_better_arrays(diff, se, df, "higher")) == pytest.approx(greater.pvalue, rel=1e-10)
    lo, hi = dg.ci_arrays(diff, se, df, 0.95)
    ci = sps.ttest_ind(on, off, equal_var=False).confidence_interval(0.95)
    assert (float(lo), float(hi)) == pytest.approx((ci.low, ci.high), rel=1e-10)


def test_welch_vectorised_rows_equal_scipy_rows() -> None:
    rng = np.random.default_rng(3)
    off, on = rng.normal(0, 1, (50, 4)), rng.normal(0.5, 2, (50, 5))
    diff, se, df = dg.welch_arrays(off, on)
    ref = sps.ttest_ind(on, off, equal_var=False, axis=1)
    np.testing.assert_allclose(diff / se, ref.statistic, rtol=1e-12)
    np.testing.assert_allclose(df, ref.df, rtol=1e-12)


def test_welch_degenerate_inputs() -> None:
    diff, se, df = dg.welch_arrays(np.array([1.0]), np.array([1.0, 2.0]))
    assert math.isnan(float(diff)) and math.isnan(float(se)) and math.isnan(float(df))
    diff, se, df = dg.welch_arrays(np.array([2.0, 2.0, 2.0]), np.array([1.0, 1.0, 1.0]))
    assert float(se) == 0.0 and float(df) == 4.0 and float(diff) == -1.0
    assert float(dg.p_better_arrays(diff, se, df, "lower")) == 0.0  # exactly better, no noise
    assert float(dg.p_better_arrays(diff, se, df, "higher")) == 1.0
    assert float(dg.p_better_arrays(np.float64(0.0), np.float64(0.0), df, "lower")) == 1.0
    lo, hi = dg.ci_arrays(diff, se, df, 0.95)
    assert float(lo) == float(hi) == -1.0
    assert dg.log_values([1.0, 0.0]) is None and dg.log_values([1.0, -2.0]) is None


def test_seed_diagnostics_by_hand() -> None:
    d = dg.diagnose(OFF, ON, [1, 3, 5], [2, 4, 6], direction="lower", pairs_better=3, pairs=3)
    # ratio of geometric means: (122.7664.../124.5544...) − 1
    gm_off, gm_on = sps.gmean(OFF), sps.gmean(ON)
    assert d.gm_delta_pct == pytest.approx(100 * (gm_on / gm_off - 1), rel=1e-10)
    assert d.gm_delta_pct == pytest.approx(-1.4367, abs=1e-4)
    # the seed's adoption has a 95 % CI that includes 0 and a one-sided p of 0.041
    assert d.ci_low_pct == pytest.approx(-3.1747, abs=1e-4) and d.ci_high_pct == pytest.approx(0.3324, abs=1e-4)
    assert d.p_one_sided == pytest.approx(0.0407, abs=1e-4)
    assert d.pairs_sign_p == 0.125
    assert math.isnan(d.hl_shift_pct)  # needs n ≥ 4 per arm
    # drift: off slope by hand: positions 1,3,5, Sxx = 8, Sxy = (−2)(0.539) + 0 + 2(−0.589) = −2.256 →
    # −0.282 s/run = −0.2264 % of 124.555
    assert d.drift_off_pct_per_run == pytest.approx(100 * -2.256 / 8 / 124.555, rel=1e-9)
    assert d.order_gap_runs == 1.0
    assert d.order_bias_pct == pytest.approx(d.drift_pct_per_run)


def test_drift_slopes_match_scipy_and_lstsq() -> None:
    x_off, y_off = [1, 3, 5, 8], [10.0, 10.2, 10.1, 10.5]
    x_on, y_on = [2, 4, 6, 7], [9.0, 9.3, 9.1, 9.6]
    assert dg.ols_slope(x_off, y_off) == pytest.approx(sps.linregress(x_off, y_off).slope, rel=1e-12)
    design = np.column_stack([[1, 1, 1, 1, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1, 1, 1], x_off + x_on])
    coef, *_ = np.linalg.lstsq(design, np.array(y_off + y_on), rcond=None)
    assert dg.pooled_slope([(x_off, y_off), (x_on, y_on)]) == pytest.approx(coef[2], rel=1e-12)
    assert math.isnan(dg.ols_slope([1], [2.0])) and math.isnan(dg.ols_slope([2, 2], [1.0, 3.0]))


def test_hodges_lehmann_by_hand() -> None:
    # differences on_j − off_i of off 1,2,3,4 / on 2,3,5,8, sorted:
    # −2 −1 −1 0 0 1 1 1 2 2 3 4 4 5 6 7 → median (1 + 2)/2 = 1.5
    assert dg.hodges_lehmann_log([1, 2, 3, 4], [2, 3, 5, 8]) == 1.5
    d = dg.diagnose([10.0, 10.1, 9.9, 10.0], [9.0, 9.1, 8.9, 9.0], [1, 4, 5, 8], [2, 3, 6, 7],
                    direction="lower", pairs_better=4, pairs=4)
    assert d.hl_shift_pct == pytest.approx(100 * (math.exp(np.median(np.subtract.outer(
        np.log([9.0, 9.1, 8.9, 9.0]), np.log([10.0, 10.1, 9.9, 10.0])))) - 1))
    assert d.order_gap_runs == 0.0 and d.order_bias_pct == 0.0  # abba: no order bias


def test_sign_test_matches_scipy() -> None:
    for k, n in [(3, 3), (2, 3), (4, 4), (6, 8)]:
        assert dg.sign_test_p(k, n) == pytest.approx(sps.binomtest(k, n, 0.5, alternative="greater").pvalue)
    assert dg.sign_test_p(3, 3) == 0.125  # "3/3 pairs" can never be significant at 0.05


def test_mann_whitney_cannot_reach_005_at_3_vs_3() -> None:
    # the most extreme 3 vs 3 arrangement: exact one-sided p = 1/C(6,3) = 0.05, two-sided 0.1
    assert sps.mannwhitneyu([1, 2, 3], [4, 5, 6], alternative="less", method="exact").pvalue == pytest.approx(0.05)
    assert sps.mannwhitneyu([1, 2, 3], [4, 5, 6], method="exact").pvalue == pytest.approx(0.10)


def test_mde_large_df_is_the_normal_formula() -> None:
    # (z_0.95 + z_0.80)·se = (1.644854 + 0.841621)·se = 2.486475·se
    assert dg.mde_log(0.01, 1e7) == pytest.approx(0.02486475, rel=1e-5)
    assert dg.mde_log(0.0, 4.0) == 0.0 and math.isnan(dg.mde_log(0.01, math.nan))


def test_mde_gives_80_percent_power_in_a_monte_carlo_t_test() -> None:
    n, sigma = 4, 0.01
    effect = dg.mde_log(sigma * math.sqrt(2 / n), 2 * n - 2)
    rng = np.random.default_rng(11)
    off, on = rng.normal(0, sigma, (40_000, n)), rng.normal(-effect, sigma, (40_000, n))
    p = sps.ttest_ind(on, off, axis=1, alternative="less").pvalue  # Student t, df = 2n − 2
    power = float(np.mean(p < 0.05))
    assert power == pytest.approx(0.80, abs=0.01)  # Monte-Carlo SE 0.002


def test_power_matches_a_monte_carlo_t_test() -> None:
    # noncentral-t power of a one-sided Student t at n = 13, effect size d = 1 (σ = 1), by simulation
    rng = np.random.default_rng(5)
    off, on = rng.normal(0, 1, (40_000, 13)), rng.normal(1, 1, (40_000, 13))
    simulated = float(np.mean(sps.ttest_ind(on, off, axis=1, alternative="greater").pvalue < 0.05))
    assert dg.power_one_sided(1.0, math.sqrt(2 / 13), 24, 0.05) == pytest.approx(simulated, abs=0.01)


def test_n_for_effect_is_the_smallest_n_with_80_percent_power() -> None:
    # effect size d = 1: the normal approximation 2·(z_0.95 + z_0.80)²/d² = 12.4 says 13; the exact
    # noncentral t needs one more run (power 0.797 at 13, 0.824 at 14)
    sigma = 0.05
    cv_pct = 100 * math.sqrt(math.expm1(sigma ** 2))
    effect_pct = 100 * (1 - math.exp(-sigma))
    assert dg.n_for_effect(cv_pct, effect_pct) == 14
    assert dg.power_one_sided(1.0, math.sqrt(2 / 13), 24, 0.05) == pytest.approx(0.7972, abs=1e-4)
    assert dg.power_one_sided(1.0, math.sqrt(2 / 14), 26, 0.05) == pytest.approx(0.8241, abs=1e-4)
    assert dg.n_for_effect(cv_pct, effect_pct * 2) < 14
    assert dg.n_for_effect(cv_pct, 0.0) is None


def test_guard_noise_and_warnings() -> None:
    guard = GuardSpec("psnr_db", "higher", 0.05)
    noise = dg.guard_noise(guard, [30.01, 30.05, 30.07], [30.02, 30.06, 30.08])
    ci = sps.ttest_ind([30.02, 30.06, 30.08], [30.01, 30.05, 30.07], equal_var=False).confidence_interval(0.95)
    assert (noise.ci_low, noise.ci_high) == pytest.approx((ci.low, ci.high))
    assert noise.within_noise  # −0.05 lies inside the CI
    # the seed's PSNR guard: Δ +0.053 with a CI clear of −0.05 → not inside its noise
    seed = dg.guard_noise(guard, [36.125, 36.154, 36.099], [36.209, 36.183, 36.145])
    assert not seed.within_noise
    identical = dg.guard_noise(guard, [30.0, 30.0, 30.0], [30.0, 30.0, 30.0])  # the demo: bit-identical PSNR
    assert identical.ci_low == identical.ci_high == 0.0 and not identical.within_noise
    assert dg.guard_noise(guard, [30.0], [30.0, 30.1]) is None
