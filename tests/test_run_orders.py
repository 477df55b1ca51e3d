"""Sequential v7's run order (block-shuffle: each block of four rounds two AB and two BA in a seeded order), v6's
(abba-baab: each block of four runs ABBA or BAAB by a seeded coin), and what they do against interference on every
k-th run (a periodic job), simulated at every period 2–12 and phase."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps

from gatekit.policy_descriptors import describe, policy_for
from gatekit.schedule import plan, round_orders
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


def test_block_shuffle_is_what_new_series_preregister_v6_keeps_abba_baab_and_v5_thue_morse() -> None:
    # v8 (what a new series preregisters) keeps v7's block-shuffle order
    assert describe("sequential").version == 8 and describe("sequential").order == "block-shuffle"
    assert policy_for("sequential", 7).order == "block-shuffle"
    assert policy_for("sequential").order == "block-shuffle" and policy_for("sequential", 6).order == "abba-baab"
    assert policy_for("sequential", 5).order == "thue-morse" and policy_for("sequential", 4).order == "thue-morse"
    # v6's constants are v5's (the order does not change the statistic's null distribution)
    assert policy_for("sequential", 6).design.critical == policy_for("sequential", 5).design.critical


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


# -- the target: A/A false adoption and false regression ≤ 5 % at every period 2–12 and phase -----------

DRAWS = 4_000  # per cell: modest, so the bound below leaves Monte-Carlo room
TARGET_PCT = 5.0
CELLS = [(k, phase) for k in range(2, 13) for phase in range(k)]
# every cell and both outcomes tested at once: a family-wise 1 % chance that a rate exactly at the target fails
Z = float(sps.norm.isf(0.01 / (2 * len(CELLS))))
BOUND_PCT = TARGET_PCT + Z * 100 * math.sqrt(TARGET_PCT / 100 * (1 - TARGET_PCT / 100) / DRAWS)
# Period 3 at phase 0 is the one cell v6 does not hold to 5 % (10 000 draws: 5.8 % adoption, 6.7 % regression;
# v5: 49 % each): positions 0 and 3 of every block of four share an arm in ABBA and BAAB alike, so every third
# block takes two hits on one arm, and at look 2 the four blocks' coins agree with probability 1/8. v7 (block-
# shuffle) holds it: 3.1 % / 3.0 % (benchmarks/periodic_interference.py --version 7, 20 000 draws a cell).
OPEN_CELLS = {(3, 0)}


def _aa(period: int, phase: int, version: int | None = None):  # type: ignore[no-untyped-def]
    scenario = Scenario(cv_off_pct=0.5, periodic_pct=8.0, period=period, phase=phase)
    return simulate("sequential", scenario, draws=DRAWS, seed=period * 100 + phase, version=version)


def test_the_current_version_holds_both_errors_under_periodic_interference_at_every_period_and_phase() -> None:
    assert 6.0 < BOUND_PCT < 7.5  # the room the draws leave, computed above
    for period, phase in CELLS:
        result = _aa(period, phase)
        for outcome in ("adopted", "regression"):
            assert result.rates[outcome].pct <= BOUND_PCT, (period, phase, outcome, result.rates[outcome])


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
