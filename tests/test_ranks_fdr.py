"""The robust policy's rank statistics and a campaign's false-discovery control, checked against hand-computed
values, brute force and scipy (mannwhitneyu, false_discovery_control)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from gatekit import fdr, ranks
from gatekit.finding import SequentialInfo, load_finding
from gatekit.verdict import Decision

GOLDEN = Path(__file__).parent / "golden"


def test_hodges_lehmann_interval_by_hand() -> None:
    # on − off: 0.5 −0.5 −1.5 | 1.5 0.5 −0.5 | 3 2 1 → sorted −1.5 −0.5 −0.5 0.5 0.5 1 1.5 2 3; median 0.5.
    # m = n = 3: P(U ≤ 0) = 1/C(6,3) = 0.05 ≤ α, P(U ≤ 1) = 0.1 > α, so k = 1: [D_(1), D_(9)] = [−1.5, 3]
    interval = ranks.shift_interval([1.0, 2.0, 3.0], [1.5, 2.5, 4.0], 0.05)
    assert (interval.shift, interval.low, interval.high, interval.cut) == (0.5, -1.5, 3.0, 1)
    assert ranks.rank_sum_cut(3, 3, 0.049) == 0  # no interval at this level: too few runs


def test_interval_is_the_brute_force_order_statistics() -> None:
    rng = np.random.default_rng(2)
    for _ in range(50):
        m, n = (int(v) for v in rng.integers(2, 30, 2))
        off, on = rng.standard_normal(m), rng.standard_normal(n) + 0.3
        diffs = np.sort(np.subtract.outer(on, off).ravel())
        k = ranks.rank_sum_cut(m, n, 0.05)
        interval = ranks.shift_interval(off, on, 0.05)
        assert interval.shift == pytest.approx(float(np.median(diffs)))
        if k:
            assert (interval.low, interval.high) == (diffs[k - 1], diffs[m * n - k])


def test_exact_null_distribution_is_scipys() -> None:
    rng = np.random.default_rng(4)
    for m, n in ((3, 3), (4, 7), (8, 8), (12, 9)):
        cdf = ranks.rank_sum_null_cdf(m, n)
        for _ in range(5):
            x, y = rng.standard_normal(m), rng.standard_normal(n)
            u = int(sps.mannwhitneyu(x, y).statistic)  # pairs with x_i > y_j
            exact = sps.mannwhitneyu(x, y, alternative="less", method="exact").pvalue
            assert cdf[u] == pytest.approx(exact, rel=1e-9)


@pytest.mark.parametrize("m,n", [(6, 9), (40, 35), (120, 80)])
def test_interval_inverts_scipys_mann_whitney(m: int, n: int) -> None:
    """A shift just beyond an end of the interval is rejected by scipy's one-sided test at α, one just inside
    is not (exact below EXACT_MAX runs per arm; the normal approximation beyond, as scipy's asymptotic test)."""
    rng = np.random.default_rng(m)
    off, on = rng.standard_normal(m), rng.standard_normal(n) - 0.5
    interval = ranks.shift_interval(off, on, 0.05)
    method = "exact" if max(m, n) <= ranks.EXACT_MAX else "asymptotic"
    eps = 1e-9

    def p_less(shift: float) -> float:
        return float(sps.mannwhitneyu(on - shift, off, alternative="less", method=method).pvalue)

    def p_greater(shift: float) -> float:
        return float(sps.mannwhitneyu(on - shift, off, alternative="greater", method=method).pvalue)

    assert p_less(interval.high + eps) <= 0.05 < p_less(interval.high - eps)
    assert p_greater(interval.low - eps) <= 0.05 < p_greater(interval.low + eps)


def test_thousands_of_runs_select_without_forming_the_differences(monkeypatch) -> None:
    rng = np.random.default_rng(6)
    off, on = rng.standard_normal(300), rng.standard_normal(250) + 0.1
    formed = ranks.shift_interval(off, on, 0.05)
    monkeypatch.setattr(ranks, "HL_OUTER_MAX", 0)
    assert ranks.shift_interval(off, on, 0.05) == formed


def test_many_gates_decide_as_one() -> None:
    """`interval_codes` (rank sums, what `gate simulate` runs) gives each gate `interval_code` of its interval."""
    rng = np.random.default_rng(8)
    off = 0.05 * rng.standard_t(3, (400, 25))
    on = 0.05 * rng.standard_t(3, (400, 25)) + rng.choice([-0.05, -0.01, 0.0, 0.02], (400, 1))
    bounds = {"better_log": np.log(0.99), "worse_log": np.log(1.01)}
    codes = ranks.interval_codes(off, on, alpha=0.05, **bounds)
    for g in range(400):
        interval = ranks.shift_interval(off[g], on[g], 0.05)
        assert codes[g] == ranks.interval_code(interval.low, interval.high, **bounds)


def test_rank_sum_p_is_scipys() -> None:
    off, on = [3.0, 4.0, 5.0, 6.0], [1.0, 2.0, 3.5, 4.5]
    lower, higher = ranks.rank_sum_p(off, on)
    assert lower == sps.mannwhitneyu(on, off, alternative="less").pvalue
    assert higher == sps.mannwhitneyu(on, off, alternative="greater").pvalue


def test_benjamini_hochberg_by_hand_and_as_scipy() -> None:
    # m = 4, q = 0.05: sorted 0.005 ≤ 0.0125, 0.01 ≤ 0.025, 0.03 ≤ 0.0375 but 0.2 > 0.05: the first three
    assert fdr.benjamini_hochberg([0.03, 0.2, 0.005, 0.01], 0.05).tolist() == [True, False, True, True]
    # a p above its own bound is still rejected when a larger one passes (step-up): 0.03 > 0.025, 0.036 ≤ 0.0375
    assert fdr.benjamini_hochberg([0.03, 0.036, 0.9, 0.001], 0.05).tolist() == [True, True, False, True]
    rng = np.random.default_rng(9)
    for _ in range(200):
        p = np.concatenate([rng.random(int(rng.integers(1, 60))), rng.random(int(rng.integers(0, 10))) * 1e-3])
        assert fdr.benjamini_hochberg(p, 0.05).tolist() == (sps.false_discovery_control(p) <= 0.05).tolist()


def test_a_campaign_withdraws_an_adoption_bh_does_not_keep() -> None:
    finding = load_finding(GOLDEN / "exports" / "hyperfine-finding.json")
    assert finding.decision is Decision.ADOPTED and finding.sequential is None

    def with_p(p: float, decision: Decision) -> object:
        return dataclasses.replace(finding, stats=dataclasses.replace(finding.stats, p_one_sided=p),
                                   verdict=dataclasses.replace(finding.verdict, decision=decision))

    nulls = [with_p(0.5, Decision.REJECTED) for _ in range(9)]
    # campaign p = 2·0.001 = 0.002 ≤ 1 × 0.05 / 10: kept
    kept = fdr.control([with_p(0.001, Decision.ADOPTED), *nulls], 0.05)
    assert not kept[0].withdrawn and kept[0].finding.decision is Decision.ADOPTED
    # campaign p = 0.04 > 0.005: adopted by its rule, inconclusive for the campaign, and it says so first
    withdrawn = fdr.control([with_p(0.02, Decision.ADOPTED), *nulls], 0.05)[0]
    assert withdrawn.withdrawn and withdrawn.own is Decision.ADOPTED
    assert withdrawn.finding.decision is Decision.INCONCLUSIVE
    assert withdrawn.finding.verdict.reasons[0].startswith("adopted by its rule, not significant at campaign FDR 5 %")
    assert withdrawn.finding.verdict.reason_codes[0] == "campaign_fdr"
    assert all(not c.withdrawn for c in fdr.control(nulls, 0.05))  # control never makes a decision


def test_a_sequential_p_pays_for_its_looks() -> None:
    """A fixed-n finding's p is its Welch p; one of a design with three looks is three times it (Bonferroni over
    the looks, valid wherever the looks stopped)."""
    finding = load_finding(GOLDEN / "exports" / "hyperfine-finding.json")
    fixed = dataclasses.replace(finding, stats=dataclasses.replace(finding.stats, p_one_sided=0.01))
    assert fdr.one_sided_p(fixed) == pytest.approx((0.01, 0.99))
    looks = SequentialInfo(alpha=0.05, df="welch", floor_pct=1.0, runs_per_arm=(4, 8, 12), guard_level=0.05,
                           looks=(), decision="adopted", next="stop")
    assert fdr.one_sided_p(dataclasses.replace(fixed, sequential=looks)) == pytest.approx((0.03, 1.0))


def test_simulated_campaigns_keep_their_false_discovery_rate() -> None:
    """90 null and 10 real (−2 %, CV 0.5 %) gates a campaign: BH at 5 % keeps the FDR under 5 % and, at n = 6 per
    arm, nearly all the power; the rows in docs/statistics.md are this at 2 000 campaigns."""
    from gatekit.fdr_simulation import CampaignScenario, simulate_campaigns
    from gatekit.simulate import Scenario

    result = simulate_campaigns("classic", CampaignScenario(Scenario(cv_off_pct=0.5, effect_pct=-2.0, n=6)),
                                campaigns=300, seed=1)
    assert result.fdr_controlled.pct <= 5.0 and result.power_controlled.pct > 95.0
    assert result.false_controlled <= result.false_own
    few = simulate_campaigns("classic", CampaignScenario(Scenario(cv_off_pct=0.5, effect_pct=-2.0, n=3)),
                             campaigns=300, seed=1)
    assert few.fdr_own.pct > 5.0 >= few.fdr_controlled.pct  # without control a night's gates break the level


def test_gate_simulate_campaign_prints_fdr_and_power(tmp_path: Path) -> None:
    from tests.conftest import gate_invoke

    done = gate_invoke("simulate", "--campaign", "--n", "6", "--effect", "-2", "--draws", "100", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "| classic | 90 + 10 | Δ -2 %, CV 0.5 % | 5 % |" in done.stdout and "100 campaigns" in done.stderr
    bad = gate_invoke("simulate", "--campaign", "--campaign-gates", "90", cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.strip() == "gate: error: --campaign-gates: write NULLS,REALS (e.g. 90,10), got '90'"


def test_gate_simulate_runs_the_robust_policy_on_heavy_tails() -> None:
    from gatekit.simulate import LARGE_N_ROWS, meets, simulate

    for scenario, _ in LARGE_N_ROWS:
        assert meets(simulate("robust", scenario, draws=2000, seed=3)), scenario.name
