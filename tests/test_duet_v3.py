"""The duet policy's version 3: ranks of the slot-signed pair log-ratios. Δ̂ and its interval against a brute
force over all the differences and the exact null of every split (scipy's exact Mann–Whitney p beside it), the
exact level under a two-state null (every relabelling of one set of values, and a seeded simulation), the
vectorised codes against the one-gate decision, the fewest pairs, and a v2 series still decided by v2."""

from __future__ import annotations

import hashlib
import itertools
import math

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import stats as sps

from gatekit.analysis import records_table
from gatekit.cli import main
from gatekit.config import RulesSpec, ThresholdSpec
from gatekit.errors import ConfigError
from gatekit.policies import duet
from gatekit.policy_descriptors import describe, policy_for
from gatekit.ranks import rank_sum_cut
from gatekit.records import RunOutcome, RunRecord, WindowSummary
from gatekit.verdict import ADOPTED, CODE_NAMES, REGRESSION, Decision, Verdict

PRIMARY = "train_elapsed_s"
TM8 = duet.thue_morse_signs(np.arange(1, 9))  # + − − + − + + −
# 8 pairs: on 2 % faster, slot 1 1 % slower, a few per mille of noise and one pair in the slow state (+6 %)
D8 = (-0.02 + 0.01 * TM8 + np.array([0.002, -0.001, 0.003, -0.002, 0.0005, 0.06, -0.0015, 0.001]))


def _brute(d: np.ndarray, sigma: np.ndarray, alpha: float) -> tuple[float, float, float, int]:
    """Δ̂, interval, k by hand: all differences z(+) − z(−) halved, k from the exact null of every split."""
    z = sigma * d
    plus, minus = z[sigma > 0], z[sigma < 0]
    halves = np.sort(np.subtract.outer(plus, minus).ravel()) / 2
    m, n = plus.size, minus.size
    # U over every way to choose which m of the m + n exchangeable values are the "+" group (ranks 0 … m+n−1)
    counts = np.zeros(m * n + 1)
    for chosen in itertools.combinations(range(m + n), m):
        u = sum(r for r in chosen) - m * (m - 1) // 2
        counts[u] += 1
    cdf = np.cumsum(counts) / counts.sum()
    k = int(np.sum(cdf <= alpha * (1 + 1e-12)))  # P(U ≤ k − 1) ≤ α for the largest k
    return float(np.median(halves)), float(halves[k - 1]), float(halves[m * n - k]), k


def test_estimate_and_interval_against_brute_force_and_scipy() -> None:
    estimate = duet.rank_estimate(D8, TM8)
    delta, low, high, k = _brute(D8, TM8, duet.TEST_ALPHA)
    assert k == estimate.rank_cut == 2  # P(U ≤ 1) = 2/70 = 0.029 ≤ 0.045 < P(U ≤ 2) = 4/70
    assert estimate.delta == pytest.approx(delta, abs=1e-15)
    assert estimate.delta_interval() == pytest.approx((low, high), abs=1e-15)
    assert estimate.delta == pytest.approx(-0.02, abs=0.003)  # the slow pair moves Δ̂ by little
    _, low95, high95, k95 = _brute(D8, TM8, 0.025)
    assert k95 == 1 and estimate.delta_bounds95 == pytest.approx((low95, high95), abs=1e-15)
    # the interval inverts the exact one-sided test: its high end is below c iff scipy's exact p of the shift
    # 2c is at most α, at c just either side of the end
    z = TM8 * D8
    plus, minus = z[TM8 > 0], z[TM8 < 0]
    for c, inside in ((high + 1e-9, True), (high - 1e-9, False)):
        p = sps.mannwhitneyu(plus - 2 * c, minus, alternative="less", method="exact").pvalue
        assert bool(p <= duet.TEST_ALPHA) is inside
    # the slot effect is version 2's Huber fit, reported only
    _, _, slot, _ = duet.huber_arrays(D8, TM8)
    assert estimate.slot == pytest.approx(float(slot)) and estimate.slot == pytest.approx(0.01, abs=0.003)


def _scipy_cdf(half: int, u: int) -> float:
    """P(U ≤ u) for half + half values from scipy's exact Mann–Whitney: x placed so that U = u."""
    y = np.arange(half, dtype=float)
    above = [min(half, max(0, u - half * i)) for i in range(half)]  # how many y's each x exceeds; they sum to u
    x = np.array(above, float) - 0.5
    return float(sps.mannwhitneyu(x, y, alternative="less", method="exact").pvalue)


