"""Sequential v8's run order (block-shuffle-spread: block-shuffle, each block drawn among the arrangements that leave
no job every k-th run with five or more runs all on one arm), v7's (block-shuffle: each block of four rounds two AB
and two BA in a seeded order), v6's (abba-baab: each block of four runs ABBA or BAAB by a seeded coin), and what they
do against interference on every k-th run (a periodic job), simulated at every period 2–12 and phase."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps

from gatekit.policy_descriptors import describe, policy_for
from gatekit.schedule import BLOCK_ARRANGEMENTS, one_arm_jobs, plan, round_orders
from gatekit.simulate import Scenario, simulate, simulate_runs


def test_each_block_of_four_runs_is_abba_or_baab_and_cancels_a_linear_drift() -> None:
    for seed in range(50):
        firsts = round_orders(12, "abba-baab", seed)
        runs = [arm for off_first in firsts for arm in (("off", "on") if off_first else ("on", "off"))]
        for start in range(0, 24, 4):
            block = "".join("A" if arm == runs[start] else "B" for arm in runs[start:start + 4])
            assert block == "ABBA"  # relabelled by its first arm: ABBA or BAAB
            off = [p for p in range(start, start + 4) if runs[p] == "off"]
            assert len(off) == 2 and sum(off) == sum(range(start, start + 4)) / 2  # a linear drift cancels
    draws = [tuple(round_orders(12, "abba-baab", seed)[::2]) for seed in range(400)]
    assert len(set(draws)) > 40  # the blocks are drawn, not fixed (2^6 = 64 possible)


def test_the_order_is_seeded_and_a_prefix_of_a_longer_plan() -> None:
    assert round_orders(12, "abba-baab", 7) == round_orders(12, "abba-baab", 7)
    assert round_orders(8, "abba-baab", 7) == round_orders(12, "abba-baab", 7)[:8]
    assert round_orders(5, "abba-baab", 7) == round_orders(12, "abba-baab", 7)[:5]
    labels = [slot.label for slot in plan("off", "on", 4, "abba-baab", 3)]
    assert sorted(labels) == sorted(f"{arm}-r{k}" for arm in ("off", "on") for k in range(1, 5))


def test_each_block_of_four_rounds_holds_two_ab_and_two_ba_and_cancels_a_linear_drift() -> None:
    blocks = set()
    for seed in range(100):
        firsts = round_orders(12, "block-shuffle", seed)
        assert firsts == round_orders(12, "block-shuffle", seed) and round_orders(5, "block-shuffle", seed) == firsts[:5]
        runs = [arm for off_first in firsts for arm in (("off", "on") if off_first else ("on", "off"))]
        for start in range(0, 24, 8):
            off = [p for p in range(start, start + 8) if runs[p] == "off"]
            assert len(off) == 4 and sum(off) == sum(range(start, start + 8)) / 2  # a linear drift cancels
            blocks.add(tuple(firsts[start // 2:start // 2 + 4]))
    assert len(blocks) == 6  # every arrangement of two AB and two BA rounds is drawn
    rng = np.random.default_rng(3)
    _, _, pos_off, _ = simulate_runs(Scenario(), "block-shuffle", 12, 2000, rng)
    for start in range(0, 24, 8):  # the simulated order: four off runs per block, drift cancelled
        in_block = (pos_off >= start) & (pos_off < start + 8)
        assert (in_block.sum(axis=1) == 4).all() and (np.where(in_block, pos_off, 0).sum(axis=1) == 2 * (2 * start + 7)).all()


def _one_arm_jobs_by_hand(firsts: list[bool] | np.ndarray) -> list[tuple[int, int]]:
    """(period, phase) of every job every k-th run with five or more runs in these rounds, all on one arm."""
    arms = [arm for off_first in firsts for arm in (("off", "on") if off_first else ("on", "off"))]
    return [(period, phase) for period in range(2, len(arms)) for phase in range(period)
            if len(arms[phase::period]) >= 5 and len(set(arms[phase::period])) == 1]


def test_the_round_level_thue_morse_plan_puts_a_job_every_third_run_on_one_arm() -> None:
    # AB BA BA AB | BA AB AB BA: runs ABBABAAB BAABABBA, Thue–Morse; runs 0, 3, …, 15 are all A (Newman's bias)
    thue_morse_rounds = [True, False, False, True, False, True, True, False]
    assert _one_arm_jobs_by_hand(thue_morse_rounds) == [(3, 0)]
    assert one_arm_jobs(np.array(thue_morse_rounds)) == 1
    assert one_arm_jobs(np.array([not first for first in thue_morse_rounds])) == 1  # its mirror: all B
    # AB BA BA AB | AB AB BA BA: the same first block, a job every third run split 3 : 3
    assert _one_arm_jobs_by_hand([True, False, False, True, True, True, False, False]) == []


def test_the_spread_order_keeps_block_shuffle_s_blocks_and_leaves_no_periodic_job_on_one_arm() -> None:
    first_eight = set()
    for seed in range(400):
        firsts = round_orders(12, "block-shuffle-spread", seed)
        assert round_orders(5, "block-shuffle-spread", seed) == firsts[:5] and round_orders(8, "block-shuffle-spread",
                                                                                            seed) == firsts[:8]
        runs = [arm for off_first in firsts for arm in (("off", "on") if off_first else ("on", "off"))]
        for start in range(0, 24, 8):
            off = [p for p in range(start, start + 8) if runs[p] == "off"]
            assert len(off) == 4 and sum(off) == sum(range(start, start + 8)) / 2  # a linear drift cancels
        assert _one_arm_jobs_by_hand(firsts) == []
        first_eight.add(tuple(firsts[:8]))
    pairs = [a + b for a in BLOCK_ARRANGEMENTS for b in BLOCK_ARRANGEMENTS]
    left_out = [pair for pair in pairs if pair not in first_eight]
    # every pair of blocks is drawn but the 10 of 36 where a job every third run has 5 or 6 runs on one arm
    assert len(left_out) == 10 and all(job[0] == 3 for pair in left_out for job in _one_arm_jobs_by_hand(pair))
    assert all(_one_arm_jobs_by_hand(pair) for pair in left_out)
    rng = np.random.default_rng(5)  # the simulated order draws the same plans, with the same probabilities
    _, _, pos_off, _ = simulate_runs(Scenario(), "block-shuffle-spread", 12, 12_000, rng)
    simulated = (pos_off[:, :8] % 2 == 0)  # off runs first in the round
    counts = {pair: 0 for pair in pairs}
    for row in simulated:
        counts[tuple(bool(x) for x in row)] += 1
    allowed_after = {a: sum(a + b not in left_out for b in BLOCK_ARRANGEMENTS) for a in BLOCK_ARRANGEMENTS}
    for pair, count in counts.items():
        p = 0.0 if pair in left_out else 1 / 6 / allowed_after[pair[:4]]
        assert abs(count - 12_000 * p) <= 4.5 * math.sqrt(12_000 * p * (1 - p)), (pair, count, p)


def test_the_spread_order_is_what_new_series_preregister_v7_keeps_block_shuffle_v6_abba_baab() -> None:
    assert describe("sequential").version == 8 and describe("sequential").order == "block-shuffle-spread"
    assert policy_for("sequential").order == "block-shuffle-spread" and policy_for("sequential", 8).order == \
        "block-shuffle-spread"
    assert policy_for("sequential", 7).order == "block-shuffle" and policy_for("sequential", 6).order == "abba-baab"
    assert policy_for("sequential", 5).order == "thue-morse" and policy_for("sequential", 4).order == "thue-morse"
    # the order changes no critical value (it does not change the statistic's null distribution)
    assert policy_for("sequential", 6).design.critical == policy_for("sequential", 5).design.critical
    assert policy_for("sequential", 8).design.critical == policy_for("sequential", 7).design.critical


def test_the_simulated_order_is_the_gate_s_order() -> None:
    rng = np.random.default_rng(3)
    _, _, pos_off, pos_on = simulate_runs(Scenario(), "abba-baab", 12, 500, rng)
    for row in range(500):
        for start in range(0, 24, 4):  # two rounds: off at 0 and 3 of the block, or at 1 and 2
            off = sorted(p for p in pos_off[row] if start <= p < start + 4)
            assert off in ([start, start + 3], [start + 1, start + 2])
    assert 0.4 < float(np.mean(pos_off[:, 0] == 0)) < 0.6


def test_periodic_interference_slows_every_kth_run_at_its_phase() -> None:
    rng = np.random.default_rng(0)
    scenario = Scenario(cv_off_pct=0.0, periodic_pct=8.0, period=3, phase=1)
    off, on, pos_off, pos_on = simulate_runs(scenario, "abab", 4, 1, rng)
    slowed = {int(p) for p, x in zip([*pos_off[0], *pos_on[0]], [*off[0], *on[0]]) if x > 0}
    assert slowed == {1, 4, 7}
    assert math.isclose(max(float(off.max()), float(on.max())), math.log1p(0.08))


# -- the target: A/A false adoption and regression together ≤ 5 % at every period 2–12 and phase -----------

DRAWS = 4_000  # per cell: modest, so the bound below leaves Monte-Carlo room
TARGET_PCT = 5.0
CELLS = [(k, phase) for k in range(2, 13) for phase in range(k)]
# every cell and both outcomes tested at once: a family-wise 1 % chance that a rate exactly at the target fails
Z = float(sps.norm.isf(0.01 / (2 * len(CELLS))))
BOUND_PCT = TARGET_PCT + Z * 100 * math.sqrt(TARGET_PCT / 100 * (1 - TARGET_PCT / 100) / DRAWS)
# the two errors together, one rate a cell
Z_EITHER = float(sps.norm.isf(0.01 / len(CELLS)))
EITHER_BOUND_PCT = TARGET_PCT + Z_EITHER * 100 * math.sqrt(TARGET_PCT / 100 * (1 - TARGET_PCT / 100) / DRAWS)
# Period 3 at phase 0 is the one cell v6 does not hold to 5 % (10 000 draws: 5.8 % adoption, 6.7 % regression;
# v5: 49 % each): positions 0 and 3 of every block of four share an arm in ABBA and BAAB alike, so every third
# block takes two hits on one arm, and at look 2 the four blocks' coins agree with probability 1/8. v7 (block-
# shuffle) holds each to 3.0 %, but not both together: 2.96 % + 3.00 % (benchmarks/periodic_interference.py --version 7,
# 20 000 draws a cell); v8 (block-shuffle-spread) holds both together to 0.52 %.
OPEN_CELLS = {(3, 0)}


def _aa(period: int, phase: int, version: int | None = None):  # type: ignore[no-untyped-def]
    scenario = Scenario(cv_off_pct=0.5, periodic_pct=8.0, period=period, phase=phase)
    return simulate("sequential", scenario, draws=DRAWS, seed=period * 100 + phase, version=version)


def test_the_current_version_holds_both_errors_together_under_periodic_interference_at_every_period_and_phase() -> None:
    assert 6.0 < EITHER_BOUND_PCT < BOUND_PCT < 7.5  # the room the draws leave, computed above
    for period, phase in CELLS:
        result = _aa(period, phase)
        either = result.rates["adopted"].pct + result.rates["regression"].pct
        assert either <= EITHER_BOUND_PCT, (period, phase, result.rates["adopted"], result.rates["regression"])


def test_v8_holds_both_errors_together_at_period_3_phase_0_where_v7_does_not() -> None:
    scenario = Scenario(cv_off_pct=0.5, periodic_pct=8.0, period=3, phase=0)
    draws = 20_000
    either = {}
    for version in (8, 7):
        result = simulate("sequential", scenario, draws=draws, seed=30, version=version)
        p = (result.rates["adopted"].pct + result.rates["regression"].pct) / 100
        either[version] = (100 * p, 100 * math.sqrt(p * (1 - p) / draws))  # one rate: a gate decides one way
    (v8_pct, v8_se), (v7_pct, v7_se) = either[8], either[7]
    assert v8_pct + 4 * v8_se < TARGET_PCT < v7_pct - 3 * v7_se, either  # about 0.5 % against 5.9 %


def test_v7_holds_period_3_phase_0_where_v6_does_not() -> None:
    v7, v6 = (simulate("sequential", Scenario(cv_off_pct=0.5, periodic_pct=8.0, period=3, phase=0), draws=20_000,
                       seed=30, version=version) for version in (7, 6))
    for outcome in ("adopted", "regression"):  # about 3.1 % against 6 %: apart by more than 8 SE
        assert v7.rates[outcome].pct + 4 * v7.rates[outcome].se_pct < 5.0 < v6.rates[outcome].pct


def test_v6_holds_both_errors_under_periodic_interference_except_period_3_phase_0() -> None:
    for period, phase in CELLS:
        result = _aa(period, phase, version=6)
        if (period, phase) in OPEN_CELLS:
            v5 = _aa(period, phase, version=5)
            for outcome in ("adopted", "regression"):
                assert result.rates[outcome].pct < v5.rates[outcome].pct / 4, (period, phase, outcome)
            continue
        for outcome in ("adopted", "regression"):
            assert result.rates[outcome].pct <= BOUND_PCT, (period, phase, outcome, result.rates[outcome])


def test_the_bound_fails_v5_where_thue_morse_aliases() -> None:
    worst = max((_aa(3, phase, version=5) for phase in range(3)),
                key=lambda r: r.rates["adopted"].pct + r.rates["regression"].pct)
    assert worst.rates["adopted"].pct > BOUND_PCT and worst.rates["regression"].pct > BOUND_PCT
