"""The sequential policy: its rule against scipy and hand values, and end to end through `gate run` with the
fixture trainer's arm files played in process (FakeDriver; tests/test_sequential_e2e.py runs real processes)."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import statistics
import tomllib
from pathlib import Path

import numpy as np
import pytest
import tomlkit
from scipy import stats as sps

from gatekit.config import DEFAULT_WARMUP, GuardSpec, load_gate
from gatekit.errors import SeriesInterrupted
from gatekit.policies import sequential as sq
from gatekit.policy_descriptors import policy_for
from gatekit.records import upgrade
from gatekit.schedule import extension, order_seed, plan, thue_morse
from gatekit.series.runner import SeriesRunner
from gatekit.verify import analyze_series
from tests.conftest import GateDir, Invoked, gate_invoke
from tests.fakes import LoadScript


def code(off: list[float], on: list[float], *, final: bool, direction: str = "lower") -> str:
    diff, scale = sq.pair_arrays(np.log(off), np.log(on))
    return sq.CODE_NAMES[int(sq.look_codes(diff, scale, floor_pct=1.0, direction=direction, final=final))]


def hand_hl(d: list[float]) -> float:
    return statistics.median((a + b) / 2 for a, b in itertools.combinations_with_replacement(d, 2))


def hand_scale(d: list[float]) -> float:
    centre = statistics.median(d)
    deviations = [abs(x - centre) for x in d]
    cap = sq.SCALE_CAP * statistics.median(deviations)
    return sum(min(x, cap) for x in deviations) / len(d) / math.sqrt(len(d))


# -- the rule -----------------------------------------------------------------------------------------

def test_estimate_and_scale_by_hand() -> None:
    off, on = [10.0, 10.3, 9.8, 10.2], [9.9, 9.6, 10.0, 9.5]
    d = [math.log(b) - math.log(a) for a, b in zip(off, on)]
    diff, scale = sq.pair_arrays(np.log(off), np.log(on))
    assert float(diff) == pytest.approx(hand_hl(d), rel=1e-12)
    assert float(scale) == pytest.approx(hand_scale(d), rel=1e-12)
    assert float(sq.statistic(diff, scale)) == pytest.approx(hand_hl(d) / hand_scale(d), rel=1e-12)
    # a deviation beyond SCALE_CAP median deviations is capped: one slowed run cannot inflate the scale
    slow = [0.01, -0.01, 0.0, 0.02, 0.5]
    centre, med_dev = 0.01, 0.01  # median 0.01; deviations 0, 0.02, 0.01, 0.01, 0.49 → median 0.01
    expected = (0 + 0.02 + 0.01 + 0.01 + sq.SCALE_CAP * med_dev) / 5 / math.sqrt(5)
    assert float(sq.robust_scale(np.array(slow))) == pytest.approx(expected, rel=1e-12) and centre == 0.01
    assert float(sq.hodges_lehmann(np.array(slow))) == pytest.approx(hand_hl(slow), rel=1e-12)
    # the scale-0 cases: a perfect difference is infinitely significant, no difference is 0
    assert float(sq.statistic(np.float64(-0.1), np.float64(0.0))) == -math.inf
    assert float(sq.statistic(np.float64(0.0), np.float64(0.0))) == 0.0


def test_a_linear_drift_cancels_from_the_estimate_in_thue_morse_order() -> None:
    # rounds A B B A (A = off first): on runs one slot later in AB rounds, one earlier in BA rounds
    drift, effect = math.log1p(0.005), math.log(0.97)
    first_off = [thue_morse(k) == 0 for k in range(8)]
    for rounds in (4, 8):
        off = [drift * (2 * k + (0 if first_off[k] else 1)) for k in range(rounds)]
        on = [effect + drift * (2 * k + (1 if first_off[k] else 0)) for k in range(rounds)]
        diff, _ = sq.pair_arrays(np.array(off), np.array(on))
        assert float(diff) == pytest.approx(effect, abs=1e-15)


def test_each_outcome_at_a_look() -> None:
    assert code([10.0, 10.1, 9.9, 10.0], [9.0, 9.1, 8.9, 9.0], final=False) == "adopted"
    assert code([9.0, 9.1, 8.9, 9.0], [10.0, 10.1, 9.9, 10.0], final=False) == "regression"
    assert code([10.0, 10.02, 9.98, 10.01], [10.01, 9.99, 10.0, 10.02], final=False) == "equivalent"
    # a tight 0.6 % improvement: its interval lies inside ±1 %, so it is equivalent, not adopted
    assert code([10.0, 10.001, 9.999, 10.0], [9.94, 9.941, 9.939, 9.94], final=False) == "equivalent"
    # HL +0.75 %, interval about [−0.33 %, +1.8 %]: a 1 % improvement is ruled out, a 1 % regression is not
    worse = [10.0 * math.exp(x) for x in (0.001, 0.013, 0.007, 0.009)]
    assert code([10.0] * 4, worse, final=False) == "rejected"
    assert code([10.0, 10.3, 9.8, 10.2], [9.9, 9.6, 10.0, 9.5], final=False) == "continue"
    assert code([10.0, 10.3, 9.8, 10.2], [9.9, 9.6, 10.0, 9.5], final=True) == "inconclusive"
    # higher is better flips adopted and regression
    assert code([10.0, 10.1, 9.9, 10.0], [9.0, 9.1, 8.9, 9.0], final=False, direction="higher") == "regression"
    # one run 10x slower does not turn a clear −10 % into anything else
    assert code([10.0, 10.1, 9.9, 10.0, 10.0, 10.1, 9.9, 10.0], [9.0, 90.0, 8.9, 9.0, 9.0, 9.1, 8.9, 9.05],
                final=True) == "adopted"


def test_the_look_follows_its_critical_values() -> None:
    d = np.array([-0.02, -0.025, -0.03, -0.015])
    diff, scale = sq.pair_arrays(np.zeros(4), d)
    t = float(sq.statistic(diff, scale))
    assert -t > sq.CRITICAL[0]  # beyond c1 and 2 % better than the floor of 1 %
    at_t = sq.look_codes(diff, scale, floor_pct=1.0, direction="lower", final=False, critical=-t * 1.0001)
    below_t = sq.look_codes(diff, scale, floor_pct=1.0, direction="lower", final=False, critical=-t * 0.9999)
    assert sq.CODE_NAMES[int(below_t)] == "adopted" and sq.CODE_NAMES[int(at_t)] != "adopted"


def test_floor_is_required_for_adoption() -> None:
    # −3 % and very tight: significant and beyond the floor → adopted; the floor is on the geometric ratio
    assert code([10.0, 10.001, 9.999, 10.0], [9.7, 9.701, 9.699, 9.7], final=False) == "adopted"
    f = sq.gain_bounds(1.0, "lower")
    assert f == pytest.approx((-math.log(0.99), -math.log(1.01)))


@pytest.mark.parametrize("design", [sq.V4, sq.V5], ids=["v4", "v5"])
def test_calibration_script_reproduces_the_constants_and_the_guard_level(design: sq.Design) -> None:
    from benchmarks.sequential_calibration import calibrate
    result = calibrate(design, 100_000, 7)
    c1, c2, c3 = result["critical"]
    assert c1 == pytest.approx(design.critical[0], rel=0.05) and c2 == pytest.approx(design.critical[1], rel=0.03)
    assert c3 == pytest.approx(design.critical[2], rel=0.03)
    assert result["guard_look_level"] == pytest.approx(design.guard_look_level, abs=0.002)
    # looks 1–2 spend EARLY_ALPHA (a little less: the early stop removes gates), look 3 the rest
    assert result["early_rate"] == pytest.approx(design.early_alpha, abs=0.001) and result["early_rate"] <= 0.03
    assert result["either_rate"] == pytest.approx(sq.CALIBRATION_ALPHA, abs=1e-4)
    # the per-look level lies between no correction and Bonferroni over three looks
    assert 1 - sq.CALIBRATION_ALPHA < sq.GUARD_LOOK_LEVEL < 1 - sq.CALIBRATION_ALPHA / 3
    # the guard's three looks at the calibrated level: exact for look 1 alone (scipy), and over all looks
    # within a loose Monte-Carlo bound of CALIBRATION_ALPHA
    rng = np.random.default_rng(3)
    diffs = -0.05 + 0.02 * rng.standard_normal((100_000, 12))
    first = sq.guard_pass_arrays(diffs[:, :4], 0.05)
    assert first.mean() == pytest.approx(1 - sq.GUARD_LOOK_LEVEL, abs=0.003)
    either = first | sq.guard_pass_arrays(diffs[:, :8], 0.05) | sq.guard_pass_arrays(diffs, 0.05)
    assert either.mean() == pytest.approx(sq.CALIBRATION_ALPHA, abs=0.004)


def test_the_v3_calibration_is_kept() -> None:
    from benchmarks.sequential_calibration import calibrate
    result = calibrate(sq.V3, 100_000, 7)
    c1, c2 = result["critical"]
    assert c1 == pytest.approx(sq.V3.critical[0], rel=0.05) and c2 == pytest.approx(sq.V3.critical[1], rel=0.03)
    assert result["guard_look_level"] == pytest.approx(sq.V3.guard_look_level, abs=0.002)
    assert policy_for("sequential", 3).stages(0) == (4, 8) and policy_for("sequential").design is sq.V8 and sq.V4.runs == (4, 8, 12)


def _gates(d: list[list[float]]) -> tuple[np.ndarray, np.ndarray]:
    """off = 0, on = d: log values whose pair differences are d, one gate per row."""
    on = np.array(d, float)
    return np.zeros_like(on), on


def test_v4_stops_early_at_look_1_when_on_is_not_ahead() -> None:
    # a lower-is-better metric: d > 0 is worse. HL/S on the improvement side is −HL/S.
    behind = [0.01, -0.02, 0.04, 0.03] + [0.0] * 8  # HL 0.015, S 0.01 (by hand): improvement statistic −1.5
    ahead = [-0.01, 0.02, -0.04, -0.03] + [0.0] * 8  # the mirror: +1.5, so it continues
    for row, stops in ((behind, True), (ahead, False)):
        diff, scale = sq.pair_arrays(np.zeros(4), np.array(row[:4]))
        assert float(diff) == pytest.approx(hand_hl(row[:4])) == pytest.approx(0.015 if stops else -0.015)
        assert float(scale) == pytest.approx(hand_scale(row[:4])) == pytest.approx(0.01)
        t_gain = float(sq.gain_statistic(diff, scale, "lower"))
        assert t_gain == pytest.approx(-1.5 if stops else 1.5)
        codes, runs = sq.design_codes(*_gates([row]), floor_pct=1.0, direction="lower")
        assert (sq.CODE_NAMES[int(codes[0])] == "inconclusive" and runs[0] == 4) == stops
    # v3 has no early stop: the same gate goes on to look 2
    _, runs = sq.design_codes(*_gates([behind]), floor_pct=1.0, direction="lower", design=sq.V3)
    assert runs[0] == 8
    # stop_codes by hand at the band's edges: −2 stops, 0 does not; a decided code passes through
    codes = np.array([sq.CONTINUE, sq.CONTINUE, sq.CONTINUE, sq.ADOPTED])
    stopped = sq.stop_codes(codes, np.array([-2.0, 0.0, -2.0001, -1.0]), look=1, design=sq.V4)
    assert [sq.CODE_NAMES[int(c)] for c in stopped] == ["inconclusive", "continue", "continue", "adopted"]


def test_v4_looks_a_third_time_only_near_c2() -> None:
    c2 = sq.V4.critical[1]
    codes = np.full(3, sq.CONTINUE)
    out = sq.stop_codes(codes, np.array([c2 - 3.0, c2 - 2.999, -10.0]), look=2, design=sq.V4)
    assert [sq.CODE_NAMES[int(c)] for c in out] == ["inconclusive", "continue", "inconclusive"]
    assert sq.CODE_NAMES[int(sq.stop_codes(np.array(sq.CONTINUE), np.array(0.0), look=3, design=sq.V4))] == \
        "continue"  # the last look has no stop rule of its own (look_codes says inconclusive there)
    # −1.5 % per pair with noise: undecided at look 2 but close to c2 → 12 runs per arm and adopted there
    rng = np.random.default_rng(11)
    d = -0.015 + 0.004 * rng.standard_normal((4000, 12))
    codes, runs = sq.design_codes(*_gates(d.tolist()), floor_pct=1.0, direction="lower", design=sq.V4)
    assert set(np.unique(runs)) <= {4, 8, 12} and (runs == 12).any()
    third = runs == 12
    # each gate that reached look 3: undecided at look 2 within 3 of c2 (recomputed here by hand)
    for row in d[third][:20]:
        hl, scale = sq.hodges_lehmann(row[:8]), sq.robust_scale(row[:8])
        look2 = sq.look_codes(hl, scale, floor_pct=1.0, direction="lower", final=False, critical=c2)
        assert int(look2) == sq.CONTINUE and -float(sq.statistic(hl, scale)) > c2 - 3
    assert (codes[third] == sq.ADOPTED).mean() > 0.5


# -- v5: two speed states ---------------------------------------------------------------------------

def _noise(n: int, seed: int, sd: float = 0.001) -> np.ndarray:
    return sd * np.random.default_rng(seed).standard_normal(n)


def test_arm_states_by_hand_and_against_scipy() -> None:
    cost = np.array([0.0, 0.01, 0.2, 0.21])
    arm = sq.arm_states(cost)
    assert arm.slow.tolist() == [False, False, True, True] and int(arm.slow_count) == 2 and int(arm.minority) == 2
    assert float(arm.gap) == pytest.approx(0.19) and float(arm.centre_gap) == pytest.approx(0.205 - 0.005)
    assert float(arm.within_ss) == pytest.approx(4 * 0.005 ** 2)
    # the groups' mean gap over the pooled within-group SD is the pooled two-sample t statistic (scipy) times
    # sqrt(1/n_fast + 1/n_slow)
    rng = np.random.default_rng(2)
    values = np.concatenate([rng.normal(0.0, 0.01, 7), rng.normal(0.1, 0.01, 5)])
    arm = sq.arm_states(values)
    fast, slow = values[~arm.slow], values[arm.slow]
    assert len(slow) == 5 and float(slow.min()) > float(fast.max())
    t = sps.ttest_ind(slow, fast, equal_var=True).statistic
    sd = math.sqrt(float(arm.within_ss) / (len(values) - 2))
    assert float(arm.centre_gap) / (sd * math.sqrt(1 / 7 + 1 / 5)) == pytest.approx(t, rel=1e-12)
    # vectorised over gates: each row on its own
    rows = sq.arm_states(np.stack([cost, values[:4]]))
    assert rows.slow[0].tolist() == [False, False, True, True] and float(rows.gap[0]) == pytest.approx(0.19)


def test_v5_takes_both_arms_states_out_by_hand() -> None:
    # 8 rounds, both arms in two states 20 % apart (log 0.2), tiny noise: an A/A gate
    slow_off = np.array([0, 1, 0, 1, 0, 1, 1, 0], bool)
    slow_on = np.array([1, 0, 0, 1, 1, 0, 0, 1], bool)
    off, on = 0.2 * slow_off + _noise(8, 1), 0.2 * slow_on + _noise(8, 2)
    check = sq.state_adjusted(off, on, look=2, rule=sq.V5.states, direction="lower")
    assert bool(check.off_split) and bool(check.on_split) and not bool(check.undecidable)
    assert check.off.slow.tolist() == slow_off.tolist() and check.on.slow.tolist() == slow_on.tolist()
    gap = ((off[slow_off].mean() - off[~slow_off].mean()) + (on[slow_on].mean() - on[~slow_on].mean())) / 2
    assert float(check.gap) == pytest.approx(gap, rel=1e-12)
    w = slow_on.astype(float) - slow_off.astype(float)
    assert check.d.tolist() == pytest.approx((on - off - gap * w).tolist(), abs=1e-15)
    pooled = math.sqrt((float(check.off.within_ss) + float(check.on.within_ss)) / (16 - 4))
    slow_runs = slow_on.sum() + slow_off.sum()
    assert float(check.gap_error) == pytest.approx(abs(w.mean()) * pooled * math.sqrt(1 / slow_runs
                                                                                       + 1 / (16 - slow_runs)))
    # what is left is noise: the look does not adopt, while the raw pair differences (±20 %) say nothing either
    arrays = sq.look_arrays(off, on, look=2, design=sq.V5, direction="lower", floor_pct=1.0)
    assert abs(float(arrays.diff)) < 0.002 and sq.CODE_NAMES[int(arrays.code)] != "adopted"
    # a higher-is-better metric: the same runs mirrored give the same check
    mirrored = sq.state_adjusted(-off, -on, look=2, rule=sq.V5.states, direction="higher")
    assert mirrored.d.tolist() == pytest.approx((-check.d).tolist(), abs=1e-15)


def test_v5_one_arm_in_two_states() -> None:
    rule, n = sq.V5.states, 8
    on = _noise(n, 4)  # every on run in one state
    # off: 2 of 8 runs slow → all-minority for on has odds ((2+1)/10 / (7/10))^8 = 0.0011 < 0.01: on is fast
    flags = np.array([0, 0, 1, 0, 0, 0, 1, 0])
    few = 0.2 * flags + _noise(n, 3)
    check = sq.state_adjusted(few, on, look=2, rule=rule, direction="lower")
    assert (3 / 7) ** 8 < rule.assign_ratio
    assert bool(check.off_split) and not bool(check.on_split) and not bool(check.either)
    assert not bool(check.undecidable)
    assert check.d.tolist() == pytest.approx((on - few + float(check.gap) * flags).tolist(), abs=1e-12)
    # off: 4 of 8 slow → odds (5/10 / 5/10)^8 = 1: on may be in either state; the two readings differ by the gap
    half = 0.2 * np.array([0, 1, 1, 0, 0, 1, 1, 0, 1, 0, 0, 1]) + _noise(12, 5)
    on = _noise(12, 4)
    check = sq.state_adjusted(half[:n], on[:n], look=2, rule=rule, direction="lower")
    assert bool(check.either) and not bool(check.undecidable)
    assert (check.alternative - check.d).tolist() == pytest.approx([float(check.gap)] * n, abs=1e-12) or \
        (check.d - check.alternative).tolist() == pytest.approx([float(check.gap)] * n, abs=1e-12)
    # one reading says on ≈ off's fast state (Δ ≈ 0), the other on ≈ 20 % faster: they disagree, so the look
    # cannot decide, and at the last look that is inconclusive, never adopted
    for look, rounds, held in ((2, 8, "continue"), (3, 12, "inconclusive")):
        arrays = sq.look_arrays(half[:rounds], on[:rounds], look=look, design=sq.V5, direction="lower",
                                floor_pct=1.0)
        assert bool(arrays.held) and sq.CODE_NAMES[int(arrays.code)] == held
        assert "the two readings of which one disagree" in sq.state_words(arrays.check, look, True, look == 3)


def test_v5_look_1_goes_on_where_v4_adopts_two_states() -> None:
    # the issue's pattern: three of four off runs in the slow state, every on run fast — an A/A gate whose pair
    # differences are −20 %, −20 %, −20 %, 0: v4 adopts at look 1, v5 sees off's two states and goes on
    off = 0.2 * np.array([1, 1, 1, 0]) + _noise(4, 6)
    on = _noise(4, 7)
    v4 = sq.look_arrays(off, on, look=1, design=sq.V4, direction="lower", floor_pct=1.0)
    v5 = sq.look_arrays(off, on, look=1, design=sq.V5, direction="lower", floor_pct=1.0)
    assert sq.CODE_NAMES[int(v4.code)] == "adopted" and -float(sq.statistic(v4.diff, v4.scale)) > sq.V4.critical[0]
    assert sq.CODE_NAMES[int(v5.code)] == "continue" and bool(v5.held)
    assert bool(v5.check.off_split) and int(v5.check.off.minority) == 1  # one fast run: the others are slow
    words = sq.state_words(v5.check, 1, True, False)
    assert words.startswith("runs fall into two speed states: 3 of 4 off runs (rounds 1, 2, 3)")
    assert "look 1 cannot decide" in words
    # one run per arm beyond a gap at a later look is an outlier, not a state: v4's capped scale takes it
    clean_off, clean_on = _noise(8, 8, 0.005), -0.05 + _noise(8, 9, 0.005)
    clean_on[3] += 0.5
    check = sq.state_adjusted(clean_off, clean_on, look=2, rule=sq.V5.states, direction="lower")
    assert not bool(check.on_split) and not bool(check.undecidable)
    assert check.d.tolist() == pytest.approx((clean_on - clean_off).tolist(), abs=0)


def test_paired_guard_bounds_match_scipy() -> None:
    guard = GuardSpec("psnr_db", "higher", 0.05)
    pairs = [(30.0, 30.02), (30.1, 30.09), (30.05, 30.08), (29.98, 30.0)]
    result = sq.paired_guard(guard, pairs)
    diffs = [on - off for off, on in pairs]
    two_sided = sps.ttest_1samp(diffs, 0.0).confidence_interval(2 * sq.GUARD_LOOK_LEVEL - 1)
    assert result.bound == pytest.approx(two_sided.low) and result.far_bound == pytest.approx(two_sided.high)
    assert result.level == sq.GUARD_LOOK_LEVEL and result.status == "pass"
    assert bool(sq.guard_pass_arrays(np.array(diffs), 0.05)) == (result.status == "pass")
    wide = sq.paired_guard(guard, [(30.0, 30.12), (30.0, 29.88), (30.0, 30.12), (30.0, 29.88)])
    assert wide.mean_diff == pytest.approx(0.0) and wide.status == "inconclusive"  # never a pass
    assert sq.paired_guard(guard, [(30.0, 29.8), (30.0, 29.81), (30.0, 29.79)]).status == "fail"
    assert sq.paired_guard(guard, [(30.0, 30.0)] * 4).status == "pass"  # bit-identical quality, bound 0
    assert sq.paired_guard(guard, [(30.0, 30.0)]).status == "inconclusive"  # one pair has no bound
    loss = sq.paired_guard(GuardSpec("final_loss", "lower", 0.001), [(0.01, 0.0101), (0.01, 0.0099)] * 2)
    assert loss.limit == 0.001 and loss.status == "pass"


# -- the order --------------------------------------------------------------------------------------

def test_thue_morse_order_and_its_drift_cancellation() -> None:
    assert [thue_morse(k) for k in range(8)] == [0, 1, 1, 0, 1, 0, 0, 1]  # A B B A B A A B
    for seed in range(6):
        runs = [s.arm for s in plan("off", "on", 8, "thue-morse", seed)]
        a = runs[0]
        assert "".join("A" if arm == a else "B" for arm in runs) == "ABBABAABBAABABBA"
        for length, degree in ((8, 2), (16, 3)):
            pos_a = [k for k in range(length) if runs[k] == a]
            pos_b = [k for k in range(length) if runs[k] != a]
            for power in range(degree + 1):  # Prouhet: equal power sums up to degree
                assert sum(k ** power for k in pos_a) == sum(k ** power for k in pos_b)
    mirrors = {plan("off", "on", 1, "thue-morse", seed)[0].arm for seed in range(20)}
    assert mirrors == {"off", "on"}  # the mirror is drawn from the seed


def test_stage_two_continues_the_same_plan() -> None:
    full = plan("off", "on", 8, "thue-morse", 5)
    stage2 = extension("off", "on", "thue-morse", 5, done_rounds=4, more_rounds=4, first_round=6)
    assert [s.arm for s in full[8:]] == [s.arm for s in stage2]
    assert [s.round for s in stage2] == [6, 6, 7, 7, 8, 8, 9, 9]
    random_full = plan("off", "on", 8, "random", 3)
    assert [s.arm for s in random_full[:8]] == [s.arm for s in plan("off", "on", 4, "random", 3)]


def test_warmup_slots() -> None:
    assert [s.label for s in plan("off", "on", 2, "abab", warmup=1)] == ["off-r0", "off-r1", "on-r1", "off-r2", "on-r2"]
    assert [s.label for s in plan("off", "on", 1, "abba", warmup=2)] == ["off-r0", "on-r0", "off-r1", "on-r1"]
    assert order_seed("0123456789abcdef" + "0" * 48) == 0x0123456789ABCDEF


# -- end to end -------------------------------------------------------------------------------------

def times(prefix: str, values: list[float]) -> dict[str, float]:
    return {f"{prefix}-r{k}": v for k, v in enumerate(values, 1)}


# load1 evidence, and a limit nothing reaches: these tests inject their own load (or none), so the machine's
# own pressure-stall readings (busy on a shared CI runner) must not replace runs behind their back
SEQ_RULES = {"load_per_core_limit": 1000.0, "evidence": "load1"}


def run_sequential(gate_dir, off: list[float], on: list[float],  # type: ignore[no-untyped-def]
                   **gate_options: object) -> tuple[GateDir, Invoked, dict]:
    """A sequential series of the fixture trainer with these times per arm, run to its finding (exit 0):
    (the gate folder, the `gate run` call, the finding)."""
    g = gate_dir(off={"elapsed": times("off", off)}, on={"elapsed": times("on", on)}, rules=SEQ_RULES, **gate_options)
    done = gate_invoke("run", "off", "on", "--policy", "sequential", cwd=g.root)
    assert done.returncode == 0, done.stderr
    return g, done, g.finding()


def test_sequential_adopts_at_look_1_and_analyze_reproduces_it(fake_gate_dir) -> None:
    g, _, finding = run_sequential(fake_gate_dir, [10.0, 10.1, 9.9, 10.0], [9.0, 9.1, 8.9, 9.0])
    assert finding["gate"]["policy"] == "sequential" and finding["gate"]["order"] == "block-shuffle-spread"
    assert finding["verdict"]["decision"] == "adopted"
    assert [look["look"] for look in finding["sequential"]["looks"]] == [1]
    assert finding["sequential"]["alpha"] == sq.ALPHA and finding["sequential"]["next"] == "stop"
    assert finding["sequential"]["version"] == 8 and finding["sequential"]["critical"] == list(sq.CRITICAL)
    assert finding["sequential"]["runs_per_arm"] == [4, 8, 12] and finding["sequential"]["stop_band"] == [-2, 0]
    assert finding["sequential"]["states"] == {"split_k": list(sq.V5.states.split_k),
                                               "clear_k": list(sq.V5.states.clear_k),
                                               "single_k": list(sq.V5.states.single_k),
                                               "assign_ratio": sq.V5.states.assign_ratio}
    assert finding["sequential"]["statistics"][0] < -sq.CRITICAL[0]  # HL/S beyond c1 on the better side
    assert len(g.order()) == 8
    # the classic Δ and threshold are still reported beside it
    # σ_off = 0.0816/10 → threshold 2·0.8165 %
    assert finding["stats"]["delta_pct"] == pytest.approx(-10.0)
    assert finding["stats"]["threshold_pct"] == pytest.approx(200 * math.sqrt(2 / 3) / 100)
    assert any(r.startswith("classic rule beside it") for r in finding["verdict"]["reasons"])
    # no seed was given: the order comes from the predecision's sha256, and the journal shows it
    (series,) = g.series_dirs()
    sha = hashlib.sha256((series / "predecision.toml").read_bytes()).hexdigest()
    assert finding["gate"]["seed"] == order_seed(sha) and finding["gate"]["seed_source"] == "predecision sha256"
    assert g.order() == [s.label for s in plan("off", "on", 4, "block-shuffle-spread", order_seed(sha))]
    predecision = tomllib.loads((series / "predecision.toml").read_text())
    assert "schedule" not in predecision and "sha256" in predecision["schedule_rule"]
    assert any("Policy sequential (version 8)" in line for line in predecision["stated_rules"])
    assert predecision["decision"]["sequential_version"] == 8
    again = gate_invoke("analyze", str(series), "--json", cwd=g.root)
    assert again.stdout == g.findings()[0].read_text()


# look 1 undecided (improvement HL/S +1.73: ahead, so no early stop), look 2 close to c2 (HL/S 3.93 against
# 4.092, −4.0 %), look 3 adopts (HL/S 5.37): a series that runs all three stages
OFF12 = [10.0, 10.3, 9.8, 10.2, 10.1, 10.2, 9.9, 10.3, 10.0, 10.2, 9.9, 10.1]
ON12 = [9.9, 9.6, 10.0, 9.5, 9.7, 9.6, 9.8, 9.6, 9.8, 9.6, 9.7, 9.5]


def test_sequential_extends_to_stage_two_when_look_1_is_undecided(fake_gate_dir) -> None:
    off = OFF12[:8]
    on = [9.9, 9.6, 10.0, 9.5, 9.5, 9.6, 9.4, 9.6]  # rounds 5–8 clearly faster: look 2 adopts (HL/S 11.6)
    g, done, finding = run_sequential(fake_gate_dir, off, on, gate={"seed": 1})
    looks = finding["sequential"]["looks"]
    assert [look["decision"] for look in looks] == ["continue", "adopted"]
    assert looks[0]["n_off"] == 4 and looks[1]["n_off"] == 8
    assert g.order() == [s.label for s in plan("off", "on", 8, "block-shuffle-spread", 1)]
    (series,) = g.series_dirs()
    events = [json.loads(line) for line in (series / "journal.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events].count("extend") == 1
    assert "extending to 8 runs per arm" in done.stderr
    assert analyze_series(series).to_dict() == finding


def test_sequential_extends_to_a_third_stage_when_look_2_is_close(fake_gate_dir) -> None:
    g, done, finding = run_sequential(fake_gate_dir, OFF12, ON12, gate={"seed": 1})
    looks = finding["sequential"]["looks"]
    assert [look["decision"] for look in looks] == ["continue", "continue", "adopted"]
    assert [look["n_off"] for look in looks] == [4, 8, 12]
    statistics_ = finding["sequential"]["statistics"]  # lower is better: the improvement side is −HL/S
    assert -statistics_[1] == pytest.approx(3.926, abs=1e-3) and sq.CRITICAL[1] - 3 < -statistics_[1] < sq.CRITICAL[1]
    assert g.order() == [s.label for s in plan("off", "on", 12, "block-shuffle-spread", 1)]
    (series,) = g.series_dirs()
    events = [json.loads(line) for line in (series / "journal.jsonl").read_text().splitlines()]
    assert [e["stage"] for e in events if e["event"] == "extend"] == [2, 3]
    assert "extending to 8 runs per arm" in done.stderr and "extending to 12 runs per arm" in done.stderr
    assert any("look 3 after 12 runs per arm" in r for r in finding["verdict"]["reasons"])
    assert analyze_series(series).to_dict() == finding
    again = gate_invoke("analyze", str(series), "--json", cwd=g.root)
    assert again.stdout == g.findings()[0].read_text()


def test_a_v3_series_still_reanalyses_as_v3(fake_gate_dir) -> None:
    """A v3 series re-analyses as v3, two looks at its own constants (a predecision/1 written before v4 has no
    sequential_version and upgrades to 3: test_the_predecision_keys_the_design_version)."""
    g = fake_gate_dir(off={"elapsed": times("off", OFF12)}, on={"elapsed": times("on", ON12)}, rules=SEQ_RULES,
                      gate={"seed": 1})
    config = load_gate(g.gate).with_overrides(policy="sequential", seed=1)
    runner = SeriesRunner(config, config.arms["off"], config.arms["on"], load_reader_for=LoadScript(calm=0.0))
    runner.spec = dataclasses.replace(runner.spec, sequential_version=3)  # as a v3 gate preregistered it
    runner.policy = policy_for("sequential", 3)
    result = runner.start()
    (series,) = g.series_dirs()
    predecision = tomllib.loads((series / "predecision.toml").read_text())
    assert predecision["decision"]["sequential_version"] == 3  # stated since predecision/2
    assert any(line.startswith("Policy sequential: look 1 after 4 runs per arm, look 2 after 8;")
               for line in predecision["stated_rules"])
    finding = result.finding.to_dict()
    seq = finding["sequential"]
    assert seq["version"] == 3 and seq["critical"] == [6.1577, 3.5745] and seq["runs_per_arm"] == [4, 8]
    assert seq["guard_level"] == 0.97437 and "stop_band" not in seq
    # under v3 look 2 (HL/S 3.93 > c2 = 3.5745) adopts at 8 runs per arm; v4 would have gone on to 12
    assert [look["decision"] for look in seq["looks"]] == ["continue", "adopted"] and len(g.order()) == 16
    assert any("over both looks" in r for r in finding["verdict"]["reasons"])
    assert analyze_series(series).to_dict() == finding
    verified = gate_invoke("verify", str(series), str(g.findings()[0]), cwd=g.root)
    assert verified.returncode == 0, verified.stdout + verified.stderr


# an A/A series of a GPU that moves between two clock states: each run 20 % slow or not, independently of its
# arm; in rounds 1–3 off is slow and on fast, so look 1's pair differences read −18 %, −18 %, −18 %, 0
OFF_STATES = [12.0, 12.02, 11.98, 10.0, 12.01, 10.01, 9.99, 12.0, 10.02, 11.99, 10.0, 12.02]
ON_STATES = [10.0, 10.01, 9.99, 10.02, 12.0, 11.98, 10.01, 9.98, 12.02, 10.0, 11.99, 10.01]


def _states_series(fake_gate_dir, version: int):  # type: ignore[no-untyped-def]
    g = fake_gate_dir(off={"elapsed": times("off", OFF_STATES)}, on={"elapsed": times("on", ON_STATES)},
                      rules=SEQ_RULES, gate={"seed": 1})
    config = load_gate(g.gate).with_overrides(policy="sequential", seed=1)
    runner = SeriesRunner(config, config.arms["off"], config.arms["on"], load_reader_for=LoadScript(calm=0.0))
    runner.spec = dataclasses.replace(runner.spec, sequential_version=version)
    runner.policy = policy_for("sequential", version)
    return g, runner.start().finding.to_dict()


def test_a_v5_series_in_two_speed_states_is_not_adopted_and_v4_would_adopt_it(fake_gate_dir) -> None:
    g, finding = _states_series(fake_gate_dir, 5)
    reasons = finding["verdict"]["reasons"]
    assert finding["sequential"]["version"] == 5 and finding["verdict"]["decision"] != "adopted"
    looks = finding["sequential"]["looks"]
    assert looks[0]["decision"] == "continue" and len(looks) >= 2  # look 1 saw off's two states and went on
    assert any(r.startswith("runs fall into two speed states: 3 of 4 off runs (rounds 1, 2, 3)") and
               "look 1 cannot decide" in r for r in reasons)
    assert any("each run's state is taken out" in r for r in reasons)  # look 2: both arms' states taken out
    assert abs(looks[-1]["delta_pct"]) < 0.5  # what is left of an A/A series: about nothing
    (series,) = g.series_dirs()
    again = gate_invoke("analyze", str(series), "--json", cwd=g.root)
    assert again.returncode == 0 and json.loads(again.stdout) == finding
    verified = gate_invoke("verify", str(series), str(g.findings()[0]), cwd=g.root)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_the_same_runs_under_v4_adopt_at_look_1(fake_gate_dir) -> None:
    g, finding = _states_series(fake_gate_dir, 4)
    assert finding["sequential"]["version"] == 4 and finding["verdict"]["decision"] == "adopted"
    assert [look["look"] for look in finding["sequential"]["looks"]] == [1]
    assert not any("speed states" in r for r in finding["verdict"]["reasons"])
    (series,) = g.series_dirs()
    assert analyze_series(series).to_dict() == finding  # a v4 series re-analyses with v4


def test_v4_stops_early_at_look_1_end_to_end(fake_gate_dir) -> None:
    # on is 1.5 % slower at look 1 but noisy: improvement HL/S −1.5 (by hand above) → stop, 4 runs per arm
    off = [10.0, 10.0, 10.0, 10.0]
    on = [10.0 * math.exp(x) for x in (0.01, -0.02, 0.04, 0.03)]
    g, _, finding = run_sequential(fake_gate_dir, off, on)
    assert finding["verdict"]["decision"] == "inconclusive" and len(g.order()) == 8
    assert finding["verdict"]["reasons"][0].startswith("stopped at look 1: after 4 pairs the on arm is not ahead")
    assert "never a pass" in finding["verdict"]["reasons"][0]
    assert [look["decision"] for look in finding["sequential"]["looks"]] == ["inconclusive"]
    assert finding["sequential"]["next"] == "stop"


def test_a_a_is_inconclusive_or_rejected_never_adopted(fake_gate_dir) -> None:
    a = [10.0, 10.4, 9.7, 10.2, 10.5, 9.6, 10.1, 9.9]
    b = [10.3, 9.8, 10.1, 9.6, 10.2, 10.4, 9.7, 10.0]
    g = fake_gate_dir(off={"elapsed": times("off", a)}, on={"elapsed": times("on", b)}, rules=SEQ_RULES)
    done = gate_invoke("run", "off", "on", "--policy", "sequential", "--fail-on", "not-adopted", cwd=g.root)
    assert done.returncode == 1  # inconclusive is "not adopted"
    assert g.finding()["verdict"]["decision"] == "inconclusive"
    assert g.finding()["meta"]["polarity"] == "neutral"


def test_equivalent(fake_gate_dir) -> None:
    g = fake_gate_dir(off={"elapsed": times("off", [10.0, 10.02, 9.98, 10.01])},
                      on={"elapsed": times("on", [10.01, 9.99, 10.0, 10.02])}, rules=SEQ_RULES)
    assert gate_invoke("run", "off", "on", "--policy", "sequential", cwd=g.root).returncode == 0
    assert g.finding()["verdict"]["decision"] == "equivalent" and len(g.order()) == 8


def test_a_guard_too_wide_to_pass_is_inconclusive_never_a_pass(fake_gate_dir) -> None:
    psnr_on = {f"on-r{k}": 30.0 + (0.12 if k % 2 else -0.12) for k in range(1, 13)}
    g = fake_gate_dir(off={"elapsed": times("off", [10.0, 10.1, 9.9, 10.0] * 3)},
                      on={"elapsed": times("on", [9.0, 9.1, 8.9, 9.0] * 3), "psnr": psnr_on},
                      rules=SEQ_RULES)
    assert gate_invoke("run", "off", "on", "--policy", "sequential", cwd=g.root).returncode == 0
    finding = g.finding()
    looks = finding["sequential"]["looks"]
    # the adoption waits for the guard at looks 1 and 2, then the last look makes it inconclusive
    assert [look["primary"] for look in looks] == ["adopted", "adopted", "adopted"]
    assert [look["decision"] for look in looks] == ["continue", "continue", "inconclusive"]
    assert looks[2]["guards"]["psnr_db"]["status"] == "inconclusive"
    assert finding["verdict"]["decision"] == "inconclusive"
    assert finding["guards"]["psnr_db"]["pass"] is True  # the classic point-estimate guard would pass it


def _runner(g, loaded: set[str]) -> SeriesRunner:
    config = load_gate(g.gate).with_overrides(policy="sequential", seed=2)
    return SeriesRunner(config, config.arms["off"], config.arms["on"],
                        load_reader_for=LoadScript(loaded, high=1000.0, calm=0.0))


def test_a_flagged_run_is_replaced_once_in_the_mirror_slot(fake_gate_dir) -> None:
    # off-r2 runs during a load spike; it is no slower — telemetry flags it, never its result
    g = fake_gate_dir(off={"elapsed": times("off", [10.0, 10.1, 9.9, 10.0, 10.05])},
                      on={"elapsed": times("on", [9.0, 9.1, 8.9, 9.0, 9.05])},
                      rules={"load_per_core_limit": 1.0, "evidence": "load1"})
    result = _runner(g, {"off-r2"}).start()
    runs = {r["label"]: r for r in result.finding.to_dict()["runs"]}
    assert runs["off-r2"]["contaminated"] and not runs["off-r2"]["used"] and not runs["on-r2"]["used"]
    assert "load1 max per core" in runs["off-r2"]["reason"]
    assert runs["off-r5"]["retry_of"] == 2 and runs["off-r5"]["used"]
    order = g.order()
    r2 = [label for label in order if label.endswith("-r2")]
    r5 = [label for label in order if label.endswith("-r5")]
    assert [x.split("-")[0] for x in r5] == [x.split("-")[0] for x in reversed(r2)]  # the mirror
    assert order.index(r5[0]) == 8  # at the end of stage 1
    assert result.finding.decision == "adopted"
    assert analyze_series(result.series_dir).to_dict() == result.finding.to_dict()


def test_a_second_replacement_makes_the_gate_inconclusive(fake_gate_dir) -> None:
    g = fake_gate_dir(off={"elapsed": times("off", [10.0, 10.1, 9.9, 10.0, 10.05])},
                      on={"elapsed": times("on", [9.0, 9.1, 8.9, 9.0, 9.05])},
                      rules={"load_per_core_limit": 1.0, "evidence": "load1"})
    result = _runner(g, {"off-r2", "on-r5"}).start()
    assert result.finding.decision == "inconclusive"
    assert "no replacement left" in result.finding.to_dict()["verdict"]["reasons"][0]
    assert len(g.order()) == 10  # stage 1, one replacement pair, and nothing more


def test_sequential_config_errors_name_the_key(gate_dir) -> None:
    g = gate_dir(gate={"policy": "sequential"})  # the fixture gate also says n = 3, order = abab
    done = gate_invoke("run", "off", "on", cwd=g.root)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"gate: error: {g.gate}: gate.n: does not apply to policy = \"sequential\" "
                                   "(it runs 4, then 8, then 12 runs per arm); remove it")
    g2 = gate_dir()
    done = gate_invoke("run", "off", "on", "--policy", "sequential", "--n", "3", cwd=g2.root)
    assert done.returncode == 2 and "--policy: sequential runs 4, then 8, then 12 runs per arm in" in done.stderr
    assert g2.order() == []


def test_warmup_run_is_discarded(fake_gate_dir) -> None:
    g = fake_gate_dir(off={"elapsed": {"off-r0": 15.0, "off-r1": 10.0, "off-r2": 10.1, "off-r3": 9.9}},
                      on={"elapsed": {"on-r1": 9.0, "on-r2": 9.1, "on-r3": 8.9}})
    done = gate_invoke("run", "off", "on", "--warmup", "1", cwd=g.root)
    assert done.returncode == 0, done.stderr
    assert g.order()[0] == "off-r0"
    finding = g.finding()
    warm = finding["runs"][0]
    assert warm["label"] == "off-r0" and not warm["used"] and warm["warmup"] is True
    assert finding["stats"]["n_off"] == 3 and finding["stats"]["mean_off"] == pytest.approx(10.0)
    assert finding["gate"]["warmup"] == 1 and finding["verdict"]["decision"] == "adopted"


def test_a_gate_file_that_states_no_warmup_discards_a_cold_first_run(fake_gate_dir) -> None:
    # The cold first run (+50 %) would inflate σ_off to 29 % and make the gate rejected; the default warm-up
    # takes it, is stated in the predecision and decides nothing: Δ −10 % from the three warm runs, adopted.
    g = fake_gate_dir(off={"elapsed": {"off-r0": 15.0, "off-r1": 10.0, "off-r2": 10.1, "off-r3": 9.9}},
                      on={"elapsed": {"on-r1": 9.0, "on-r2": 9.1, "on-r3": 8.9}})
    gate = tomllib.loads(g.gate.read_text())
    del gate["gate"]["warmup"]  # a new gate file: no warm-up stated
    g.gate.write_text(tomlkit.dumps(gate))
    assert load_gate(g.gate).gate.warmup == DEFAULT_WARMUP == 1
    done = gate_invoke("run", "off", "on", cwd=g.root)
    assert done.returncode == 0, done.stderr
    assert g.order() == ["off-r0", "off-r1", "on-r1", "off-r2", "on-r2", "off-r3", "on-r3"]
    finding = g.finding()
    assert finding["gate"]["warmup"] == 1 and finding["runs"][0]["warmup"] is True
    assert finding["stats"]["delta_pct"] == pytest.approx(-10.0) and finding["verdict"]["decision"] == "adopted"
    (series,) = g.series_dirs()
    assert "Warm-up: 1 run(s) in round 0" in (series / "predecision.toml").read_text()
    # stated as 0 it stays 0; a duet (its pairs run at once) takes none
    gate["gate"]["warmup"] = 0
    g.gate.write_text(tomlkit.dumps(gate))
    assert load_gate(g.gate).gate.warmup == 0
    configs = Path(__file__).resolve().parents[1] / "configs"
    assert load_gate(configs / "resident-graph-duet.toml").gate.warmup == 0
    assert load_gate(configs / "resident-graph.toml").gate.warmup == DEFAULT_WARMUP


def test_a_sequential_series_interrupted_in_stage_two_resumes_exactly(fake_gate_dir) -> None:
    g = fake_gate_dir(off={"elapsed": times("off", OFF12)}, on={"elapsed": times("on", ON12)}, rules=SEQ_RULES)
    config = load_gate(g.gate).with_overrides(policy="sequential", seed=1)

    def stop_at_r6(label: str):
        def read():
            if label == "off-r6":
                raise KeyboardInterrupt  # as if Ctrl-C arrived when off-r6's window opened
            return {"load1": 0.0, "load5": 0.0, "load15": 0.0}
        return read

    with pytest.raises(SeriesInterrupted, match="resume with"):
        SeriesRunner(config, config.arms["off"], config.arms["on"], load_reader_for=stop_at_r6).start()
    (series,) = g.series_dirs()
    before = g.order()
    assert len(before) >= 10 and "off-r6" not in before  # stage 1 and part of stage 2 ran
    done = gate_invoke("run", "--resume", str(series), cwd=g.root)
    assert done.returncode == 0, done.stderr
    assert g.order() == [s.label for s in plan("off", "on", 12, "block-shuffle-spread", 1)]
    finding = g.finding()
    assert [look["decision"] for look in finding["sequential"]["looks"]] == ["continue", "continue", "adopted"]
    assert gate_invoke("analyze", str(series), "--json", cwd=g.root).stdout == g.findings()[0].read_text()


def test_telemetry_flags_load_per_core_and_battery_never_the_value() -> None:
    from gatekit.config import RulesSpec
    from gatekit.rules import run_table
    rows = [{"order": k, "arm": "off", "label": f"off-r{k}", "pair": k, "value": value, "failed": False,
             "error": "", "samples": 3, "load1_mean": load, "load1_max": load, "on_ac": ac, "retry_of": None}
            for k, (value, load, ac) in enumerate([(10.0, 1.0, True), (50.0, 1.0, True), (10.0, 7.0, True),
                                                   (10.0, 1.0, False)], 1)]
    flagged, detail = sq.telemetry_flags(run_table(rows), RulesSpec(load_per_core_limit=1.5), cores=4)
    # an absurd value alone is not flagged; 7.0 / 4 cores = 1.75 > 1.5 is; so is running on battery
    assert flagged.tolist() == [False, False, True, True]
    assert detail[2] == "flagged: load1 max per core 1.75 > 1.5" and detail[3] == "flagged: on battery"
    unknown, _ = sq.telemetry_flags(run_table(rows), RulesSpec(load_per_core_limit=1.5), cores=None)
    assert unknown.tolist() == [False, False, False, True]  # without a core count only the battery counts


def test_backend_evidence_flags_a_run_for_the_sequential_policy() -> None:
    """Another GPU process seen by the backend flags the window, whatever the run's value."""
    from gatekit.policies import sequential
    from gatekit.config import RulesSpec
    from gatekit.rules import run_table

    rows = [{"order": i + 1, "arm": arm, "label": f"{arm}-r{k}", "pair": k, "value": 10.0, "failed": False,
             "error": "", "samples": 3, "load1_mean": 0.5, "load1_max": 0.5,
             "backend_evidence": "other GPU process pid 4242 (python) using 2.0 GiB" if (arm, k) == ("on", 2) else "",
             "on_ac": None, "retry_of": None}
            for i, (arm, k) in enumerate([("off", 1), ("on", 1), ("on", 2), ("off", 2)])]
    flagged, detail = sequential.telemetry_flags(run_table(rows), RulesSpec(), cores=2)
    assert flagged.tolist() == [False, False, True, False]
    assert "other GPU process pid 4242" in detail[2]


def test_the_predecision_keys_the_design_version(gate_dir) -> None:
    from gatekit.prereg import DecisionSpec
    g = gate_dir()
    config = load_gate(g.gate)
    classic = DecisionSpec.from_gate(config, "off", "on")
    assert "sequential_version" not in classic.to_dict()  # a classic predecision reads exactly as before
    assert DecisionSpec.from_dict(classic.to_dict()) == classic
    seq = DecisionSpec.from_gate(config.with_overrides(policy="sequential"), "off", "on")
    assert seq.to_dict()["sequential_version"] == 8 and DecisionSpec.from_dict(seq.to_dict()) == seq
    # a predecision/1 written by v3 has no sequential_version: its upgrade says which design it preregistered
    legacy = {"schema": "gatekit.predecision/1",
              "decision": {k: v for k, v in seq.to_dict().items() if k != "sequential_version"}}
    assert DecisionSpec.from_dict(upgrade(legacy, legacy["schema"])["decision"]).sequential_version == 3
    assert policy_for("sequential", 3).max_rounds(0) == 8 and policy_for("sequential", 4).max_rounds(0) == 12