@pytest.mark.parametrize("pairs", [8, 10, 12, 16])
def test_the_cut_is_the_exact_null_quantile(pairs: int) -> None:
    half = pairs // 2
    _, _, _, k = _brute(np.arange(pairs, dtype=float), np.repeat([1.0, -1.0], half), duet.TEST_ALPHA)
    assert rank_sum_cut(half, half, duet.TEST_ALPHA) == k
    assert _scipy_cdf(half, k - 1) <= duet.TEST_ALPHA < _scipy_cdf(half, k)


def test_fewer_than_4_pairs_per_slot_order_never_decide() -> None:
    assert rank_sum_cut(3, 3, duet.TEST_ALPHA) == 0  # 1/20 = 0.05 > 0.045: no interval at any data
    assert rank_sum_cut(4, 4, duet.TEST_ALPHA) == 2
    far = np.full((1, 6), -0.5)
    assert duet.rank_codes(far, duet.thue_morse_signs(np.arange(1, 7)), floor_pct=1.0, direction="lower")[0] \
        == duet.ranks.INCONCLUSIVE
    assert describe("duet").min_n == duet.CURRENT.min_pairs == 8
    with pytest.raises(ConfigError, match="at least 8"):
        policy_for("duet").check_scenario(duet_scenario(6))


def duet_scenario(n: int):  # type: ignore[no-untyped-def]
    from gatekit.simulate import Scenario
    return Scenario(n=n)


def test_the_level_is_exact_for_any_values_under_no_effect() -> None:
    # Under no effect the z's are exchangeable, so of the 70 ways to say which 4 of 8 values had σ = +1 exactly
    # 2 (P(U ≤ 1) = 2/70) put the interval wholly below 0, whatever the values: here two speed states
    rng = np.random.default_rng(11)
    for _ in range(5):
        z = 0.005 * rng.standard_normal(8) + math.log1p(0.1) * (rng.random(8) < 0.5) \
            - math.log1p(0.1) * (rng.random(8) < 0.5)
        below = above = 0
        for chosen in itertools.combinations(range(8), 4):
            sigma = -np.ones(8)
            sigma[list(chosen)] = 1.0
            code = duet.rank_codes((sigma * z)[None, :], sigma, floor_pct=0.0, direction="lower")[0]
            below += code == ADOPTED
            above += code == REGRESSION
        assert below == above == 2


def test_false_adoption_under_two_states_is_at_most_the_exact_level() -> None:
    # 12 pairs, runs slow by 10 % with probability ½ (the v2 failure: 5.2 %), floor 0: adoption is the one-sided
    # test's own rate, P(U ≤ 6) = 0.0325 for 6 + 6, within 3 Monte-Carlo SE
    rng = np.random.default_rng(7)
    draws, pairs = 40_000, 12
    slow = math.log1p(0.10)
    off = 0.005 * rng.standard_normal((draws, pairs)) + slow * (rng.random((draws, pairs)) < 0.5)
    on = 0.005 * rng.standard_normal((draws, pairs)) + slow * (rng.random((draws, pairs)) < 0.5)
    codes, _ = policy_for("duet").simulate(off, on, ThresholdSpec(floor_pct=0.0))
    level = 0.032467532467532464  # ranks.rank_sum_null_cdf(6, 6)[6]
    se = math.sqrt(level * (1 - level) / draws)
    for code in (ADOPTED, REGRESSION):
        assert abs(float(np.mean(codes == code)) - level) < 3 * se


# -- through the policy object ------------------------------------------------------------------------------

def _records(off: list[float], on: list[float], sha: str, design: duet.DuetDesign) -> list[RunRecord]:
    slots = ("cuda:0", "cuda:1")
    records, order = [], 0
    for k, (off_value, on_value) in enumerate(zip(off, on), start=1):
        for arm, value, is_off in (("off", off_value, True), ("on", on_value, False)):
            order += 1
            records.append(RunRecord(order, arm, f"{arm}-r{k}", k, RunOutcome(0, value, metrics={PRIMARY: value}),
                                     WindowSummary(samples=3, load1_mean=0.1, load1_max=0.2),
                                     slot=slots[design.slot_index(is_off, k, sha)]))
    return records


def _decide(records: list[RunRecord], version: int, direction: str = "lower"):  # type: ignore[no-untyped-def]
    policy = policy_for("duet", version)
    table = policy.classify(records_table(records, PRIMARY), RulesSpec(), {}, 8)
    classic = Verdict(Decision.REJECTED, ("classic reason",), ())
    return policy.decide(classic, table, records, off_arm="off", on_arm="on", primary=PRIMARY, direction=direction,
                         guards=(), floor_pct=1.0, warnings=())


