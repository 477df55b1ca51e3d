"""The censored policy and its statistics: the lognormal AFT fit with right-censoring (gatekit.survival)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, stats

from gatekit import survival
from gatekit.policies.censored import CENSORED, MAX_CENSORED_FRAC, codes, too_censored
from gatekit.runtable import RunTable
from gatekit.simulate import CENSORED_ROWS, meets, simulate
from gatekit.verdict import ADOPTED, EQUIVALENT, INCONCLUSIVE, REGRESSION, Decision, Verdict

OFF = [2.0, 2.2, 1.9, 2.1]
ON = [2.5, 2.4, 2.8, 2.6]


def test_with_nothing_censored_the_fit_is_the_closed_form_two_sample_t_on_log_times() -> None:
    fit = survival.fit(OFF, [False] * 4, ON, [False] * 4)
    log_off, log_on = np.log(OFF), np.log(ON)
    beta = log_on.mean() - log_off.mean()
    pooled = math.sqrt((((log_off - log_off.mean()) ** 2).sum() + ((log_on - log_on.mean()) ** 2).sum()) / 6)
    rss_sigma = math.sqrt((((log_off - log_off.mean()) ** 2).sum() + ((log_on - log_on.mean()) ** 2).sum()) / 8)
    assert fit.log_ratio == pytest.approx(beta, abs=1e-12)
    assert fit.sigma == pytest.approx(rss_sigma, rel=1e-9)  # the ML σ: RSS / n
    assert fit.se == pytest.approx(pooled * math.sqrt(1 / 4 + 1 / 4), rel=1e-9)
    assert fit.df == 6
    low, high = fit.interval(0.05)
    t = stats.ttest_ind(log_on, log_off, equal_var=True, alternative="greater")
    c = stats.t.ppf(0.95, 6)
    assert (beta - low) / c == pytest.approx(beta / t.statistic, rel=1e-9) and high - beta == pytest.approx(beta - low)


def _direct_likelihood_maximum(logs: np.ndarray, censored: np.ndarray, on: np.ndarray) -> np.ndarray:
    """The same likelihood written out with scipy's normal density and survival function, maximised by
    Nelder–Mead: an independent computation of the censored fit."""
    def nll(theta: np.ndarray) -> float:
        z = (logs - theta[0] - theta[1] * on) / math.exp(theta[2])
        return -float(np.where(censored, stats.norm.logsf(z), stats.norm.logpdf(z) - theta[2]).sum())
    result = optimize.minimize(nll, [0.7, 0.2, -2.0], method="Nelder-Mead",
                               options={"xatol": 1e-11, "fatol": 1e-13, "maxiter": 40_000})
    return np.asarray(result.x)


def test_with_censored_runs_the_fit_is_the_maximum_of_the_censored_likelihood() -> None:
    off_censored, on_censored = [False, False, False, True], [False, True, False, True]
    fit = survival.fit(OFF, off_censored, ON, on_censored)
    logs = np.log(OFF + ON)
    censored = np.array(off_censored + on_censored)
    on = np.array([0.0] * 4 + [1.0] * 4)
    direct = _direct_likelihood_maximum(logs, censored, on)
    assert fit.converged and fit.log_ratio == pytest.approx(direct[1], abs=1e-6)
    assert fit.sigma == pytest.approx(math.exp(direct[2]), rel=1e-6)
    assert fit.df == 3  # 5 reached runs − 2
    # a censored run counts as longer than its time: censoring the on arm's runs raises the estimated ratio
    assert fit.log_ratio > survival.fit(OFF, off_censored, ON, [False] * 4).log_ratio


def test_a_hand_computed_censored_case() -> None:
    """Off reached at 1, 1, e, e (log 0, 0, 1, 1); on reached at e, e² (log 1, 2) and a run censored at e^1.5.
    The censored run's score term h(z)/σ makes the on mean exceed the reached mean 1.5, and at the maximum the
    score equations hold: Σ reached z + Σ censored h(z) = 0 in each arm (checked here by hand with scipy's
    normal functions, not the module's)."""
    off = [1.0, 1.0, math.e, math.e]
    on = [math.e, math.e ** 2, math.e ** 1.5]
    fit = survival.fit(off, [False] * 4, on, [False, False, True])
    mu = 0.5  # the off arm has no censored run: its score equation makes μ̂ its mean log time
    sigma, beta = fit.sigma, fit.log_ratio
    z_on = (np.array([1.0, 2.0, 1.5]) - mu - beta) / sigma
    hazard = stats.norm.pdf(z_on[2]) / stats.norm.sf(z_on[2])
    assert z_on[0] + z_on[1] + hazard == pytest.approx(0.0, abs=1e-8)
    z_off = (np.array([0.0, 0.0, 1.0, 1.0]) - mu) / sigma
    z_reached = np.concatenate([z_off, z_on[:2]])
    assert (z_reached ** 2 - 1).sum() + hazard * z_on[2] == pytest.approx(0.0, abs=1e-8)  # the σ score
    assert beta + mu > 1.5


def test_the_fit_needs_two_reached_runs_in_each_arm() -> None:
    fit = survival.fit(OFF, [False, True, True, True], ON, [False] * 4)
    assert math.isnan(fit.log_ratio)
    assert too_censored(np.array([[False, True, True, True, False, False, False, False]]),
                        np.array([[0, 0, 0, 0, 1, 1, 1, 1]]))[0]
    half = np.array([[True, True, False, False, True, True, False, False]])
    assert not too_censored(half, np.array([[0, 0, 0, 0, 1, 1, 1, 1]]))[0] and MAX_CENSORED_FRAC == 0.5


def test_the_outcome_codes_read_the_interval_against_the_floor() -> None:
    se, df = np.array([0.01]), np.array([10])
    assert codes(np.array([math.log(1.10)]), se, df, floor_pct=1.0)[0] == REGRESSION
    assert codes(np.array([math.log(0.90)]), se, df, floor_pct=1.0)[0] == ADOPTED
    assert codes(np.array([0.0]), np.array([0.001]), df, floor_pct=1.0)[0] == EQUIVALENT
    assert codes(np.array([0.0]), np.array([0.2]), df, floor_pct=1.0)[0] == INCONCLUSIVE
    assert codes(np.array([math.nan]), se, df, floor_pct=1.0)[0] == INCONCLUSIVE


def _table(off: list[tuple[float, bool]], on: list[tuple[float, bool]]) -> RunTable:
    rows = [{"order": i + 1, "arm": arm, "label": f"{arm}-r{k + 1}", "pair": k + 1, "value": value,
             "censored": cut, "used": True}
            for i, (arm, k, (value, cut)) in enumerate([("off", k, v) for k, v in enumerate(off)]
                                                       + [("on", k, v) for k, v in enumerate(on)])]
    return RunTable.of(rows)


def _decide(table: RunTable) -> Verdict:
    classic = Verdict(Decision.REJECTED, ("within the threshold",))
    return CENSORED.decide(classic, table, [], off_arm="off", on_arm="on", primary="time_to_target_s",
                           direction="lower", guards=[], floor_pct=1.0, warnings=[]).verdict


def test_the_policy_calls_a_slower_convergence_a_regression_and_too_many_censored_inconclusive() -> None:
    slow = _decide(_table([(2.0, False), (2.1, False), (1.9, False), (2.05, False)],
                          [(2.5, False), (2.6, False), (2.4, False), (2.7, True)]))
    assert slow.decision is Decision.REGRESSION and slow.reason_codes[0] == "aft_estimate"
    censored = _decide(_table([(2.0, False), (2.1, False), (1.9, False), (2.05, False)],
                              [(2.5, False), (2.6, True), (2.4, True), (2.7, True)]))
    assert censored.decision is Decision.INCONCLUSIVE and censored.reason_codes[0] == "too_censored"
    assert "on 3/4" in censored.reasons[0]


@pytest.mark.parametrize("scenario, target", CENSORED_ROWS, ids=[s.name for s, _ in CENSORED_ROWS])
def test_the_censored_rows_meet_their_targets(scenario, target) -> None:
    result = simulate("censored", scenario, draws=2000, seed=3)
    assert meets(result), (scenario.name, result.adopted.pct)
    if scenario.effect_pct == 0:  # an A/A gate is called a regression no more often than adopted
        assert result.rates["regression"].pct <= 5.0


def test_only_a_policy_that_simulates_censoring_takes_a_censored_scenario() -> None:
    from gatekit.errors import ConfigError
    from gatekit.simulate import Scenario

    with pytest.raises(ConfigError, match="--censored-pct: needs --policy censored"):
        simulate("classic", Scenario(cv_off_pct=10.0, censored_pct=30.0), draws=10)
    with pytest.raises(ConfigError, match="--censored-pct: must be from 0 to below 100 %"):
        simulate("censored", Scenario(cv_off_pct=10.0, censored_pct=100.0), draws=10)


def test_runs_of_one_time_per_arm_decide_without_a_singular_fit() -> None:
    """A deterministic trainer counted in steps: every run of an arm the same; σ̂ sits at its floor."""
    slower = survival.fit([130.0] * 3, [False] * 3, [180.0] * 3, [False] * 3)
    assert slower.log_ratio == pytest.approx(math.log(180 / 130)) and slower.se < 1e-9
    assert codes(np.array([slower.log_ratio]), np.array([slower.se]), np.array([slower.df]), floor_pct=5.0)[0] \
        == REGRESSION
    same = survival.fit([130.0] * 3, [False] * 3, [130.0] * 3, [False] * 3)
    assert codes(np.array([same.log_ratio]), np.array([same.se]), np.array([same.df]), floor_pct=5.0)[0] \
        == EQUIVALENT
