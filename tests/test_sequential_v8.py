"""Sequential v8: v7 with round 1 (the series' first run, cold when no warm-up ran) left out of the plain mean's
interval that equivalence also needs, in the block-shuffle-spread order (tests/test_run_orders.py); a v7 series keeps
v7's rule."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy import stats as sps

from gatekit.config import load_gate
from gatekit.policies import sequential as sq
from gatekit.policy_descriptors import describe, policy_for
from gatekit.series.runner import SeriesRunner
from gatekit.simulate import Scenario, simulate
from gatekit.verify import analyze_series
from tests.conftest import gate_invoke
from tests.fakes import LoadScript
from tests.test_sequential import SEQ_RULES, times

DRAWS = 20_000
# An A/A series whose first run (off-r1) is 3 % slower, as a cold first run is; the other rounds differ by ±0.2 %.
OFF_COLD = [10.3] + [10.0] * 11
ON_WARM = [10.0, 10.02, 9.98, 10.01, 9.99, 10.02, 9.98, 10.0, 10.01, 9.99, 10.0, 10.02]


def test_v8_leaves_round_1_out_of_the_mean_interval_as_scipy_gives_it() -> None:
    rng = np.random.default_rng(5)
    d = rng.normal(0.003, 0.007, (200, 8))
    d[:, 0] += rng.choice([-0.03, 0.0, 0.03], 200)  # a cold first run in some of them, on either arm
    inside = sq.mean_inside_floor(d, 1.0, skip_rounds=1)
    for row, verdict in zip(d, inside):
        rest = row[1:]
        low, high = sps.t.interval(1 - 2 * sq.CALIBRATION_ALPHA, len(rest) - 1, loc=rest.mean(), scale=sps.sem(rest))
        assert bool(verdict) is bool(low > math.log(0.99) and high < math.log(1.01))
    assert 0 < inside.sum() < 200  # both answers occur
    assert (inside != sq.mean_inside_floor(d, 1.0)).any()  # and round 1 changes some of them


def test_the_mean_interval_by_hand_with_and_without_round_1() -> None:
    d = np.log(np.array(ON_WARM[:8]) / np.array(OFF_COLD[:8]))
    # rounds 2–8: ln(1.002), ln(0.998), ln(1.001), ln(0.999), ln(1.002), ln(0.998), ln(1): mean −1.3e-6, sd 1.7321e-3,
    # t(0.955, 6) = 2.0192 → half 2.0192 · 1.7321e-3 / √7 = 1.3219e-3: inside ±ln(1.01) ≈ ±0.995 %
    rest = d[1:]
    assert abs(rest.mean()) < 2e-6 and abs(rest.std(ddof=1) - 1.7321e-3) < 1e-7
    assert abs(float(sps.t.ppf(0.955, 6)) - 2.0192) < 1e-4
    assert bool(sq.mean_inside_floor(d, 1.0, skip_rounds=1))
    # all 8 rounds: round 1's ln(10/10.3) = −2.956 % moves the mean to −0.370 % and the sd to 1.0572 %; t(0.955, 7)
    # gives half 0.735 %, so the lower end −1.1045 % lies beyond ln(0.99) = −1.005 %
    assert abs(d.mean() + 0.0036960) < 1e-6 and abs(d.std(ddof=1) - 0.010572) < 1e-6
    assert abs(d.mean() - float(sps.t.ppf(0.955, 7)) * d.std(ddof=1) / math.sqrt(8) + 0.011045) < 1e-6
    assert not bool(sq.mean_inside_floor(d, 1.0))


def test_a_cold_first_round_is_equivalent_at_look_2_under_v8_and_at_look_3_under_v7() -> None:
    off, on = np.log([OFF_COLD]), np.log([ON_WARM])
    for design, runs in ((sq.V8, 8), (sq.V7, 12)):
        codes, used = sq.design_codes(off, on, floor_pct=1.0, direction="lower", design=design)
        assert sq.CODE_NAMES[int(codes[0])] == "equivalent" and int(used[0]) == runs, design.version


def _series(fake_gate_dir, version: int):  # type: ignore[no-untyped-def]
    g = fake_gate_dir(off={"elapsed": times("off", OFF_COLD)}, on={"elapsed": times("on", ON_WARM)},
                      rules=SEQ_RULES, gate={"seed": 1, "warmup": 0})
    config = load_gate(g.gate).with_overrides(policy="sequential", seed=1)
    runner = SeriesRunner(config, config.arms["off"], config.arms["on"], load_reader_for=LoadScript(calm=0.0))
    runner.spec = dataclasses.replace(runner.spec, sequential_version=version)  # as a gate of that version
    runner.policy = policy_for("sequential", version)
    return g, runner.start().finding.to_dict()


def test_a_v7_series_is_still_decided_by_v7(fake_gate_dir) -> None:
    g, finding = _series(fake_gate_dir, 7)
    seq = finding["sequential"]
    assert seq["version"] == 7 and "mean_skip_rounds" not in seq and seq["mean_equivalence"] is True
    assert finding["verdict"]["decision"] == "equivalent" and [look["n_off"] for look in seq["looks"]] == [4, 8, 12]
    (series,) = g.series_dirs()
    assert analyze_series(series).to_dict() == finding  # re-analysed with v7's rule, not the current one
    verified = gate_invoke("verify", str(series), str(g.findings()[0]), cwd=g.root)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_the_same_runs_under_v8_are_equivalent_at_look_2(fake_gate_dir) -> None:
    g, finding = _series(fake_gate_dir, 8)
    seq = finding["sequential"]
    assert seq["version"] == 8 and seq["mean_skip_rounds"] == 1 and "(round 1 left out)" in seq["method"]
    assert finding["verdict"]["decision"] == "equivalent" and [look["n_off"] for look in seq["looks"]] == [4, 8]
    (series,) = g.series_dirs()
    assert analyze_series(series).to_dict() == finding


def test_v8_is_what_a_new_series_preregisters_and_keeps_v7_s_other_rules_but_its_order() -> None:
    assert describe("sequential").version == 8 and policy_for("sequential").design is sq.V8
    assert dataclasses.replace(sq.V8, version=7, mean_skip_rounds=0, order="block-shuffle") == sq.V7
    assert sq.V7.mean_skip_rounds == 0  # a v7 series keeps its own mean interval


def test_v8_states_its_mean_rule_and_v7_keeps_its_words() -> None:
    from gatekit.config import RulesSpec, ThresholdSpec
    v7, v8 = (" ".join(policy_for("sequential", v).stated_rules("t", RulesSpec(), ThresholdSpec())) for v in (7, 8))
    old = ("t interval of the plain mean of d, mean +/- t(1 - 0.045, n - 1) sd / sqrt(n) (a slow state in some of one "
           "arm's runs moves the mean, not the robust estimate)")
    assert old in v7 and "round 1" not in v7
    assert ("t interval of the plain mean of d over rounds 2 to n, mean +/- t(1 - 0.045, n - 2) sd / sqrt(n - 1)"
            in v8) and "round 1 holds the series' first run" in v8
    assert v7.replace("version 7", "version 8") != v8  # the predecisions differ in words, not only the number


def test_the_cold_first_run_row_meets_its_runs_bound_under_v8() -> None:
    cold = Scenario(cv_off_pct=0.5, cold_first_pct=3.0)
    v8, v7 = (simulate("sequential", cold, draws=DRAWS, seed=0, version=v) for v in (8, 7))
    assert v8.runs_per_arm + 3 * v8.runs_per_arm_se <= 8.0 < v7.runs_per_arm - 3 * v7.runs_per_arm_se  # 7.65 against 8.26
    assert v8.adopted.pct < 0.5 and v8.rates["regression"].pct < 0.5


def test_a_slow_state_in_the_on_arm_only_is_still_never_equivalent_beyond_5_percent() -> None:
    # the issue's row (50 % × +10 %) and magnitudes other than those chosen on (30 % × +20 % was looked at)
    for rate, pct, cv in ((0.5, 10.0, 0.5), (0.5, 20.0, 0.5), (0.4, 15.0, 0.5), (0.6, 8.0, 1.0), (0.5, 5.0, 2.0)):
        scenario = Scenario(cv_off_pct=cv, outlier_rate=rate, outlier_pct=pct, outlier_on_only=True)
        v8 = simulate("sequential", scenario, draws=DRAWS, seed=7)
        assert v8.rates["equivalent"].pct + 3 * v8.rates["equivalent"].se_pct <= 5.0, (rate, pct, cv, v8.rates)