@pytest.mark.parametrize("direction", ["lower", "higher"])
def test_simulation_runs_the_decision_of_one_gate(direction: str) -> None:
    rng = np.random.default_rng(5)
    n, gates = 12, 40
    off_log = rng.normal(0, 0.01, (gates, n))
    shift = rng.choice([-0.03, -0.012, 0.0, 0.012, 0.03], gates)[:, None]
    on_log = off_log + shift + rng.normal(0, 0.006, (gates, n))
    signs = duet.CURRENT.signs(np.arange(1, n + 1))
    codes = duet.CURRENT.codes(on_log - off_log, signs, floor_pct=1.0, direction=direction)
    assert len(set(codes.tolist())) >= 3
    for k in range(gates):
        sha = hashlib.sha256(str(k).encode()).hexdigest()  # either mirror: Δ̂ and the interval are the same
        decided = _decide(_records(np.exp(off_log[k]).tolist(), np.exp(on_log[k]).tolist(), sha, duet.CURRENT), 3,
                          direction)
        assert decided.verdict.decision.value == CODE_NAMES[int(codes[k])]
        assert decided.duet.version == 3 and decided.duet.rank_cut == 7 and decided.duet.critical is None


def test_a_v2_series_is_still_decided_by_v2() -> None:
    sha = hashlib.sha256(b"v2").hexdigest()
    off = [100.0 * (1 + 0.004 * math.sin(k)) for k in range(1, 13)]
    on = [97.0 * (1 + 0.004 * math.cos(k)) for k in range(1, 13)]
    v2 = _decide(_records(off, on, sha, duet.DESIGNS[2]), 2).duet
    v3 = _decide(_records(off, on, sha, duet.DESIGNS[3]), 3).duet
    assert v2.version == 2 and v2.critical == duet.HUBER_CRITICAL[12][0] and v2.rank_cut is None
    assert "rank_cut" not in v2.to_dict()  # absent, not null: a v2 finding reads as it was written
    assert v3.version == 3 and v3.rank_cut == 7 and v3.critical is None
    assert v2.delta_pct == pytest.approx(-3.0, abs=0.3) and v3.delta_pct == pytest.approx(-3.0, abs=0.3)
    # the same slots: a mirror drawn from the same sha256
    assert [duet.DESIGNS[2].slot_index(False, k, sha) for k in range(1, 13)] == \
        [duet.DESIGNS[3].slot_index(False, k, sha) for k in range(1, 13)]


def test_stated_rules_and_words_name_version_3() -> None:
    rules = policy_for("duet").stated_rules(PRIMARY, RulesSpec(), ThresholdSpec())
    text = " ".join(rules)
    assert "Hodges-Lehmann" in text and "Mann-Whitney" in text and "At least 8 pairs" in text
    assert "Adopted iff the interval lies wholly on the better side of 0 (the exact one-sided test at 0.045) AND " \
        "Delta is at least 1 % better" in text
    assert "HUBER_CRITICAL" not in text


def test_simulate_compares_version_2() -> None:
    runner = CliRunner()
    base = ["simulate", "--n", "12", "--cv", "0.5", "--outlier-rate", "0.5", "--outlier-pct", "10",
            "--draws", "4000"]
    for policy in ("duet", "duet-v2"):
        done = runner.invoke(main, [*base, "--policy", policy])
        assert done.exit_code == 0, done.output
        assert policy in done.output


def test_too_few_pairs_in_one_slot_order_read_as_unbounded_not_nan() -> None:
    # 8 pairs whose recorded slots put on on slot 1 in 7 of them: 7 + 1 has no interval at 4.5 % (P(U ≤ 0) = 1/8)
    records, order = [], 0
    for k in range(1, 9):
        off_slot, on_slot = ("cuda:0", "cuda:1") if k != 8 else ("cuda:1", "cuda:0")
        for arm, value, slot in (("off", 100.0 + 0.1 * k, off_slot), ("on", 97.0 + 0.05 * k, on_slot)):
            order += 1
            records.append(RunRecord(order, arm, f"{arm}-r{k}", k, RunOutcome(0, value, metrics={PRIMARY: value}),
                                     WindowSummary(samples=3, load1_mean=0.1, load1_max=0.2), slot=slot))
    decided = _decide(records, 3)
    assert decided.verdict.decision is Decision.INCONCLUSIVE and decided.duet.rank_cut == 0
    text = " ".join(str(reason) for reason in decided.verdict.reasons)
    assert "interval unbounded, too few pairs in a slot order (7 and 1)" in text and "nan" not in text
    assert "rank_cut" in decided.duet.to_dict() and decided.duet.pairs_on_slot1 == 7
