"""The bisect's one-step model (gatekit.bisect.posterior) against computations done another way: least squares
by hand, the marginal likelihood integrated numerically by scipy, the mutual information by quadrature; and the
bisect's simulation against the baseline it is compared with."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import integrate

from gatekit.bisect.posterior import (Pair, best_probes, binary_information, credible_set, cumulative, design,
                                      effect_estimate, log_evidence, posterior)
from gatekit.bisect.simulation import BisectScenario, endpoints_differ, simulate_bisect
from tests.conftest import gate_invoke

# Commits 0 (GOOD) … 3 (BAD): two endpoint pairs, then commit 1 probed twice (it looks good), commit 2 once (bad).
PAIRS = [Pair(3, 0, 0.021), Pair(3, 0, 0.018), Pair(1, 0, 0.002), Pair(1, 0, -0.001), Pair(2, 0, 0.019)]


def test_design_is_the_step_indicator() -> None:
    a = design([Pair(2, 0, 0.0), Pair(1, 3, 0.0)], 3)
    # probe 2 against GOOD: bad for k ≤ 2; probe 1 against BAD (3): −1 for k ∈ {2, 3}
    assert a.tolist() == [[1, 1, 0], [0, -1, -1]]


def test_log_evidence_by_hand() -> None:
    d = np.array([p.log_diff for p in PAIRS])
    expected = []
    for k in (1, 2, 3):
        a = np.array([float(p.probe >= k) for p in PAIRS])
        delta = (a @ d) / (a @ a)
        sse = ((d - delta * a) ** 2).sum()
        expected.append(-0.5 * math.log(a @ a) - 0.5 * (len(d) - 1) * math.log(sse))
    assert np.allclose(log_evidence(PAIRS, 3), expected)
    # the culprit the data point to: commit 1 is good, commit 2 bad
    assert int(np.argmax(posterior(PAIRS, 3))) + 1 == 2


def test_posterior_equals_the_integrated_likelihood() -> None:
    """p(d | k) = ∫∫ Π N(d_j; δ a_j, s²) · (1/s) dδ ds, integrated by scipy (flat δ, Jeffreys s)."""
    d = np.array([p.log_diff for p in PAIRS])

    def evidence(k: int) -> float:
        a = np.array([float(p.probe >= k) for p in PAIRS])

        def density(delta: float, log_s: float) -> float:  # s = e^log_s, so (1/s) ds = d log_s
            s = math.exp(log_s)
            r = d - delta * a
            return float(np.exp(-0.5 * (r @ r) / s**2 - len(d) * log_s))

        return integrate.dblquad(density, math.log(1e-4), math.log(0.2), -0.2, 0.2, epsabs=0, epsrel=1e-7)[0]

    numeric = np.array([evidence(k) for k in (1, 2, 3)])
    assert np.allclose(posterior(PAIRS, 3), numeric / numeric.sum(), rtol=1e-4)


def test_prior_zero_excludes_a_commit() -> None:
    p = posterior(PAIRS, 3, prior=[1.0, 0.0, 1.0])
    assert p[1] == 0 and math.isclose(p.sum(), 1.0)


def test_effect_estimate_is_least_squares() -> None:
    delta, se, dof = effect_estimate(PAIRS, 3, 2)
    a = np.array([float(p.probe >= 2) for p in PAIRS])
    d = np.array([p.log_diff for p in PAIRS])
    (fit,), residual, *_ = np.linalg.lstsq(a[:, None], d, rcond=None)
    assert math.isclose(delta, fit) and dof == 4
    assert math.isclose(se, math.sqrt(residual[0] / dof / (a @ a)))


def test_binary_information_against_quadrature() -> None:
    def by_quad(q: float, snr: float) -> float:
        def f(x: float) -> float:
            return (1 - q) * math.exp(-x * x / 2) / math.sqrt(2 * math.pi) + \
                q * math.exp(-(x - snr) ** 2 / 2) / math.sqrt(2 * math.pi)

        h = integrate.quad(lambda x: -f(x) * math.log(f(x)) if f(x) > 0 else 0.0, -12, snr + 12, limit=200)[0]
        return (h - 0.5 * math.log(2 * math.pi * math.e)) / math.log(2)

    for q, snr in ((0.5, 2.83), (0.2, 1.0), (0.5, 12.0), (0.9, 0.3)):
        assert math.isclose(float(binary_information(np.array([q]), snr)[0]), by_quad(q, snr), abs_tol=1e-6)
    # noise-free: the binary entropy; none at q = 0
    assert math.isclose(float(binary_information(np.array([0.5]), 30.0)[0]), 1.0, abs_tol=1e-6)
    assert float(binary_information(np.array([0.0]), 3.0)[0]) == pytest.approx(0.0, abs=1e-9)


def test_best_probes_split_the_posterior() -> None:
    probabilities = np.full(8, 1 / 8)  # commits 1 … 8 equally likely
    assert best_probes(probabilities, 3.0, range(1, 8), 1) == [4]  # q = P(k ≤ 4) = ½
    assert best_probes(probabilities, 3.0, range(1, 8), 3) == [2, 4, 6]
    assert best_probes(probabilities, 3.0, [1, 7], 1) in ([1], [7])  # only the probeable ones
    assert cumulative(probabilities)[[0, 8]].tolist() == [0.0, 1.0]


def test_credible_set_is_the_smallest_set_at_the_level() -> None:
    assert credible_set(np.array([0.05, 0.6, 0.3, 0.05]), 0.9) == [2, 3]
    assert credible_set(np.array([0.05, 0.6, 0.3, 0.05]), 0.5) == [2]


def test_endpoint_rule_is_the_classic_threshold() -> None:
    good = np.log([100.0, 100.4, 99.6])
    assert endpoints_differ(good, good + math.log(1.02))  # Δ 2 % > max(2·0.4 %, 1 %)
    assert not endpoints_differ(good, good + math.log(1.005))


def test_simulation_finds_the_culprit_with_fewer_runs_than_the_baseline() -> None:
    result = simulate_bisect(BisectScenario(commits=32, effect_pct=5.0, cv_pct=0.5), draws=40, seed=3)
    assert result.gatekit.right_culprit >= 0.9 and result.baseline.right_culprit >= 0.9
    assert result.gatekit.mean_runs < 0.5 * result.baseline.mean_runs
    # the baseline's runs are 10 per probed commit: the endpoints and log2(32) = 5 midpoints at least
    assert result.baseline.mean_runs >= 70


def test_gate_simulate_bisect(tmp_path) -> None:
    done = gate_invoke("simulate-bisect", "--commits", "16", "--effect", "5", "--cv", "0.5", "--draws", "10",
                       "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)["bisect_simulation"]
    assert result["scenario"]["commits"] == 16 and result["gatekit"]["draws"] == 10
    assert result["runs_ratio"] == result["gatekit"]["mean_runs"] / result["baseline"]["mean_runs"]
    ours = result["gatekit"]
    assert ours["right_when_bisected"] == ours["right_culprit"] / (1 - ours["no_change"] - ours["inconclusive"])
    table = gate_invoke("simulate-bisect", "--commits", "16", "--effect", "5", "--draws", "5", cwd=tmp_path)
    assert "| 16 | 5 % | 0.5 % | 1 | pinpoint-style |" in table.stdout and "right when bisected" in table.stdout
    bad = gate_invoke("simulate-bisect", "--effect", "0", cwd=tmp_path)
    assert bad.returncode == 2 and "--effect: must not be 0" in bad.stderr
    assert gate_invoke("simulate-bisect", cwd=tmp_path).returncode == 2  # --effect is required


def test_gate_simulate_bisect_flag_still_runs_the_command_and_says_it_is_deprecated(tmp_path) -> None:
    args = ("--commits", "16", "--effect", "5", "--draws", "5", "--seed", "2", "--json")
    old = gate_invoke("simulate", "--bisect", *args, cwd=tmp_path)
    assert old.returncode == 0 and "deprecated: run gate simulate-bisect" in old.stderr
    assert old.stdout == gate_invoke("simulate-bisect", *args, cwd=tmp_path).stdout
    assert gate_invoke("simulate", "--bisect", "--policy", "classic", cwd=tmp_path).returncode == 2  # not its option


def test_a_change_the_endpoints_cannot_show_stops_both_methods_there() -> None:
    result = simulate_bisect(BisectScenario(commits=16, effect_pct=0.2, cv_pct=2.0), draws=20, seed=1)
    assert result.baseline.no_change >= 0.8 and result.baseline.right_culprit <= 1 - result.baseline.no_change
    # gatekit stops there too, and says it could not rule a change out (its MDE at CV 2 % is far above the floor)
    ours = result.gatekit
    assert ours.inconclusive >= 0.8 and ours.no_change == 0 and ours.right_culprit <= 1 - ours.inconclusive
