"""The duet policy's version 3: version 2's slots and Huber fit, critical values calibrated under a composite
null (normal noise and two speed states). The table reproduces at a fixed seed within Monte-Carlo error, a
two-state law outside the calibration grid keeps the level, the vectorised codes are the one-gate decision, the
fewest pairs are refused everywhere a gate's size is stated, and a v2 series is still decided by v2."""

from __future__ import annotations

import hashlib
import math
import tomllib

import numpy as np
import pytest
from click.testing import CliRunner

from gatekit.analysis import records_table
from gatekit.cli import main
from gatekit.config import RulesSpec, ThresholdSpec, load_gate
from gatekit.errors import ConfigError
from gatekit.policies import duet
from gatekit.policy_descriptors import describe, policy_for
from gatekit.records import RunRecord
from gatekit.simulate import Scenario
from gatekit.verdict import ADOPTED, CODE_NAMES, REGRESSION, Decision, Verdict
from tests.conftest import make_gate, write_toml
from tests.test_duet_v2 import _records  # a series of pairs in a design's slots, as gate run records it

PRIMARY = "train_elapsed_s"


def _exceed_share(n: int, law: tuple[float, float] | None, draws: int, seed: int) -> float:
    """The share of null gates of n pairs whose |Δ̂/SE| is beyond version 3's c_test, under one law."""
    rng = np.random.default_rng(seed)
    d = rng.standard_normal((draws, n)) if law is None else duet.null_pair_noise(rng, draws, n, *law)
    delta, se, _, _ = duet.huber_arrays(d, duet.thue_morse_signs(np.arange(1, n + 1)))
    return float(np.mean(np.abs(delta / se) > duet.two_state_critical(n)))


def test_the_table_reproduces_at_16_pairs() -> None:
    # c_test(16) is the largest 0.91 quantile over the laws: under its least favourable law (the table's comment)
    # 9 % of |t| lie beyond it, under normal noise at most that; 20 000 draws, within 3 Monte-Carlo SE
    draws, target = 20_000, 2 * duet.TEST_ALPHA
    se = math.sqrt(target * (1 - target) / draws)
    worst = _exceed_share(16, duet.TWO_STATE_LEAST_FAVOURABLE[16], draws, seed=3)
    assert abs(worst - target) < 3 * se
    assert _exceed_share(16, None, draws, seed=4) < target + 3 * se


def test_the_grid_leaves_out_the_suites_check_ratios() -> None:
    # the suite's two-state rows have m/σ = 2.5, 5, 10, 20, 40: they test the table, they did not make it
    assert not {2.5, 5.0, 10.0, 20.0, 40.0} & set(duet.TWO_STATE_R)
    assert duet.TWO_STATE_LAWS[0] is None and len(duet.TWO_STATE_LAWS) == 1 + 5 * 7


def test_a_law_outside_the_grid_keeps_the_level_at_12_pairs() -> None:
    # runs slow by 10 % (20 run-noise SDs of 0.5 %) with probability 0.45, floor 0: the one-sided test's own rate
    rng = np.random.default_rng(7)
    draws, pairs, sd = 40_000, 12, 0.005
    off = sd * rng.standard_normal((draws, pairs)) + 20 * sd * (rng.random((draws, pairs)) < 0.45)
    on = sd * rng.standard_normal((draws, pairs)) + 20 * sd * (rng.random((draws, pairs)) < 0.45)
    codes, _ = policy_for("duet").simulate(off, on, ThresholdSpec(floor_pct=0.0))
    for code in (ADOPTED, REGRESSION):
        assert float(np.mean(codes == code)) <= 0.05


def test_beyond_the_table_the_last_value_holds() -> None:
    # c falls with n; the composite null's quantiles at 48 and 64 pairs (1.7798, 1.7638 at 200 000 gates, the
    # table's comment) are below the last value, where version 2's t extrapolation would have gone under them
    largest = max(duet.TWO_STATE_CRITICAL)
    for which, alpha in enumerate((duet.TEST_ALPHA, 0.025)):
        for n in (largest + 2, 48, 64, 1000):
            assert duet.two_state_critical(n, alpha) == duet.TWO_STATE_CRITICAL[largest][which]
    assert duet.two_state_critical(48) > 1.7798 and duet.two_state_critical(64, 0.025) > 2.0589
    assert math.isnan(duet.two_state_critical(8)) and math.isnan(duet.two_state_critical(11))
    assert math.isnan(duet.two_state_critical(49))


