"""Statistics against hand-computed values and scipy/numpy, never against themselves."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from gatekit import stats

OFF = [125.094, 124.605, 123.966]
ON = [123.987, 122.062, 122.254]


def test_mean_and_sample_sd_match_numpy_and_scipy() -> None:
    assert stats.mean(OFF) == pytest.approx(np.mean(OFF), rel=1e-15)
    assert stats.sample_sd(OFF) == pytest.approx(np.std(OFF, ddof=1), rel=1e-12)
    assert stats.relative_sd_pct(OFF) == pytest.approx(100 * sps.variation(OFF, ddof=1), rel=1e-12)


def test_seed_table_by_hand() -> None:
    # off mean = 373.665 / 3 = 124.555; deviations 0.539, 0.050, -0.589;
    # s = sqrt((0.290521 + 0.0025 + 0.346921) / 2) = sqrt(0.319971) = 0.565660
    assert stats.mean(OFF) == pytest.approx(124.555, abs=1e-9)
    assert stats.sample_sd(OFF) == pytest.approx(0.565660, abs=1e-6)
    assert stats.relative_sd_pct(OFF) == pytest.approx(0.45414, abs=1e-5)
    # on mean = 368.303 / 3 = 122.767667; Δ = -1.787333 / 124.555 = -1.43498 %
    assert stats.delta_pct(stats.mean(OFF), stats.mean(ON)) == pytest.approx(-1.43498, abs=1e-5)


def test_threshold_is_max_of_k_sigma_and_floor() -> None:
    assert stats.threshold_pct(0.4541, 2.0, 1.0) == 1.0
    assert stats.threshold_pct(0.8, 2.0, 1.0) == pytest.approx(1.6)
    assert stats.threshold_pct(math.nan, 2.0, 1.0) == 1.0  # n = 1: σ undefined, the floor decides


def test_degenerate_inputs() -> None:
    assert math.isnan(stats.sample_sd([1.0]))
    assert math.isnan(stats.mean([]))
    assert math.isnan(stats.delta_pct(0.0, 1.0))
    assert stats.z_scores([2.0, 2.0, 2.0]) == [0.0, 0.0, 0.0]
    assert stats.z_scores([5.0]) == [0.0]
    assert stats.leave_one_out_z_scores([1.0, 1.0, 1.0, 2.0])[3] == math.inf


@pytest.mark.parametrize("n", [2, 3, 4, 5, 10, 11])
def test_samuelson_bound_is_attained_and_never_exceeded(n: int) -> None:
    # One outlier and n-1 equal points attain the bound exactly (Samuelson 1968).
    values = [0.0] * (n - 1) + [1.0]
    assert max(stats.z_scores(values)) == pytest.approx(stats.max_attainable_z(n), rel=1e-12)
    rng = np.random.default_rng(n)
    for _ in range(200):
        sample = rng.lognormal(size=n).tolist()
        assert max(stats.z_scores(sample)) <= stats.max_attainable_z(n) + 1e-12


def test_rule_ii_unreachable_up_to_n_10() -> None:
    assert stats.max_attainable_z(3) == pytest.approx(2 / math.sqrt(3))  # 1.1547
    assert all(stats.max_attainable_z(n) < 3 for n in range(2, 11))
    assert stats.max_attainable_z(11) > 3


def test_leave_one_out_z_by_hand() -> None:
    values = [10.0, 10.2, 9.8, 13.0]
    # for 13.0: others 10, 10.2, 9.8 → mean 10.0, s = 0.2 → z = 15
    assert stats.leave_one_out_z_scores(values)[3] == pytest.approx(15.0)
    others = values[:3]
    assert stats.leave_one_out_z_scores(values)[3] == pytest.approx(
        abs(13.0 - np.mean(others)) / np.std(others, ddof=1))


def test_median_and_pairs() -> None:
    assert stats.median([3.0, 1.0, 2.0]) == 2.0
    assert stats.median([4.0, 1.0, 2.0, 3.0]) == pytest.approx(np.median([4.0, 1.0, 2.0, 3.0]))
    assert stats.pairs_better(list(zip(OFF, ON)), "lower") == 3
    assert stats.pairs_better([(1.0, 1.0), (1.0, 2.0)], "higher") == 1  # a tie is not better
