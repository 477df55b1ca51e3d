"""Sequential v7: the floor applies to the bound HL ∓ S, equivalence needs the plain mean's interval inside the floor
too (a slow state in one arm's runs is a change of the mean, not noise to take out), in the block-shuffle order."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps

from gatekit.policies.sequential import (CALIBRATION_ALPHA, DESIGNS, look_codes, mean_inside_floor)
from gatekit.simulate import Scenario, simulate
from gatekit.verdict import ADOPTED, CONTINUE, REGRESSION, REJECTED

DRAWS = 20_000


def test_the_floor_applies_to_the_bound_hl_minus_one_scale() -> None:
    # HL −1.5 % (log), S 0.3 %: HL/S = 5 beyond c = 4; the estimate clears the 1 % floor, HL + S = −1.2 % does too
    assert int(look_codes(-0.015, 0.003, floor_pct=1.0, direction="lower", final=False, critical=4.0,
                          floor_critical=1.0)) == ADOPTED
    # HL −1.2 %, S 0.25 %: HL/S 4.8 beyond c, HL beyond the floor (v6 adopts), but HL + S = −0.95 % is not
    diff, scale = -0.012, 0.0025
    assert int(look_codes(diff, scale, floor_pct=1.0, direction="lower", final=False, critical=4.0)) == ADOPTED
    assert int(look_codes(diff, scale, floor_pct=1.0, direction="lower", final=False, critical=4.0,
                          floor_critical=1.0)) == CONTINUE
    # the same on the worse side: +1.2 % − S = +0.95 % is not a floor-sized regression (log(1.01) = 0.995 %), and
    # the interval rules out an improvement: rejected
    assert int(look_codes(-diff, scale, floor_pct=1.0, direction="lower", final=False, critical=4.0,
                          floor_critical=1.0)) == REJECTED
    assert int(look_codes(0.0125, 0.002, floor_pct=1.0, direction="lower", final=False, critical=4.0,
                          floor_critical=1.0)) == REGRESSION


def test_mean_inside_floor_is_the_t_interval_scipy_gives() -> None:
    rng = np.random.default_rng(4)
    d = rng.normal(0.004, 0.008, (200, 8))
    inside = mean_inside_floor(d, 1.0)
    for row, verdict in zip(d, inside):
        low, high = sps.t.interval(1 - 2 * CALIBRATION_ALPHA, len(row) - 1, loc=row.mean(), scale=sps.sem(row))
        assert bool(verdict) is bool(low > math.log(0.99) and high < math.log(1.01))
    assert 0 < inside.sum() < 200  # both answers occur
    # by hand: d = 0, 0.01 (n = 2): mean 0.005, sd 0.00707, t(0.955, 1) = 7.03 → half 0.035: not inside
    assert not bool(mean_inside_floor(np.array([0.0, 0.01]), 1.0))


# The issue's row (half of the on arm's runs 10 % slower) is reported in the suite; the rule has no tuned constant,
# and these magnitudes are others than the issue's.
HELD_OUT = [(0.5, 20.0, 0.5), (0.4, 15.0, 0.5), (0.6, 8.0, 1.0), (0.5, 5.0, 2.0)]


def test_a_slow_state_in_the_on_arm_only_is_never_equivalent_beyond_5_percent() -> None:
    for rate, pct, cv in HELD_OUT:
        scenario = Scenario(cv_off_pct=cv, outlier_rate=rate, outlier_pct=pct, outlier_on_only=True)
        v7 = simulate("sequential", scenario, draws=DRAWS, seed=7, version=7)
        assert v7.rates["equivalent"].pct + 3 * v7.rates["equivalent"].se_pct <= 5.0, (rate, pct, cv, v7.rates)
        assert v7.adopted.pct < 1.0
    issue = Scenario(cv_off_pct=0.5, outlier_rate=0.5, outlier_pct=10.0, outlier_on_only=True)
    v6 = simulate("sequential", issue, draws=DRAWS, seed=7, version=6)
    assert v6.rates["equivalent"].pct > 10.0  # v6 took the state out and called it equivalent


def test_on_only_states_slow_only_the_on_arm() -> None:
    from gatekit.simulate import simulate_runs
    off, on, _, _ = simulate_runs(Scenario(cv_off_pct=0.0, outlier_rate=0.5, outlier_pct=10.0, outlier_on_only=True),
                                  "abab", 12, 4000, np.random.default_rng(1))
    assert (off == 0).all() and abs(float(np.mean(on > 0)) - 0.5) < 0.02


def test_a_change_below_the_floor_is_rarely_adopted() -> None:
    below = Scenario(cv_off_pct=0.2, effect_pct=-0.8)
    v7, v6 = (simulate("sequential", below, draws=DRAWS, seed=8, version=v) for v in (7, 6))
    assert v7.adopted.pct + 3 * v7.adopted.se_pct <= 5.0 < v6.adopted.pct
    assert v7.meaning == "adoption below the floor"
    power = simulate("sequential", Scenario(cv_off_pct=0.5, effect_pct=-2.0), draws=DRAWS, seed=8, version=7)
    assert power.adopted.pct > 99.0 and power.meaning == "power"


def test_v7_keeps_v5_s_critical_values_and_records_its_rules() -> None:
    v7, v5 = DESIGNS[7], DESIGNS[5]
    assert v7.critical == v5.critical and v7.states == v5.states and v7.order == "block-shuffle"
    assert v7.floor_critical == (1.0, 1.0, 1.0) and v7.mean_equivalence
    assert DESIGNS[6].floor_critical is None and not DESIGNS[6].mean_equivalence  # old series keep their rules


def test_earlier_versions_state_their_rules_in_their_own_words() -> None:
    from gatekit.config import RulesSpec, ThresholdSpec
    from gatekit.policies.sequential import policy
    v6, v7 = (" ".join(policy(v).stated_rules("t", RulesSpec(), ThresholdSpec())) for v in (6, 7))
    assert "AND HL is at least 1 % better" in v6 and "worse side AND at least 1 % worse" in v6
    assert "plain mean" not in v6 and "block of two rounds" in v6
    assert "AND HL - q S (q = 1, 1, 1 at looks 1, 2, 3) is at least 1 % better" in v7
    assert "AND HL + q S (q = 1, 1, 1 at looks 1, 2, 3) is at least 1 % worse" in v7
    assert "t interval of the plain mean of d" in v7 and "two AB and two BA rounds" in v7