# -- the fewest pairs ------------------------------------------------------------------------------------

def test_fewer_than_10_pairs_are_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert describe("duet").min_n == duet.CURRENT.min_pairs == 10
    assert all(n >= 10 and n % 2 == 0 for n in describe("duet").plan_sizes)  # gate plan tries no smaller duet
    with pytest.raises(ConfigError, match="at least 10"):
        policy_for("duet").check_scenario(Scenario(n=8))
    g = make_gate(tmp_path, gate={"mode": "duet", "n": 8}, duet={"slots": ["cpu:0", "cpu:1"]})
    gate = tomllib.loads(g.gate.read_text())
    gate["gate"].pop("order", None)  # a duet has no order
    write_toml(g.gate, gate)
    with pytest.raises(ConfigError, match="an even number of at least 10"):
        load_gate(g.gate)
    done = CliRunner().invoke(main, ["simulate", "--policy", "duet", "--n", "8", "--draws", "200"])
    assert done.exit_code != 0 and "at least 10" in done.output
    # version 2 still runs 8 pairs
    assert CliRunner().invoke(main, ["simulate", "--policy", "duet-v2", "--n", "8", "--draws", "200"]).exit_code == 0


# -- through the policy object ------------------------------------------------------------------------------

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
        assert decided.duet.version == 3 and decided.duet.critical == duet.TWO_STATE_CRITICAL[12][0]


def test_a_v2_series_is_still_decided_by_v2() -> None:
    sha = hashlib.sha256(b"v2").hexdigest()
    off = [100.0 * (1 + 0.004 * math.sin(k)) for k in range(1, 13)]
    on = [97.0 * (1 + 0.004 * math.cos(k)) for k in range(1, 13)]
    v2 = _decide(_records(off, on, sha, duet.DESIGNS[2]), 2)
    v3 = _decide(_records(off, on, sha, duet.DESIGNS[3]), 3)
    assert v2.duet.version == 2 and v2.duet.critical == duet.HUBER_CRITICAL[12][0]
    assert v3.duet.version == 3 and v3.duet.critical == duet.TWO_STATE_CRITICAL[12][0]
    assert duet.HUBER_CRITICAL[12][0] != duet.TWO_STATE_CRITICAL[12][0]
    # the same fit: only the critical value, and so the interval, differ
    assert v2.duet.delta_pct == v3.duet.delta_pct and v2.duet.delta_pct == pytest.approx(-3.0, abs=0.3)
    text2 = " ".join(str(r) for r in v2.verdict.reasons)
    text3 = " ".join(str(r) for r in v3.verdict.reasons)
    assert "calibrated by simulation for 12 pairs" in text2
    assert "calibrated for 12 pairs over normal and two-speed-state noise" in text3
    # the same slots: a mirror drawn from the same sha256
    assert [duet.DESIGNS[2].slot_index(False, k, sha) for k in range(1, 13)] == \
        [duet.DESIGNS[3].slot_index(False, k, sha) for k in range(1, 13)]


def test_stated_rules_name_each_versions_calibration() -> None:
    rules = ThresholdSpec()
    v3 = " ".join(policy_for("duet", 3).stated_rules(PRIMARY, RulesSpec(), rules))
    v2 = " ".join(policy_for("duet", 2).stated_rules(PRIMARY, RulesSpec(), rules))
    assert ("c = the critical value calibrated by simulation for n pairs under normal noise at one-sided 0.045 "
            "(gatekit/policies/duet.py, HUBER_CRITICAL); interval Delta +/- c SE (91 %).") in v2
    assert ("c = the critical value calibrated by simulation for n pairs as the largest 0.91 quantile of "
            "|Delta/SE| over normal noise and runs that move between two speed states (each run N(0, 1) + "
            "r*Bernoulli(p), p in 0.15, 0.35, 0.5, 0.65, 0.85, r in 3, 6, 12, 24, 48, 96, 192 run-noise SDs; "
            "gatekit/policies/duet.py, TWO_STATE_CRITICAL; beyond 32 pairs, its value there); at least 10 pairs; "
            "interval Delta +/- c SE (91 %).") in v3
    assert "Policy duet (version 3)" in v3 and "Policy duet (version 2)" in v2
    assert v3.replace("version 3", "version 2").split("Huber's sandwich")[0] == v2.split("Huber's sandwich")[0]
